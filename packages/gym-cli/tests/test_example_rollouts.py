"""Each environment's data/example_rollouts.jsonl is what `gym examples rollouts` writes now, and
holds rows of the shape gym_core.rows builds; how a task's conformance field becomes the scripted
model's script, and how a row is made reproducible."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gym_core.rows import COLLECTOR_FIELDS

from gym_cli.example_rollouts import (
    COMMAND,
    DONE,
    EXAMPLE_ROLLOUTS,
    EXAMPLES,
    environment_directories,
    example_rollouts,
    fixed,
    render,
    script_of,
    scripted_task,
)

ROOT = Path(__file__).resolve().parents[3]
ENVIRONMENTS = environment_directories(ROOT)


def test_every_environment_is_found():
    names = {d.name for d in ENVIRONMENTS}
    assert {"counter", "math", "code_gen", "genrm_compare", "sql", "text_to_sql", "gymnasium_text"} <= names
    assert names == {d.name for d in (ROOT / "plugins" / "resources").iterdir() if (d / EXAMPLES).is_file()}


@pytest.mark.parametrize("directory", ENVIRONMENTS, ids=lambda d: d.name)
def test_the_example_rollouts_are_current(directory: Path):
    path = directory / EXAMPLE_ROLLOUTS
    rows = example_rollouts(directory)
    assert path.is_file(), f"{path} is missing: run `{COMMAND} {directory.name}`"
    assert path.read_text() == render(rows), f"{path} is not current: run `{COMMAND} {directory.name}`"
    tasks = [json.loads(line) for line in (directory / EXAMPLES).read_text().splitlines() if line.strip()]
    for row in rows:
        keys = list(row)
        assert tuple(keys[: len(COLLECTOR_FIELDS)]) == COLLECTOR_FIELDS and keys[-1] == "response", keys
        assert row["environment"] and row["resources_server"], row
        assert row["responses_create_params"]["metadata"]["scripted_turns"]
        assert "conformance" not in row and row["latency_s"] == 0.0
        # The task as sent: every field of the example task but its conformance field.
        task = tasks[row["task_index"]]
        assert all(k in row for k in task if k != "conformance"), sorted(set(task) - set(row))


def test_a_gymnasium_script_says_each_action():
    row = {
        "conformance": {
            "tool_calls": [
                {"name": "act", "arguments": {"action": "hit"}},
                {"name": "act", "arguments": {"action": "stand"}},
            ]
        }
    }
    assert script_of(row, gymnasium=True) == [{"text": "<action>hit</action>"}, {"text": "<action>stand</action>"}]
    assert script_of({"conformance": {"tool_calls": [{"name": "other", "arguments": {}}]}}, gymnasium=True) is None


def test_tool_calls_then_the_answer_one_turn_each():
    row = {"conformance": {"tool_calls": [{"name": "increment_counter", "arguments": {"count": 3}}]}}
    assert script_of(row) == [
        {"tool_calls": [{"name": "increment_counter", "arguments": {"count": 3}}]},
        {"text": DONE},
    ]
    row = {"conformance": {"response": "It is 4."}}
    assert script_of(row) == [{"text": "It is 4."}]


def test_a_response_object_is_cut_into_turns_at_each_tool_output():
    def call(n: int, arguments: str = '{"x": 1}') -> dict:
        return {"type": "function_call", "call_id": f"c{n}", "name": f"f{n}", "arguments": arguments}

    output = [
        call(1),
        call(2),
        {"type": "function_call_output", "call_id": "c1", "output": "1"},
        {"type": "function_call_output", "call_id": "c2", "output": "2"},
        call(3),
        {"type": "function_call_output", "call_id": "c3", "output": "3"},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "ok"}]},
    ]
    turns = script_of({"conformance": {"response": {"output": output}}})
    assert turns == [
        {"tool_calls": [{"name": "f1", "arguments": {"x": 1}}, {"name": "f2", "arguments": {"x": 1}}]},
        {"tool_calls": [{"name": "f3", "arguments": {"x": 1}}]},
        {"text": "ok"},
    ]
    # Calls with nothing after them: the agent asks again, and the script ends the rollout.
    assert script_of({"conformance": {"response": {"output": [call(1)]}}})[-1] == {"text": DONE}


@pytest.mark.parametrize(
    "item",
    [
        {"type": "function_call", "call_id": "c", "name": "f", "arguments": '{"cut": '},
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "hm"}]},
        {"type": "message", "role": "assistant", "content": [{"type": "refusal", "refusal": "no"}]},
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "a"}, {"type": "output_text", "text": "b"}],
        },
    ],
)
def test_what_the_scripted_model_cannot_say_leaves_the_task_out(item):
    assert script_of({"conformance": {"response": {"output": [item]}}}) is None
    assert script_of({"responses_create_params": {"input": "no conformance"}}) is None


def test_the_script_skips_the_model_turns_already_in_the_input():
    history = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "a"},
        {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c", "output": "1"},
        {"type": "function_call", "call_id": "d", "name": "f", "arguments": "{}"},
    ]
    row = {
        "responses_create_params": {"input": history, "metadata": {"k": "v"}},
        "expected": 1,
        "conformance": {"response": "done"},
    }
    task = scripted_task(row, [{"text": "done"}])
    assert "conformance" not in task and task["expected"] == 1
    metadata = task["responses_create_params"]["metadata"]
    # Two runs of model output in the input (a message with a call, then a call): two turns to skip.
    assert metadata["k"] == "v" and json.loads(metadata["scripted_turns"]) == [{}, {}, {"text": "done"}]
    assert row["responses_create_params"]["metadata"] == {"k": "v"}  # the row given is left as it was


def test_fixed_renumbers_ids_consistently_and_zeroes_times():
    a, b = "call_" + "3f" * 16, "msg_" + "a1" * 16
    row = {
        "task_index": 0,
        "latency_s": 1.234,
        "queue_s": 0.001,  # only in rows whose rollout waited for a slot: left out
        "took": {"seconds": 2.5},
        "note": f"see {a}",
        "response": {
            "id": b,
            "created_at": 1767225600.0,
            "output": [{"call_id": a}, {"call_id": a}, {"id": "fc_0", "created": 17}],
        },
    }
    new = fixed(row, timings=("took.seconds",))
    one, two = "call_" + "0" * 31 + "1", "msg_" + "0" * 31 + "2"
    assert new["note"] == f"see {one}"
    assert new["response"]["id"] == two and [o.get("call_id") for o in new["response"]["output"][:2]] == [one, one]
    assert new["response"]["output"][2] == {"id": "fc_0", "created": 0}  # not a generated id: kept
    assert (new["latency_s"], new["took"]["seconds"], new["response"]["created_at"]) == (0.0, 0.0, 0.0)
    assert "queue_s" not in new
    assert row["latency_s"] == 1.234  # the row given is left as it was
