"""A sandbox that breaks is a failed rollout, never a reward of 0, end to end through `gym collect`:
code_gen, simple_agent and a scripted policy answering with a correct program, served in threads.
The sandbox's bwrap disappears after start-up (an upgrade under a running server): every rollout
goes to the failures file with reason sandbox_failed; with bwrap back, re-running collects them,
scored 1."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from click.testing import CliRunner

from gym_core.sandbox import bwrap_path
from gym_core.testing import start_servers

from gym_cli.main import cli

TASK = {
    "responses_create_params": {"input": [{"role": "user", "content": "Read two integers and print their sum."}]},
    "verifier_metadata": {"unit_tests": {"inputs": ["1 2\n", "5 7\n"], "outputs": ["3\n", "12\n"], "fn_name": None}},
}
PROGRAM = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"


def bwrap_copy(directory: Path) -> Path:
    """The wheel's bwrap, copied with its libraries in the wheel's layout (RPATH $ORIGIN/../../<pkg>.libs)."""
    wheel = Path(os.path.realpath(bwrap_path()))
    copy = directory / "pkg" / "_bin" / "bwrap"
    copy.parent.mkdir(parents=True)
    shutil.copy2(wheel, copy)
    for libs in wheel.parent.parent.parent.glob("*.libs"):
        shutil.copytree(libs, directory / libs.name)
    return copy


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def test_a_broken_sandbox_fails_the_rollouts_and_a_rerun_collects_them(tmp_path):
    copy = bwrap_copy(tmp_path / "bwrap")
    config = {
        "code_gen": {"plugin": "code_gen", "sandbox_bwrap": str(copy), "unit_test_timeout_secs": 5},
        "policy": {"plugin": "scripted", "turns": [{"text": PROGRAM}]},
        "agent": {"plugin": "simple_agent", "model_server": "policy", "resources_server": "code_gen", "max_steps": 1},
    }
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps(TASK) + "\n")
    out, failures = tmp_path / "out.jsonl", tmp_path / "out.failures.jsonl"
    with start_servers(config, None) as (global_config, servers):
        args = [
            "collect",
            "--head",
            global_config.head_url,
            "--input",
            str(tasks),
            "--output",
            str(out),
            "--repeats",
            "2",
            "--retries",
            "1",
            "--retry-backoff",
            "0.01",
            "--no-profile",
        ]
        used = Path(servers["code_gen"].sandbox.bwrap)  # the copy, or its shared copy when gym runs as root
        saved = used.read_bytes()
        try:
            used.unlink()
            first = CliRunner().invoke(cli(), args, catch_exceptions=False)
            assert first.exit_code == 1, first.output
            assert rows(out) == []  # nothing scored: no reward of 0 for a sandbox that could not run
            failed = rows(failures)
            assert sorted(f["rollout_index"] for f in failed) == [0, 1]
            assert all(f["reason"] == "sandbox_failed" and f["status"] == 502 and f["attempts"] == 2 for f in failed)

            used.write_bytes(saved)
            used.chmod(0o755)
            second = CliRunner().invoke(cli(), args, catch_exceptions=False)
            assert second.exit_code == 0, second.output
            assert sorted((r["rollout_index"], r["reward"], r["result"]) for r in rows(out)) == [
                (0, 1.0, [True, True]),
                (1, 1.0, [True, True]),
            ]
            assert rows(failures) == []
        finally:
            if used.is_relative_to("/var/cache/gym-sandbox"):  # root: the shared copy made for this test
                shutil.rmtree(used.parents[3], ignore_errors=True)
