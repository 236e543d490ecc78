"""One collection across two environments: tasks routed by ``agent_ref``, rows stamped with the
environment that verified them, a profile per environment, each environment's metrics from its own rows."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from click.testing import CliRunner

from gym_core.testing import running_servers

from gym_cli.main import cli

ROOT = Path(__file__).resolve().parents[1]
MIXED = ROOT / "examples" / "mixed"


def test_a_mixed_collection_reports_each_environment(tmp_path):
    out = tmp_path / "mixed.jsonl"
    tasks = [json.loads(line) for line in (MIXED / "tasks.jsonl").read_text().splitlines()]
    config = yaml.safe_load((MIXED / "mixed_scripted.yaml").read_text())
    with running_servers(config) as running:
        result = CliRunner().invoke(
            cli(), ["collect", "--input", str(MIXED / "tasks.jsonl"), "--output", str(out), "--head", running.head_url],
            catch_exceptions=False,
        )
    assert result.exit_code == 0, result.output
    rows = sorted((json.loads(line) for line in out.read_text().splitlines()), key=lambda r: r["task_index"])
    assert len(rows) == len(tasks) == 6
    for row, task in zip(rows, tasks):
        agent = task["agent_ref"]["name"]
        expected_environment = {"math_agent": "math", "counter_agent": "counter"}[agent]
        assert (row["environment"], row["resources_server"]) == (expected_environment, expected_environment)
    # Each row's script solves it, except the third of each environment (a wrong sum, a wrong increment).
    assert [row["reward"] for row in rows] == [1.0, 1.0, 0.0, 1.0, 1.0, 0.0]

    profile = json.loads(out.with_name("mixed.profile.json").read_text())
    environments = profile["environments"]
    assert set(environments) == {"math", "counter"}
    for block in environments.values():
        assert block["num_tasks"] == 3 and block["num_rollouts"] == 3
        assert abs(block["fields"]["reward"]["mean"] - 2 / 3) < 1e-9
    # math's metric counts math's rows only: every math answer was boxed, counter rows have none.
    assert profile["plugin_metrics"]["math/boxed_answer_rate"] == 1.0
    assert "by environment" in result.output
