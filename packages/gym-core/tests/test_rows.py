"""The precedence of each row gym_core.rows builds: which source wins where two share a field, and
where each field goes."""

from __future__ import annotations

from gym_core.rows import COLLECTOR_FIELDS, reverified_row, rollout_result, rollout_row, with_environment


def test_the_result_ranks_environment_record_facts_verdict_and_ends_with_the_response():
    result = rollout_result(
        environment={"environment": "math", "resources_server": "math", "turns": 0},
        record={"agent": "a", "num_tool_calls": 2, "model": "m"},
        facts={"turns": 3, "num_tool_calls": 1},
        verdict={"reward": 1.0, "num_tool_calls": 5, "model": "judge-said"},
        response={"output": []},
    )
    assert result == {
        "environment": "math",
        "resources_server": "math",
        "turns": 3,
        "agent": "a",
        "num_tool_calls": 5,
        "model": "judge-said",
        "reward": 1.0,
        "response": {"output": []},
    }
    assert list(result)[-1] == "response"


def test_the_environment_stamp_never_replaces_what_the_agent_said():
    result = {"reward": 1.0, "environment": "own"}
    assert with_environment(result, {"environment": "math", "resources_server": "m1"}) is result
    assert result == {"reward": 1.0, "environment": "own", "resources_server": "m1"}


def test_the_row_ranks_collector_fields_then_result_then_task_and_ends_with_the_response():
    result = {
        "reward": 0.5,
        "agent": "agent-said",
        "latency_s": 9.0,
        "extracted": "4",
        "expected_answer": "result's",
        "response": {"output": ["the answer"]},
    }
    task = {
        "responses_create_params": {"input": "q"},
        "expected_answer": "4",
        "task_index": 99,
        "response": "the task's own",
    }
    row = rollout_row(result, task, task_index=1, rollout_index=2, agent="math_agent", reward=1.0, latency_s=0.25)
    assert tuple(row)[: len(COLLECTOR_FIELDS)] == COLLECTOR_FIELDS
    assert (row["task_index"], row["rollout_index"], row["agent"], row["reward"], row["latency_s"]) == (
        1,
        2,
        "math_agent",
        1.0,
        0.25,
    )
    assert row["expected_answer"] == "result's" and row["extracted"] == "4"
    assert row["responses_create_params"] == {"input": "q"}
    assert list(row)[-1] == "response" and row["response"] == {"output": ["the answer"]}


def test_a_reverified_row_takes_the_new_reward_and_verdict_but_keeps_who_made_it():
    row = {
        "task_index": 0,
        "rollout_index": 1,
        "agent": "a",
        "reward": 0.0,
        "latency_s": 1.5,
        "environment": "math",
        "resources_server": "math",
        "extracted": "3",
        "expected_answer": "4",
        "response": {"output": []},
    }
    verdict = {
        "reward": 1,
        "extracted": "4",
        "agent": "verdict-said",
        "latency_s": 0.0,
        "environment": "other",
        "response": "replaced?",
        "judge": "new",
    }
    new = reverified_row(row, verdict)
    assert list(new) == [
        "task_index",
        "rollout_index",
        "agent",
        "reward",
        "previous_reward",
        "latency_s",
        "environment",
        "resources_server",
        "extracted",
        "expected_answer",
        "response",
        "judge",
    ]
    assert (new["reward"], new["previous_reward"]) == (1.0, 0.0) and isinstance(new["reward"], float)
    assert (new["agent"], new["latency_s"], new["environment"], new["response"]) == ("a", 1.5, "math", {"output": []})
    assert (new["extracted"], new["judge"]) == ("4", "new")
    # Again: the former reward is the last one, not the first.
    again = reverified_row(new, {"reward": 0.5})
    assert (again["reward"], again["previous_reward"]) == (0.5, 1.0)
    assert list(again).count("previous_reward") == 1
