"""``gym repo-tasks generate``: deterministic under a seed, every task validated in the sandbox, and a
collection through ``simple_agent`` where a scripted model applies each task's reference fix scores 1.0.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import tempfile
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from gym_core.sandbox import Sandbox, SandboxLimits
from gym_core.testing import HTTPCaller, plugin_manager, read_rows, running_servers

import gym_repo.plugin
import gym_scripted.plugin
import gym_simple_agent.plugin
from gym_repo.command import repo_tasks
from gym_repo.generate import generate_tasks, mutations
from gym_repo.server import run_hidden_tests
from gym_repo.workspace import load_repository

PACKAGE = Path(__file__).resolve().parents[1]
RUNNER = resources.files("gym_repo").joinpath("runner.py").read_bytes()


def fixed_files(task: dict[str, Any]) -> dict[str, str]:
    """The task's repository with its reference patch applied by `patch` (on the host: our own files)."""
    with tempfile.TemporaryDirectory() as root:
        for name, text in task["repository"].items():
            Path(root, name).parent.mkdir(parents=True, exist_ok=True)
            Path(root, name).write_text(text)
        subprocess.run(
            ["patch", "-p1", "--batch", "--quiet"], input=task["reference_patch"].encode(), cwd=root, check=True
        )
        return {name: Path(root, name).read_text() for name in task["repository"]}


@pytest.fixture(scope="module")
def tasks_seed_0() -> list[dict[str, Any]]:
    return asyncio.run(generate_tasks(20, 0))


def test_the_same_seed_gives_the_same_tasks_and_another_seed_others(tasks_seed_0):
    again = asyncio.run(generate_tasks(5, 0))
    assert again == tasks_seed_0[:5]
    other = asyncio.run(generate_tasks(5, 1))
    assert [t["repository"] for t in other] != [t["repository"] for t in again]
    # The example rows were generated with seed 0: the generator still makes them.
    examples = [
        {k: v for k, v in row.items() if k != "conformance"} for row in read_rows(PACKAGE / "data" / "example.jsonl")
    ]
    assert examples == tasks_seed_0[: len(examples)]


def test_every_task_is_validated_broken_fails_its_tests_to_fix_and_the_fix_passes_all(tasks_seed_0):
    async def check() -> None:
        sandbox = Sandbox("bwrap")
        await sandbox.start()
        limits = SandboxLimits(wall_time_s=20, scratch_mb=64)
        for task in tasks_seed_0:
            assert task["tests_to_fix"] and task["issue"] in task["responses_create_params"]["input"][1]["content"]
            ids = task["tests_to_fix"] + task["tests_to_keep"]
            assert not any(name.startswith("tests/") for name in task["repository"])  # the tests stay hidden
            broken = load_repository({**task["repository"], **task["hidden_tests"]}, max_bytes=1 << 24)
            before = await run_hidden_tests(sandbox, broken, ids, RUNNER, limits)
            assert not any(before[t].passed for t in task["tests_to_fix"]), task["task_id"]
            assert all(before[t].passed for t in task["tests_to_keep"]), task["task_id"]
            fixed = load_repository({**fixed_files(task), **task["hidden_tests"]}, max_bytes=1 << 24)
            after = await run_hidden_tests(sandbox, fixed, ids, RUNNER, limits)
            assert all(r.passed for r in after.values()), task["task_id"]

    asyncio.run(check())
    kinds = {t["mutation"]["kind"] for t in tasks_seed_0}
    assert kinds == {"operator", "off_by_one", "wrong_branch", "dropped_statement"}


def test_mutations_of_each_kind():
    source = (
        "def f(xs, n):\n    total = 0\n    for x in xs:\n        if x > n:\n            total += x\n    return total\n"
    )
    made = {m.kind: text for text, m in mutations(source)}
    assert "if x >= n" in made["operator"] or "total -= x" in made["operator"]
    assert "total = 1" in made["off_by_one"]
    assert "if not x > n" in made["wrong_branch"]
    assert "total = 0" not in made["dropped_statement"]


def test_the_command_writes_the_tasks(tmp_path, tasks_seed_0):
    out = tmp_path / "tasks.jsonl"
    result = CliRunner().invoke(repo_tasks, ["generate", "-n", "2", "--seed", "0", "--output", str(out)])
    assert result.exit_code == 0, result.output
    assert "2 tasks (seed 0)" in result.output and "tasks/min" in result.output
    assert read_rows(out) == tasks_seed_0[:2]


def test_a_scripted_model_applying_each_reference_fix_scores_1_on_20_generated_tasks(tasks_seed_0):
    config = {
        "repo": {"plugin": "repo"},
        "policy_model": {"plugin": "scripted"},
        "repo_agent": {
            "plugin": "simple_agent",
            "model_server": "policy_model",
            "resources_server": "repo",
            "max_steps": 4,
        },
    }
    plugins = plugin_manager(gym_repo.plugin, gym_scripted.plugin, gym_simple_agent.plugin)
    with running_servers(config, plugins) as global_config:
        agent = HTTPCaller(global_config.instances["repo_agent"].url, 120, auth_token=global_config.auth_token)
        rewards = []
        for task in tasks_seed_0:
            script = [
                {"tool_calls": [{"name": "apply_patch", "arguments": {"patch": task["reference_patch"]}}]},
                {"text": "Fixed."},
            ]
            params = {**task["responses_create_params"], "metadata": {"scripted_turns": json.dumps(script)}}
            reply = agent.post("/run", {**task, "responses_create_params": params})
            assert reply.status == 200, reply.json()
            rewards.append(reply.json()["reward"])
        assert rewards == [1.0] * 20


def test_the_pytest_runner_makes_the_same_tasks_as_pytest_tests_each_validated(tmp_path, tasks_seed_0):
    # `--runner pytest`: the same packages, mutations and issues, the hidden tests as parametrized pytest
    # functions (node ids), deterministic (the example rows), each validated like the unittest tasks.
    out = tmp_path / "tasks.jsonl"
    args = ["generate", "-n", "3", "--seed", "0", "--runner", "pytest", "--output", str(out)]
    result = CliRunner().invoke(repo_tasks, args)
    assert result.exit_code == 0, result.output
    tasks = read_rows(out)
    assert tasks[:2] == read_rows(PACKAGE / "data" / "example_pytest.jsonl")
    for task, twin in zip(tasks, tasks_seed_0, strict=False):
        assert task["test_runner"] == "pytest" and task["task_id"] == twin["task_id"].replace("repo-", "repo-pytest-")
        assert (task["repository"], task["reference_patch"], task["issue"]) == (
            twin["repository"],
            twin["reference_patch"],
            twin["issue"],
        )
        assert all(t.startswith("tests/test_") and "::" in t for t in task["tests_to_fix"] + task["tests_to_keep"])
        assert len(task["tests_to_fix"]) == len(twin["tests_to_fix"])

    async def check() -> None:
        sandbox = Sandbox("bwrap")
        await sandbox.start()
        limits = SandboxLimits(wall_time_s=60, cpu_time_s=30, scratch_mb=64)
        for task in tasks:
            ids = task["tests_to_fix"] + task["tests_to_keep"]
            hidden = list(task["hidden_tests"])
            broken = load_repository({**task["repository"], **task["hidden_tests"]}, max_bytes=1 << 24)
            before = await run_hidden_tests(sandbox, broken, ids, RUNNER, limits, test_runner="pytest", hidden=hidden)
            assert not any(before[t].passed for t in task["tests_to_fix"]), task["task_id"]
            assert all(before[t].passed for t in task["tests_to_keep"]), task["task_id"]
            fixed = load_repository({**fixed_files(task), **task["hidden_tests"]}, max_bytes=1 << 24)
            after = await run_hidden_tests(sandbox, fixed, ids, RUNNER, limits, test_runner="pytest", hidden=hidden)
            assert all(r.passed for r in after.values()), task["task_id"]

    asyncio.run(check())
