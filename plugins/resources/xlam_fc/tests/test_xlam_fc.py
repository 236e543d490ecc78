"""The xlam_fc resources server over real HTTP: gym's conformance kit, then its verdicts, its row
errors, the off-loop path for large responses, its metrics, and a whole rollout through simple_agent.

The plugin is registered explicitly rather than found through its entry point, so these tests also
run from a source checkout. The rollout test needs gym's first-party plugins too; it is skipped where
they are not installed (in the plugin's own venv, say).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from gym_core import PluginManager, ServerClient
from gym_core.testing import (
    HTTPCaller,
    ResourcesServerTests,
    RunningServers,
    assistant_response,
    first_party,
    read_rows,
    running_servers,
)

import gym_xlam_fc.plugin

PACKAGE = Path(__file__).resolve().parents[1]
EXAMPLES = PACKAGE / "data" / "example.jsonl"
CONFIG = PACKAGE / "configs" / "xlam_fc.yaml"


def calls_response(*calls: tuple[str, Any], text: str | None = None) -> dict[str, Any]:
    """A Responses API response making ``calls`` (name, arguments: a JSON string or an object to
    encode), then saying ``text`` if given."""
    output: list[dict[str, Any]] = [
        {
            "type": "function_call",
            "id": f"fc_{i}",
            "call_id": f"call_{i}",
            "name": name,
            "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments),
            "status": "completed",
        }
        for i, (name, arguments) in enumerate(calls)
    ]
    if text is not None:
        output.extend(assistant_response(text)["output"])
    return {"output": output}


# Each example row's `conformance` field (which xlam_fc ignores) holds the response the kit sends
# and the reward it must get: right, wrong and malformed answers (by row id):
#   0: both cities, in the other order, with an extra argument (1)
#   1: 100.0 == 100, keys in another order (1)
#   2: expected {"n": 10} given as a JSON string in the row; "10" is not 10 (0)
#   3: arguments cut off: unparseable, so {} (0)
#   4: no call expected, none made (1)
#   5: lists are ordered (0)
#   6: nested object, keys in another order (1)
#   7: the right call, twice (0)

TOOLS = [{"type": "function", "name": "f", "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}}}]


def task(expected: Any = None, **fields: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "responses_create_params": {"input": [{"role": "user", "content": "q"}], "tools": TOOLS},
        **fields,
    }
    if expected is not None:
        row["expected_answers"] = expected
    return row


class TestXlamFc(ResourcesServerTests):
    server_type = "xlam_fc"
    plugins = [gym_xlam_fc.plugin]
    example_data = EXAMPLES

    def test_every_example_row_has_an_answer_of_each_reward(self):
        rows = read_rows(EXAMPLES)
        assert all(isinstance(row["conformance"]["response"], dict) for row in rows)
        assert {row["conformance"]["reward"] for row in rows} == {0.0, 1.0}

    def test_serves_no_tools(self, gym_servers: RunningServers):
        caller = gym_servers.caller()
        assert caller.get("/tools").json() == []
        # The tools a row offers are not served: a call to one is a 404, as the agent passes it on.
        assert caller.post("/current_weather", {"city": "Oslo"}).status == 404

    def test_verify_reports_counts_and_predicted_calls(self, gym_servers: RunningServers):
        expected = [{"name": "f", "arguments": {"a": 1}}, {"name": "g", "arguments": '{"b": [1, 2]}'}]
        response = calls_response(("g", {"b": [1, 2], "c": True}), ("f", "{not json"))
        verdict = gym_servers.caller().post("/verify", {**task(expected), "response": response}).json()
        assert verdict == {
            "reward": 0.0,
            "num_expected": 2,
            "num_predicted": 2,
            "num_correct": 1,
            "predicted_calls": [{"name": "g", "arguments": {"b": [1, 2], "c": True}}, {"name": "f", "arguments": {}}],
        }
        right = calls_response(("f", {"a": 1.0}), ("g", {"b": [1, 2]}))
        verdict = gym_servers.caller().post("/verify", {**task(expected), "response": right}).json()
        assert (verdict["reward"], verdict["num_correct"]) == (1.0, 2)

    def test_calls_of_every_turn_count(self, gym_servers: RunningServers):
        # What simple_agent sends after two turns: a call, its 404 output, then a second call.
        first = calls_response(("f", {"a": 1}))["output"]
        second = calls_response(("f", {"a": 2}), text="done")["output"]
        output = [
            *first,
            {"type": "function_call_output", "call_id": "call_0", "output": '{"detail":"Not Found"}'},
            *second,
        ]
        expected = [{"name": "f", "arguments": {"a": 1}}]
        verdict = gym_servers.caller().post("/verify", {**task(expected), "response": {"output": output}}).json()
        assert (verdict["reward"], verdict["num_predicted"], verdict["num_correct"]) == (0.0, 2, 1)
        both = [*expected, {"name": "f", "arguments": {"a": 2}}]
        verdict = gym_servers.caller().post("/verify", {**task(both), "response": {"output": output}}).json()
        assert verdict["reward"] == 1.0

    @pytest.mark.parametrize("expected", [None, [], "null"])
    def test_no_expected_calls_rewards_no_call(self, gym_servers: RunningServers, expected):
        # expected_answers missing, empty, or null: the model must not call anything.
        row = task(expected if expected != "null" else None)
        if expected == "null":
            row["expected_answers"] = None
        caller = gym_servers.caller()
        quiet = caller.post("/verify", {**row, "response": assistant_response("Hello!")}).json()
        busy = caller.post("/verify", {**row, "response": calls_response(("f", {"a": 1}))}).json()
        assert (quiet["reward"], quiet["num_expected"], quiet["predicted_calls"]) == (1.0, 0, [])
        assert (busy["reward"], busy["num_predicted"]) == (0.0, 1)

    def test_expected_call_without_arguments_matches_any_arguments(self, gym_servers: RunningServers):
        for expected in ([{"name": "f"}], [{"name": "f", "arguments": None}], [{"name": "f", "arguments": "{}"}]):
            verdict = (
                gym_servers.caller()
                .post("/verify", {**task(expected), "response": calls_response(("f", "garbage"))})
                .json()
            )
            assert verdict["reward"] == 1.0, (expected, verdict)

    def test_rows_with_nulls_and_extra_fields_are_accepted(self, gym_servers: RunningServers):
        row = task([{"name": "f", "arguments": {"a": 1}}], id=17, category="simple", source=None)
        row["responses_create_params"].update(temperature=None, parallel_tool_calls=None, max_output_tokens=None)
        response = {**calls_response(("f", {"a": 1})), "usage": None, "incomplete_details": None, "error": None}
        reply = gym_servers.caller().post("/verify", {**row, "response": response})
        assert reply.status == 200, reply.text
        assert reply.json()["reward"] == 1.0

    @pytest.mark.parametrize(
        ("expected", "message"),
        [
            ([{"arguments": {"a": 1}}], "missing required field `name`"),
            ([{"name": "f", "arguments": "{bad"}], "arguments is not valid JSON"),
            ([{"name": "f", "arguments": "[1, 2]"}], "arguments must be a JSON object"),
            ([{"name": "f", "arguments": 5}], "expected_answers[0].arguments"),
            ("f(a=1)", "expected_answers"),
            ([["f", {"a": 1}]], "expected_answers[0]"),
        ],
    )
    def test_a_bad_expected_answers_field_is_a_422_naming_it(self, gym_servers: RunningServers, expected, message):
        reply = gym_servers.caller().post("/verify", {**task(expected), "response": calls_response(("f", {"a": 1}))})
        assert reply.status == 422, reply.text
        error = reply.json()["error"]["message"]
        assert message in error and "expected_answers" in error, error

    def test_large_responses_are_scored_off_the_event_loop(self, gym_servers: RunningServers):
        # Past the inline limits (256 calls, 32 KiB of arguments) scoring runs in a thread: same verdict.
        filler = "x" * 200
        calls = [("f", {"a": i, "pad": filler}) for i in range(400)]
        expected = [{"name": "f", "arguments": {"a": i}} for i in range(400)]
        caller = gym_servers.caller()
        verdict = caller.post("/verify", {**task(expected), "response": calls_response(*calls)}).json()
        assert (verdict["reward"], verdict["num_predicted"], verdict["num_correct"]) == (1.0, 400, 400)
        verdict = caller.post("/verify", {**task(expected[:399]), "response": calls_response(*calls)}).json()
        assert (verdict["reward"], verdict["num_correct"]) == (0.0, 399)
        assert "reason" not in verdict


def test_scoring_past_the_time_limit_gives_reward_0_with_a_reason():
    manager = PluginManager(load_entry_points=False)
    manager.register(gym_xlam_fc.plugin, name="xlam_fc")
    calls = [("f", {"a": i, "pad": "y" * 500}) for i in range(1000)]
    expected = [{"name": "f", "arguments": {"a": i}} for i in range(1000)]
    with running_servers({"xlam_fc": {"plugin": "xlam_fc", "verify_timeout_s": 1e-6}}, plugins=manager) as config:
        caller = HTTPCaller(config.instances["xlam_fc"].url)
        verdict = caller.post("/verify", {**task(expected), "response": calls_response(*calls)}).json()
        assert verdict == {
            "reward": 0.0,
            "num_expected": 1000,
            "num_predicted": 1000,
            "num_correct": 0,
            "predicted_calls": [],
            "reason": "timeout",
        }
        # The server keeps answering small responses inline.
        small = caller.post("/verify", {**task(expected[:1]), "response": calls_response(calls[0])}).json()
        assert small["reward"] == 1.0


def test_aggregate_metrics_pool_call_counts_over_xlam_rows_only():
    manager = PluginManager(load_entry_points=False)
    manager.register(gym_xlam_fc.plugin, name="xlam_fc")
    rows = [
        {"environment": "xlam_fc", "reward": 1.0, "num_expected": 2, "num_predicted": 2, "num_correct": 2},
        {"environment": "xlam_fc", "reward": 0.0, "num_expected": 2, "num_predicted": 3, "num_correct": 1},
        {"environment": "xlam_fc", "reward": 0.0, "num_expected": 1, "num_predicted": 0, "num_correct": 0},
        {"environment": "xlam_fc", "reward": 1.0, "num_expected": 0, "num_predicted": 0, "num_correct": 0},
        {"environment": "math", "reward": 1.0, "num_expected": 9, "num_predicted": 9, "num_correct": 9},
    ]
    assert manager.aggregate_metrics(rows) == {
        "xlam_fc/no_call_rate": 0.5,
        "xlam_fc/call_recall": 3 / 5,
        "xlam_fc/call_precision": 3 / 5,
    }
    only_silence = [{"environment": "xlam_fc", "reward": 1.0, "num_expected": 0, "num_predicted": 0, "num_correct": 0}]
    assert manager.aggregate_metrics(only_silence) == {"xlam_fc/no_call_rate": 1.0}


async def test_a_rollout_through_simple_agent_scores_calls_of_every_turn():
    # The scripted model calls the first expected function, gets a 404 error back (xlam_fc serves
    # no tools), calls the rest in a second turn, then answers: every call of both turns counts.
    manager = PluginManager(load_entry_points=False)
    for plugin in (gym_xlam_fc.plugin, *first_party("scripted", "simple_agent")):
        manager.register(plugin, name=getattr(plugin, "__name__", None))
    with running_servers(yaml.safe_load(CONFIG.read_text()), plugins=manager) as config:
        async with ServerClient(config) as client:
            row = read_rows(EXAMPLES)[0]
            first, *rest = row["expected_answers"]
            for extra, reward in (([], 1.0), ([first], 0.0)):
                script = [
                    {"tool_calls": [first]},
                    {"tool_calls": [*rest, *extra]},
                    {"text": "Oslo is cold, Lima is mild."},
                ]
                params = {**row["responses_create_params"], "metadata": {"scripted_turns": json.dumps(script)}}
                result = await client.post("agent", "/run", {**row, "responses_create_params": params})
                outputs = [item for item in result["response"]["output"] if item["type"] == "function_call_output"]
                # gym's 404 body names the unknown tool (the reference: {"detail": "Not Found"}).
                assert len(outputs) == 2 + len(extra), outputs
                assert all(
                    "unknown tool" in item["output"] and "current_weather" in item["output"] for item in outputs
                ), outputs
                assert (result["reward"], result["num_predicted"]) == (reward, 2 + len(extra)), result
