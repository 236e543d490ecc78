"""gym profile over rows of a real scripted collection: three agents, two models, one environment;
the breakdown by environment, agent and model, with turns, tool calls and tokens per rollout from the
fields every agent records (gym_core.schemas.RolloutRecord)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gym_core.testing import running_servers

from gym_cli.reward_profile import build_profile
from gym_cli.rollouts import read_rollouts

CALL_THEN_TEXT = [{"tool_calls": [{"name": "increment_counter", "arguments": {"count": 3}}]}, {"text": "added 3"}]
CONFIG = {
    "counter": {"plugin": "counter"},
    "policy_a": {"plugin": "scripted", "turns": CALL_THEN_TEXT, "model_name": "model-a"},
    "policy_b": {"plugin": "scripted", "turns": [{"text": "no tools here"}], "model_name": "model-b"},
    "agent_a": {"plugin": "simple_agent", "model_server": "policy_a", "resources_server": "counter"},
    "agent_b": {"plugin": "simple_agent", "model_server": "policy_b", "resources_server": "counter"},
    "agent_c": {"plugin": "non_executing", "model_server": "policy_a", "resources_server": "counter"},
}


def task(agent: str, initial: int, expected: int) -> dict:
    return {
        "responses_create_params": {"input": [{"role": "user", "content": "Set the counter."}]},
        "initial_count": initial,
        "expected_count": expected,
        "agent_ref": {"name": agent},
    }


# agent_a adds 3 (two turns, one tool call): right on task 0 only; agent_b answers in text (one turn):
# right where nothing is to add; agent_c (non_executing) makes the call unexecuted: the count stays.
TASKS = [task("agent_a", 0, 3), task("agent_a", 1, 1), task("agent_b", 1, 1), task("agent_c", 0, 3)]
# The scripted model counts input items and output words (a call is one word): agent_a's turns see
# 1 and 3 items and say 1 and 2 words; agent_b's one turn sees 1 and says 3; agent_c's sees 1, says 1.
TOKENS = {"agent_a": (7, 4, 3), "agent_b": (4, 1, 3), "agent_c": (2, 1, 1)}


@pytest.fixture(scope="module")
def collected(tmp_path_factory, gym) -> Path:
    folder = tmp_path_factory.mktemp("profile")
    tasks, out = folder / "tasks.jsonl", folder / "rollouts.jsonl"
    tasks.write_text("".join(json.dumps(t) + "\n" for t in TASKS))
    with running_servers(CONFIG) as running:
        result = gym(
            "collect",
            "--input",
            str(tasks),
            "--output",
            str(out),
            "--repeats",
            "2",
            "--head",
            running.head_url,
            "--no-profile",
        )
    assert result.exit_code == 0, result.output
    return out


def test_rows_keep_the_rollout_record_of_every_agent(collected: Path):
    rows = read_rollouts(collected)  # as gym profile reads them: without `response`
    assert len(rows) == 8
    for row in rows:
        total, prompt, completion = TOKENS[row["agent"]]
        assert (row["usage"]["total_tokens"], row["usage"]["input_tokens"], row["usage"]["output_tokens"]) == (
            total,
            prompt,
            completion,
        )
        assert sum(u["total_tokens"] for u in row["usage_per_turn"]) == total
        assert row["model_server"] == {"agent_b": "policy_b"}.get(row["agent"], "policy_a")
        assert (row["environment"], row["resources_server"]) == ("counter", "counter")


def test_by_agent(collected: Path):
    groups = build_profile(read_rollouts(collected), ks=(1, 2), by="agent")["groups"]
    summary = {
        name: (
            g["num_tasks"],
            g["num_rollouts"],
            g["fields"]["reward"]["mean"],
            g["pass@1"],
            g["pass@2"],
            g["turns_per_rollout"],
            g["tool_calls_per_rollout"],
            g["tokens_per_rollout"],
        )
        for name, g in groups.items()
    }
    assert summary == {
        "agent_a": (2, 4, 0.5, 0.5, 0.5, 2.0, 1.0, {"total": 7.0, "input": 4.0, "output": 3.0}),
        "agent_b": (1, 2, 1.0, 1.0, 1.0, 1.0, 0.0, {"total": 4.0, "input": 1.0, "output": 3.0}),
        "agent_c": (1, 2, 0.0, 0.0, 0.0, 1.0, 1.0, {"total": 2.0, "input": 1.0, "output": 1.0}),
    }


def test_by_model_groups_by_the_name_the_model_reported(collected: Path):
    profile = build_profile(read_rollouts(collected), ks=(1,), by="model")
    assert profile["grouped_by"] == "model"
    a, b = profile["groups"]["model-a"], profile["groups"]["model-b"]
    # model-a: agent_a's 4 rollouts (2 turns, 7 tokens) and agent_c's 2 (1 turn, 2 tokens).
    assert (a["num_tasks"], a["num_rollouts"], a["pass@1"]) == (3, 6, pytest.approx(1 / 3))
    assert a["fields"]["reward"]["mean"] == pytest.approx(1 / 3)
    assert (a["turns_per_rollout"], a["tool_calls_per_rollout"]) == (pytest.approx(10 / 6), 1.0)
    assert a["tokens_per_rollout"] == {"total": pytest.approx(32 / 6), "input": 3.0, "output": pytest.approx(14 / 6)}
    assert (b["num_rollouts"], b["fields"]["reward"]["mean"], b["turns_per_rollout"]) == (2, 1.0, 1.0)
    assert set(profile["groups"]) == {"model-a", "model-b"}


def test_by_environment_is_the_default_and_overall_has_the_costs(collected: Path):
    profile = build_profile(read_rollouts(collected), ks=(1,))
    assert profile["grouped_by"] == "environment" and set(profile["groups"]) == {"counter"}
    counter = profile["groups"]["counter"]
    assert (counter["num_tasks"], counter["num_rollouts"], counter["fields"]["reward"]["mean"]) == (4, 8, 0.5)
    assert counter["turns_per_rollout"] == profile["overall"]["turns_per_rollout"] == 1.5  # (4×2 + 2 + 2) / 8
    assert counter["tokens_per_rollout"]["total"] == profile["overall"]["tokens_per_rollout"]["total"] == 5.0  # 40 / 8


def test_rows_without_a_record_have_no_costs(collected: Path):
    rows = read_rollouts(collected)
    for row in rows:
        if row["agent"] == "agent_b":  # as an agent that records nothing would write them
            for key in ("num_model_calls", "num_tool_calls", "usage", "usage_per_turn"):
                row.pop(key)
    groups = build_profile(rows, ks=(1,), by="agent")["groups"]
    assert not {"turns_per_rollout", "tool_calls_per_rollout", "tokens_per_rollout"} & set(groups["agent_b"])
    assert groups["agent_a"]["turns_per_rollout"] == 2.0


def test_the_command_prints_and_writes_the_grouping(collected: Path, tmp_path: Path, gym):
    output = tmp_path / "p.json"
    result = gym("profile", str(collected), "--by", "model", "-k", "1", "--output", str(output))
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert any(line.strip() == "by model" for line in lines)
    # The cost table: model, turns, tool calls, tokens, input, output per rollout.
    assert [
        cell.strip() for cell in next(line for line in lines if "model-b" in line and "4.0" in line).split("│")[1:-1]
    ] == ["model-b", "1.0", "0.0", "4.0", "1.0", "3.0"]
    written = json.loads(output.read_text())
    assert written["grouped_by"] == "model" and written["groups"]["model-b"]["tokens_per_rollout"]["total"] == 4.0
    wrong = gym("profile", str(collected), "--by", "task")
    assert wrong.exit_code == 2 and "'task' is not one of" in wrong.output


def test_rows_without_a_record_get_usage_and_model_from_their_response(tmp_path):
    from gym_cli.rollouts import read_rollouts

    path = tmp_path / "old.jsonl"
    usage = {"input_tokens": 5, "output_tokens": 2, "total_tokens": 7}
    path.write_text(
        json.dumps(
            {
                "task_index": 0,
                "rollout_index": 0,
                "reward": 1.0,
                "response": {"model": "m", "usage": usage, "output": []},
            }
        )
        + "\n"
    )
    [row] = read_rollouts(path)
    assert "response" not in row and row["usage"] == usage and row["model"] == "m"


MCQA_EXAMPLE = Path(__file__).resolve().parents[3] / "plugins/resources/mcqa/data/example_rollouts.jsonl"


def test_one_headline_and_one_denominator_for_pass_and_majority(tmp_path: Path, gym):
    """mcqa's recorded rollouts (7 tasks, one rollout each, 2 without an extracted answer): the headline
    is the mean reward over the scored rollouts, named so, first; majority@1 counts every task (one
    with no answer scores 0), so it agrees with pass@1 and with mcqa's own majority@1 (in percent)."""
    rollouts = tmp_path / "mcqa.jsonl"
    rollouts.write_text(MCQA_EXAMPLE.read_text())
    rows = read_rollouts(rollouts)
    mean = sum(row["reward"] for row in rows) / len(rows)
    assert sum(row.get("extracted_answer") is None for row in rows) > 0  # the case that differed

    profile = build_profile(rows, ks=(1,))
    overall = profile["overall"]
    assert overall["mean_reward"] == pytest.approx(mean)
    assert overall["pass@1"] == pytest.approx(mean) and overall["majority@1"] == pytest.approx(mean)
    assert profile["plugin_metrics"]["mcqa/majority@1/accuracy"] == pytest.approx(100 * overall["majority@1"])

    result = gym("profile", str(rollouts), "-k", "1", env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].startswith(f"mean reward {mean:.4f} over {len(rows)} scored rollouts of {len(rows)} tasks")
    heading = next(i for i, line in enumerate(lines) if line.startswith("environment metrics"))
    assert "percent, 0 to 100" in lines[heading]
    assert all(line.startswith("  mcqa/") for line in lines[heading + 1 : -1])  # apart from gym's own figures


def test_latency_p50_is_one_number_in_profile_report_and_live_panel():
    from gym_cli.live import LatencySketch
    from gym_cli.report.render import _quantile

    latencies = [104.6, 106.4, 107.2, 130.0]  # an even count: where the definitions used to part
    rows = [{"task_index": i, "reward": 1.0, "latency_s": value} for i, value in enumerate(latencies)]
    sketch = LatencySketch()
    for value in latencies:
        sketch.add(value)
    profile_p50 = build_profile(rows, ks=(1,))["overall"]["fields"]["latency_s"]["median"]
    assert profile_p50 == _quantile(latencies, 0.5) == sketch.quantile(0.5) == pytest.approx(106.8)  # the median
    assert _quantile(latencies, 0.99) == sketch.quantile(0.99) == pytest.approx(107.2 + 0.97 * 22.8)
