"""Tests of the tool_call_match environment, real servers on loopback: gym's conformance kit over
the example rows (each row's conformance response and exact reward), then the comparison rules and
every option, the verdict's fields, bad rows, the metrics, and whole rollouts through the
tool_simulation agent with the scripted model.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from gym_core import load_config
from gym_core.testing import (
    HTTPCaller,
    ResourcesServerTests,
    RunningServers,
    assistant_response,
    plugin_manager,
    read_rows,
    running_servers,
)

import gym_scripted.plugin
import gym_tool_call_match.plugin
import gym_tool_simulation.plugin
from gym_tool_call_match.match import Call, Rules, score_calls, values_equal

PACKAGE = Path(__file__).resolve().parents[1]
EXAMPLES = PACKAGE / "data" / "example.jsonl"
CONFIGS = PACKAGE / "configs"

LENIENT = {
    "extra_arguments": "ignore",
    "ignore_null_arguments": True,
    "string_match": "normalized",
    "numeric_strings": True,
    "number_tolerance": 0.01,
    "list_order": "any",
}


def calls_response(*calls: tuple[str, Any], text: str | None = None) -> dict[str, Any]:
    """A response making ``calls`` (arguments: a JSON string as is, anything else encoded), then saying ``text``."""
    output: list[dict[str, Any]] = [
        {
            "type": "function_call",
            "id": f"fc_{i}",
            "call_id": f"call_{i}",
            "name": name,
            "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments),
        }
        for i, (name, arguments) in enumerate(calls)
    ]
    if text is not None:
        output.extend(assistant_response(text)["output"])
    return {"output": output}


def task(**expected: Any) -> dict[str, Any]:
    return {"responses_create_params": {"input": [{"role": "user", "content": "next step?"}]}, **expected}


def one(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


class TestToolCallMatch(ResourcesServerTests):
    server_type = "tool_call_match"
    plugins = [gym_tool_call_match.plugin]
    example_data = EXAMPLES
    instances = {
        "strict": {"plugin": "tool_call_match"},
        "lenient": {"plugin": "tool_call_match", **LENIENT},
        "partial": {"plugin": "tool_call_match", "partial_credit": True},
    }
    instance = "strict"

    def verdict(
        self, servers: RunningServers, row: dict[str, Any], response: dict[str, Any], instance: str = "strict"
    ) -> dict:
        reply = servers.caller(instance).post("/verify", {**row, "response": response})
        assert reply.status == 200, reply.text
        return reply.json()

    def test_the_example_rows_cover_every_expectation_and_both_rewards(self):
        rows = read_rows(EXAMPLES)
        assert {row["conformance"]["reward"] for row in rows} == {0.0, 1.0}
        kinds = {next(k for k in ("expected_call", "acceptable_calls", "expected_action") if k in row) for row in rows}
        assert kinds == {"expected_call", "acceptable_calls", "expected_action"}
        assert {row["expected_action"]["type"] for row in rows if "expected_action" in row} == {
            "message",
            "function_call_batch",
        }
        # Each row is a trajectory to continue: earlier tool calls come with their outputs.
        for row in rows:
            items = row["responses_create_params"]["input"]
            calls = {i["call_id"] for i in items if i.get("type") == "function_call"}
            assert calls == {i["call_id"] for i in items if i.get("type") == "function_call_output"}

    def test_serves_no_tools_and_keeps_no_session(self, gym_servers: RunningServers):
        caller = gym_servers.caller()
        assert caller.get("/tools").json() == []
        row = read_rows(EXAMPLES)[0]
        assert self.verdict(gym_servers, row, row["conformance"]["response"])["reward"] == 1.0
        assert caller.cookies == {} and len(gym_servers.server.sessions) == 0

    def test_the_verdict_says_what_was_expected_what_came_and_why(self, gym_servers: RunningServers):
        row = read_rows(EXAMPLES)[1]  # an argument the expected call lacks
        verdict = self.verdict(gym_servers, row, row["conformance"]["response"])
        assert verdict == {
            "reward": 0.0,
            "reason": "arguments_mismatch",
            "expected_type": "function_call",
            "expected_calls": [{"name": "get_weather", "arguments": {"city": "Berlin", "units": "metric"}}],
            "predicted_calls": [
                {"name": "get_weather", "arguments": {"units": "metric", "city": "Berlin", "detailed": True}}
            ],
            "num_predicted_calls": 1,
            "name_match": True,
            "mismatches": ["$.detailed: unexpected (got true)"],
        }
        # Lenient: the extra argument is ignored.
        assert self.verdict(gym_servers, row, row["conformance"]["response"], "lenient")["reward"] == 1.0

    @pytest.mark.parametrize(
        ("expected", "predicted", "strict", "lenient"),
        [
            ({"a": 1}, {"a": 1.0}, 1.0, 1.0),  # numbers compare numerically
            ({"a": 1, "b": 2}, '{"b": 2, "a": 1}', 1.0, 1.0),  # key order ignored
            ({"a": True}, {"a": 1}, 0.0, 0.0),  # a boolean is not a number
            ({"a": [None]}, {"a": [False]}, 0.0, 0.0),  # null equals only null
            ({"a": 10}, {"a": "10"}, 0.0, 1.0),  # numeric_strings
            ({"a": "10"}, {"a": 10}, 0.0, 1.0),
            ({"a": 2.5}, {"a": 2.504}, 0.0, 1.0),  # number_tolerance 0.01
            ({"a": 2.5}, {"a": 2.6}, 0.0, 0.0),
            ({"a": "New  York "}, {"a": "new york"}, 0.0, 1.0),  # string_match normalized
            ({"a": "Straße"}, {"a": "STRASSE"}, 0.0, 1.0),  # case folding
            ({"a": "x"}, {"a": "y"}, 0.0, 0.0),
            ({"a": [1, 2]}, {"a": [2, 1]}, 0.0, 1.0),  # list_order any
            ({"a": [1, 1, 2]}, {"a": [1, 2, 2]}, 0.0, 0.0),  # as multisets
            ({"a": [1, 2]}, {"a": [1, 2, 3]}, 0.0, 0.0),
            ({"a": 1}, {"a": 1, "b": 2}, 0.0, 1.0),  # extra_arguments ignore
            ({"a": {"x": 1}}, {"a": {"x": 1, "y": 2}}, 0.0, 1.0),  # at any depth
            ({"a": 1, "b": 2}, {"a": 1}, 0.0, 0.0),  # a missing argument never matches
            ({"a": 1}, {"a": 1, "b": None}, 0.0, 1.0),  # ignore_null_arguments
            ({"a": 1, "b": None}, {"a": 1}, 0.0, 1.0),
            ({}, {}, 1.0, 1.0),
            ({}, "[]", 0.0, 0.0),  # valid JSON that is not an object
            ({"a": 1}, '{"a": 1', 0.0, 0.0),  # invalid JSON
        ],
    )
    def test_argument_comparison_rules(self, gym_servers: RunningServers, expected, predicted, strict, lenient):
        row = task(expected_call={"name": "f", "arguments": expected})
        response = calls_response(("f", predicted))
        assert self.verdict(gym_servers, row, response)["reward"] == strict
        assert self.verdict(gym_servers, row, response, "lenient")["reward"] == lenient

    @pytest.mark.parametrize(
        ("response", "reason", "name_match"),
        [
            (assistant_response("I would call f."), "no_call", False),
            (calls_response(("f", {"a": 1}), ("f", {"a": 1})), "wrong_call_count", False),
            (calls_response(("f", '{"a": ')), "invalid_arguments", True),
            (calls_response(("g", {"a": 1})), "wrong_name", False),
            (calls_response(("f", {"a": 2})), "arguments_mismatch", True),
            (calls_response(("f", {"a": 1}), text="Calling f."), "match", True),  # text beside the call is fine
        ],
    )
    def test_reasons(self, gym_servers: RunningServers, response, reason, name_match):
        verdict = self.verdict(gym_servers, task(expected_call=one("f", a=1)), response)
        assert (verdict["reason"], verdict["name_match"], verdict["reward"]) == (
            reason,
            name_match,
            float(reason == "match"),
        )

    def test_invalid_arguments_are_shown_as_sent(self, gym_servers: RunningServers):
        verdict = self.verdict(gym_servers, task(expected_call=one("f", a=1)), calls_response(("f", '{"a": ')))
        assert verdict["predicted_calls"] == [{"name": "f", "arguments": '{"a": '}]

    def test_mismatches_name_each_differing_path(self, gym_servers: RunningServers):
        expected = {"city": "Oslo", "when": {"day": "mon", "hours": [9, 10]}, "units": "metric"}
        predicted = {"city": "oslo", "when": {"day": "mon", "hours": [9, 11]}, "extra": 1}
        verdict = self.verdict(
            gym_servers, task(expected_call={"name": "f", "arguments": expected}), calls_response(("f", predicted))
        )
        assert verdict["mismatches"] == [
            "$.city: expected 'Oslo', got 'oslo'",
            "$.when.hours[1]: expected 10, got 11",
            "$.units: missing (expected 'metric')",
            "$.extra: unexpected (got 1)",
        ]

    def test_acceptable_calls_any_one_matches_and_its_index_is_reported(self, gym_servers: RunningServers):
        row = task(acceptable_calls=[one("f", a=1), one("g", b=2), one("g", b=3)])
        verdict = self.verdict(gym_servers, row, calls_response(("g", {"b": 3})))
        assert (verdict["reward"], verdict["alternative"], verdict["expected_calls"]) == (1.0, 2, [one("g", b=3)])
        # None matches: the verdict judges the alternative the call came closest to (same name).
        verdict = self.verdict(gym_servers, row, calls_response(("g", {"b": 4})))
        assert (verdict["reward"], verdict["reason"], verdict["alternative"]) == (0.0, "arguments_mismatch", 1)

    def test_a_batch_matches_as_a_set_one_to_one(self, gym_servers: RunningServers):
        row = task(expected_action={"type": "function_call_batch", "calls": [one("f", a=1), one("f", a=1), one("g")]})
        right = calls_response(("g", {}), ("f", {"a": 1}), ("f", {"a": 1}))
        assert self.verdict(gym_servers, row, right)["reward"] == 1.0
        # One call cannot stand for two expected ones; nor may a call be left over.
        for wrong, reason in (
            (calls_response(("g", {}), ("f", {"a": 1})), "wrong_call_count"),
            (calls_response(("g", {}), ("f", {"a": 1}), ("f", {"a": 2})), "arguments_mismatch"),
            (calls_response(("g", {}), ("f", {"a": 1}), ("f", {"a": 1}), ("g", {})), "wrong_call_count"),
        ):
            verdict = self.verdict(gym_servers, row, wrong)
            assert (verdict["reward"], verdict["reason"], verdict["expected_type"]) == (
                0.0,
                reason,
                "function_call_batch",
            )

    def test_reference_shaped_function_call_action(self, gym_servers: RunningServers):
        row = task(expected_action={"type": "function_call", "name": "f", "arguments": '{"a": [1, 2]}'})
        assert self.verdict(gym_servers, row, calls_response(("f", {"a": [1, 2]})))["reward"] == 1.0
        assert self.verdict(gym_servers, row, calls_response(("f", {"a": [2, 1]})))["reward"] == 0.0

    @pytest.mark.parametrize(
        ("response", "reward", "reason"),
        [
            (assistant_response("It is 21 degrees."), 1.0, "match"),
            (calls_response(("f", {})), 0.0, "called_a_tool"),
            (calls_response(("f", {}), text="Let me check."), 0.0, "called_a_tool"),
            (assistant_response("   "), 0.0, "no_message"),
        ],
    )
    def test_an_expected_message_rewards_answering_without_a_call(
        self, gym_servers: RunningServers, response, reward, reason
    ):
        verdict = self.verdict(
            gym_servers, task(expected_action={"type": "message", "content": "21 degrees"}), response
        )
        got = (verdict["reward"], verdict["reason"], verdict["expected_type"], verdict["expected_calls"])
        assert got == (reward, reason, "message", [])

    @pytest.mark.parametrize(
        ("expected", "response", "reward"),
        [
            (one("f", a=1, b=2, c=3), calls_response(("f", {"a": 1, "b": 2, "c": 4})), 2 / 3),
            (one("f", a=1, b=2), calls_response(("f", {"a": 1, "b": 2, "z": 0})), 2 / 3),  # an extra key counts against
            (one("f", a=1), calls_response(("g", {"a": 1})), 0.0),  # another tool earns nothing
            (one("f", a=1), calls_response(("f", '{"a": 1')), 0.0),
            (one("f", a=1), calls_response(("f", {"a": 1}), ("h", {})), 2 / 3),  # F1: one right of two made
            (one("f", a=1), calls_response(("f", {"a": 1})), 1.0),
        ],
    )
    def test_partial_credit(self, gym_servers: RunningServers, expected, response, reward):
        verdict = self.verdict(gym_servers, task(expected_call=expected), response, "partial")
        assert verdict["reward"] == pytest.approx(reward)
        assert self.verdict(gym_servers, task(expected_call=expected), response)["reward"] == float(reward == 1.0)

    def test_partial_credit_of_a_batch_pairs_calls_at_best(self, gym_servers: RunningServers):
        row = task(expected_action={"type": "function_call_batch", "calls": [one("f", a=1, b=1), one("f", a=2, b=2)]})
        # Paired (a=2,b=1)->(a=2,b=2): 1/2 and (a=1,b=1)->(a=1,b=1): 1, not greedily in order.
        response = calls_response(("f", {"a": 2, "b": 1}), ("f", {"a": 1, "b": 1}))
        assert self.verdict(gym_servers, row, response, "partial")["reward"] == pytest.approx(2 * 1.5 / 4)

    @pytest.mark.parametrize(
        ("fields", "message"),
        [
            ({}, "exactly one of expected_call, acceptable_calls, expected_action; it has none"),
            ({"expected_call": one("f"), "acceptable_calls": [one("f")]}, "it has expected_call, acceptable_calls"),
            ({"acceptable_calls": []}, "acceptable_calls is empty"),
            ({"expected_call": {"name": "f", "arguments": "{bad"}}, "arguments is not valid JSON"),
            ({"expected_call": {"name": "f", "arguments": "[1]"}}, "arguments must be a JSON object"),
            ({"expected_call": {"arguments": {}}}, "missing required field `name`"),
            ({"expected_action": {"type": "function_call"}}, "needs a name"),
            ({"expected_action": {"type": "function_call_batch", "calls": []}}, "non-empty calls list"),
            ({"expected_action": {"type": "dance"}}, "expected_action.type"),
        ],
    )
    def test_a_bad_row_is_a_422_saying_why(self, gym_servers: RunningServers, fields, message):
        reply = gym_servers.caller().post("/verify", {**task(**fields), "response": calls_response(("f", {}))})
        assert reply.status == 422, reply.text
        assert message in reply.json()["error"]["message"]


def test_values_equal_survives_hostile_values():
    rules = Rules()
    deep: Any = 1
    for _ in range(5000):
        deep = [deep]
    assert values_equal(deep, deep, rules) is False  # too deep to walk: no match, no crash
    assert values_equal(10**400, 1.5, Rules(number_tolerance=1.0)) is False
    assert values_equal(10**400, 10**400, rules) is True
    big = [Call("f", {"a": i}) for i in range(300)]
    score = score_calls(big, list(reversed(big)), rules, partial_credit=True)
    assert (score.reward, score.matched) == (1.0, 300)


def test_aggregate_metrics_over_tool_call_match_rows_only():
    manager = plugin_manager(gym_tool_call_match.plugin)
    rows = [
        {"environment": "tool_call_match", "reward": 1.0, "reason": "match", "name_match": True},
        {"environment": "tool_call_match", "reward": 0.0, "reason": "arguments_mismatch", "name_match": True},
        {"environment": "tool_call_match", "reward": 0.0, "reason": "no_call", "name_match": False},
        {"environment": "tool_call_match", "reward": 0.0, "reason": "arguments_mismatch", "name_match": True},
        {"environment": "tool_call_match", "reward": 0.0, "verification_skipped": True},
        {"environment": "xlam_fc", "reward": 1.0, "reason": "match", "name_match": True},
    ]
    assert manager.aggregate_metrics(rows) == {
        "tool_call_match/exact_match_rate": 0.25,
        "tool_call_match/name_accuracy": 0.75,
        "tool_call_match/reason/arguments_mismatch": 0.5,
        "tool_call_match/reason/match": 0.25,
        "tool_call_match/reason/no_call": 0.25,
    }


def scripted(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` with the scripted model's script: the row's conformance response as one turn."""
    turn: dict[str, Any] = {"tool_calls": []}
    for item in row["conformance"]["response"]["output"]:
        if item["type"] == "message":
            turn["text"] = "".join(part["text"] for part in item["content"])
        else:
            try:
                arguments = json.loads(item["arguments"])
            except ValueError:
                arguments = {"__cut_off__": item["arguments"]}  # the scripted model sends objects only
            turn["tool_calls"].append({"name": item["name"], "arguments": arguments})
    params = {**row["responses_create_params"], "metadata": {"scripted_turns": json.dumps([turn])}}
    return {**row, "responses_create_params": params}


def test_rollouts_through_tool_simulation_get_the_conformance_rewards():
    manager = plugin_manager(gym_tool_call_match.plugin, gym_tool_simulation.plugin, gym_scripted.plugin)
    config = yaml.safe_load((CONFIGS / "tool_call_match.yaml").read_text())
    with running_servers(config, plugins=manager) as global_config:
        caller = HTTPCaller(global_config.instances["agent"].url)
        for row in read_rows(EXAMPLES):
            result = caller.post("/run", scripted(row)).json()
            assert result["reward"] == row["conformance"]["reward"], (row["id"], result)
            assert result["environment"] == "tool_call_match" and result["num_model_calls"] == 1


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("*.yaml")), ids=lambda p: p.name)
def test_every_config_is_valid(path: Path):
    from gym_core import get_plugin_manager

    overrides = ["policy_model.base_url=http://127.0.0.1:9/v1", "policy_model.model=m"] if "openai" in path.name else []
    config = load_config(
        [path], overrides, env_file=None, server_types=get_plugin_manager().servers(), allocate_ports=False
    )
    assert {"tool_call_match", "tool_simulation"} <= {i.plugin for i in config.instances.values()}
