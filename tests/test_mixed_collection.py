"""One collection across five environments: tasks routed by ``agent_ref``, rows stamped with the
environment that verified them, a profile per environment, each environment's metrics from its own rows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from gym_core.testing import running_servers

from gym_cli.main import cli

ROOT = Path(__file__).resolve().parents[1]
MIXED = ROOT / "examples" / "mixed"

# Each environment's rewards, in task order: each row's script solves it except the third of math
# and counter (a wrong sum, a wrong increment), string_match's second (80 km for 80: a near match),
# and the second of mcqa and arc_agi (a wrong letter, no grid at all).
REWARDS = {
    "math": [1.0, 1.0, 0.0],
    "counter": [1.0, 1.0, 0.0],
    "string_match": [1.0, 0.98],
    "mcqa": [1.0, 0.0],
    "arc_agi": [1.0, 0.0],
}


def test_a_mixed_collection_reports_each_environment(tmp_path):
    out = tmp_path / "mixed.jsonl"
    tasks = [json.loads(line) for line in (MIXED / "tasks.jsonl").read_text().splitlines()]
    config = yaml.safe_load((MIXED / "mixed_scripted.yaml").read_text())
    with running_servers(config) as running:
        result = CliRunner().invoke(
            cli(),
            ["collect", "--input", str(MIXED / "tasks.jsonl"), "--output", str(out), "--head", running.head_url],
            catch_exceptions=False,
        )
    assert result.exit_code == 0, result.output
    rows = sorted((json.loads(line) for line in out.read_text().splitlines()), key=lambda r: r["task_index"])
    assert len(rows) == len(tasks) == sum(map(len, REWARDS.values()))
    rewards: dict[str, list[float]] = {}
    for row, task in zip(rows, tasks):
        # Each task went to the environment of the agent it names, and was verified there.
        expected_environment = task["agent_ref"]["name"].removesuffix("_agent")
        assert (row["environment"], row["resources_server"]) == (expected_environment, expected_environment)
        rewards.setdefault(row["environment"], []).append(row["reward"])
    assert rewards == REWARDS

    profile = json.loads(out.with_name("mixed.profile.json").read_text())
    environments = profile["environments"]
    assert set(environments) == set(REWARDS)
    for name, block in environments.items():
        expected = REWARDS[name]
        assert block["num_tasks"] == block["num_rollouts"] == len(expected), name
        assert block["fields"]["reward"]["mean"] == pytest.approx(sum(expected) / len(expected)), name
    # Each plugin's metrics count its own environment's rows only.
    metrics = profile["plugin_metrics"]
    assert metrics["math/boxed_answer_rate"] == 1.0  # every math answer was boxed; no other row counts
    assert metrics["string_match/exact_match_rate"] == 0.5 and metrics["string_match/near_match_rate"] == 0.5
    assert metrics["mcqa/pass@1/accuracy"] == 50.0  # x100, as the spec says
    assert metrics["arc_agi/mean/extraction_successful"] == 0.5  # the grid-less answer extracts nothing
    assert "by environment" in result.output


def test_the_local_config_serves_the_same_environments_and_agents():
    from gym_core import PluginManager
    from gym_core.config import load_config

    def instances(name: str) -> dict[str, str]:
        config = load_config(
            [MIXED / name], env_file=None, server_types=PluginManager().servers(), allocate_ports=False
        )
        return {instance: entry.plugin for instance, entry in config.instances.items()}

    local, scripted = instances("mixed_local.yaml"), instances("mixed_scripted.yaml")
    assert (local.pop("policy_model"), scripted.pop("policy_model")) == ("local_llama", "scripted")
    assert local == scripted
    tasks = [json.loads(line) for line in (MIXED / "tasks.jsonl").read_text().splitlines()]
    assert {task["agent_ref"]["name"] for task in tasks} == {f"{name}_agent" for name in REWARDS} <= set(local)
