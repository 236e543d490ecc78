"""The multi_step resources server over real HTTP: gym's conformance kit (seed → tools → verify on
the example rows, each with the calls and the answer of a scripted policy), then its tools, its
sessions, its verdicts, its row errors, its options, its metrics, and whole rollouts through
simple_agent.

The plugin is registered explicitly rather than found through its entry point, so these tests also
run from a source checkout. The rollout test needs gym's first-party plugins too; it is skipped
where they are not installed (in the plugin's own venv, say).
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
    plugin_manager,
    read_rows,
    running_servers,
)

import gym_multi_step.plugin

PACKAGE = Path(__file__).resolve().parents[1]
EXAMPLES = PACKAGE / "data" / "example.jsonl"
CONFIG = PACKAGE / "configs" / "multi_step.yaml"


def value(synonym: str) -> int:
    return sum(map(ord, synonym))


# Each example row's `conformance` field (ignored by multi_step) holds a policy's play: the tool
# calls the kit posts between seed and verify, the response simple_agent would then send to /verify
# (every call with its output, then a final message; see play_response) and the reward it must get:
#   0: right: both synonyms of 'Hot', in list order (reward 1)
#   1: the right values, in the wrong order: an order failure
#   2: looks up the term itself, 'Quiet', and submits its value: a minefield hit
#   3: malformed: the arguments are cut off (not posted to the tool, as simple_agent does)
#   4: right, as floats (847.0 == 847), hyphen included in 'Sky-high' (reward 1; floats are not posted)
#   5: never submits
#   6: strings are not integers: wrong, though parsed_synonym_values reads [743, 764]


def play_response(lookups: list[str], submission: str | None, text: str = "Done.") -> dict[str, Any]:
    """The response simple_agent sends to /verify after such a play: every call with its output,
    then a final assistant message."""
    output: list[dict[str, Any]] = []
    calls = [("get_synonym_value", json.dumps({"synonym": s})) for s in lookups]
    if submission is not None:
        calls.append(("extract_synonym_values", submission))
    for i, (name, arguments) in enumerate(calls):
        output.append(
            {
                "type": "function_call",
                "id": f"fc_{i}",
                "call_id": f"call_{i}",
                "name": name,
                "arguments": arguments,
                "status": "completed",
            }
        )
        result = (
            {"synonym_value": value(json.loads(arguments)["synonym"])}
            if name == "get_synonym_value"
            else {"success": True}
        )
        output.append({"type": "function_call_output", "call_id": f"call_{i}", "output": json.dumps(result)})
    output.extend(assistant_response(text)["output"])
    return {"output": output}


def submit(values: Any) -> dict[str, Any]:
    """A response whose only call submits ``values`` (an object to encode, or a raw string)."""
    return play_response([], values if isinstance(values, str) else json.dumps({"synonym_values": values}))


def row(number: int = 0, **changes: Any) -> dict[str, Any]:
    task = dict(read_rows(EXAMPLES)[number])
    task.update(changes)
    return task


def manager_with(*others: object) -> PluginManager:
    return plugin_manager(gym_multi_step.plugin, *others)


class TestMultiStep(ResourcesServerTests):
    server_type = "multi_step"
    plugins = [gym_multi_step.plugin]
    example_data = EXAMPLES

    def verdict(self, servers: RunningServers, task: dict[str, Any], response: dict[str, Any]) -> dict[str, Any]:
        reply = servers.caller().post("/verify", {**task, "response": response})
        assert reply.status == 200, reply.text
        return reply.json()

    def test_every_example_play_posts_the_calls_its_response_shows(self):
        for task in read_rows(EXAMPLES):
            play = task["conformance"]
            calls = [item for item in play["response"]["output"] if item["type"] == "function_call"]
            lookups = [json.loads(c["arguments"]) for c in calls if c["name"] == "get_synonym_value"]
            posted = [c["arguments"] for c in play["tool_calls"] if c["name"] == "get_synonym_value"]
            assert posted == lookups, task["id"]
            for call in play["tool_calls"]:
                if call["name"] == "extract_synonym_values":  # posted only when the schema accepts it
                    assert all(type(v) is int for v in call["arguments"]["synonym_values"]), task["id"]

    def test_example_rows_are_consistent(self):
        for task in read_rows(EXAMPLES):
            assert task["expected_synonym_values"] == [value(s) for s in task["expected_synonyms"]], task["id"]
            assert task["minefield_label_value"] == value(task["minefield_label"]), task["id"]
            assert task["responses_create_params"]["parallel_tool_calls"] is False

    def test_example_plays_get_the_spec_fields(self, gym_servers: RunningServers):
        fields = (
            "parsed_synonym_values",
            "accuracy",
            "set_overlap",
            "original_term_minefield_hit",
            "order_instruction_following_failure",
        )
        want = {
            0: ([711, 407], True, 1.0, False, False),
            1: ([293, 647, 613], False, 1.0, False, True),
            2: ([520, 609], False, 0.5, True, False),
            3: (None, False, 0.0, False, False),
            4: ([847, 772], True, 1.0, False, False),
            5: ([], False, 0.0, False, False),
            6: ([743, 764], False, 0.0, False, False),
        }
        for task in read_rows(EXAMPLES):
            verdict = self.verdict(gym_servers, task, self.response_for(task))
            assert tuple(verdict[f] for f in fields) == want[task["id"]], (task["id"], verdict)
            assert ("reason" in verdict) == (task["id"] == 3), verdict
        assert self.verdict(gym_servers, row(3), self.response_for(row(3)))["reason"] == "invalid_json"

    def test_tools_are_offered_to_models(self, gym_servers: RunningServers):
        tools = {t["name"]: t for t in gym_servers.caller().get("/tools").json()}
        assert sorted(tools) == ["extract_synonym_values", "get_synonym_value"]
        assert tools["get_synonym_value"]["parameters"]["required"] == ["synonym"]
        assert tools["extract_synonym_values"]["parameters"]["properties"]["synonym_values"]["items"] == {
            "type": "integer"
        }

    def test_get_synonym_value_sums_code_points_of_the_string_as_given(self, gym_servers: RunningServers):
        caller = gym_servers.caller()
        for synonym, expected in (
            ("Warm", 407),
            ("warm", 439),
            ("Sky-high", 772),
            ("Draw back", 831),
            ("", 0),
            ("Café", 499),
        ):
            assert caller.post("/get_synonym_value", {"synonym": synonym}).json() == {"synonym_value": expected}

    def test_extract_synonym_values_answers_success(self, gym_servers: RunningServers):
        caller = gym_servers.caller()
        assert caller.post("/extract_synonym_values", {"synonym_values": [711, 407]}).json() == {"success": True}
        assert caller.post("/extract_synonym_values", {"synonym_values": []}).json() == {"success": True}
        # gym decodes tool arguments strictly: strings are refused (the reference would coerce them).
        assert caller.post("/extract_synonym_values", {"synonym_values": ["711"]}).status == 422

    def test_sessions_record_lookups_and_the_minefield(self, gym_servers: RunningServers):
        task = row(0)
        first, second = gym_servers.caller(), gym_servers.caller()
        for caller in (first, second):
            caller.post("/seed_session", task)
        for synonym in ("Hot", "Blazing", "Warm"):
            first.post("/get_synonym_value", {"synonym": synonym})
        second.post("/get_synonym_value", {"synonym": "hot"})  # not the label: case counts
        right = play_response([], json.dumps({"synonym_values": [711, 407]}))
        one = first.post("/verify", {**task, "response": right}).json()
        two = second.post("/verify", {**task, "response": right}).json()
        assert (one["reward"], one["num_lookups"], one["minefield_looked_up"]) == (1.0, 3, True)
        assert (two["reward"], two["num_lookups"], two["minefield_looked_up"]) == (1.0, 1, False)
        # Seeding again starts the record afresh; verify without a session reports none.
        first.post("/seed_session", task)
        assert first.post("/verify", {**task, "response": right}).json()["num_lookups"] == 0
        assert gym_servers.caller().post("/verify", {**task, "response": right}).json()["num_lookups"] == 0

    def test_the_last_submission_is_scored(self, gym_servers: RunningServers):
        task = row(0)
        good, bad = json.dumps({"synonym_values": [711, 407]}), json.dumps({"synonym_values": [407]})
        good_then_bad = {"output": submit(good)["output"] + submit(bad)["output"]}
        broken_then_good = {"output": submit("{oops")["output"] + submit(good)["output"]}
        assert self.verdict(gym_servers, task, good_then_bad)["reward"] == 0.0
        assert self.verdict(gym_servers, task, broken_then_good)["reward"] == 1.0

    @pytest.mark.parametrize(
        ("arguments", "reason"),
        [
            ('{"synonym_values": [711', "invalid_json"),
            ("[711, 407]", "no_synonym_values"),
            ('{"values": [711, 407]}', "no_synonym_values"),
            ('{"synonym_values": "711, 407"}', "not_a_list"),
            ('{"synonym_values": [711, "Warm"]}', "not_integers"),
            ('{"synonym_values": [[711], 407]}', "not_integers"),
        ],
    )
    def test_an_unreadable_submission_gets_reward_0_and_a_reason(self, gym_servers: RunningServers, arguments, reason):
        verdict = self.verdict(gym_servers, row(0), submit(arguments))
        assert verdict == {
            "reward": 0.0,
            "parsed_synonym_values": None,
            "accuracy": False,
            "set_overlap": 0.0,
            "original_term_minefield_hit": False,
            "order_instruction_following_failure": False,
            "num_lookups": 0,
            "minefield_looked_up": False,
            "reason": reason,
        }

    def test_no_submission_scores_an_empty_list(self, gym_servers: RunningServers):
        verdict = self.verdict(gym_servers, row(0), assistant_response("The values are 711 and 407."))
        assert (verdict["reward"], verdict["parsed_synonym_values"], verdict["set_overlap"]) == (0.0, [], 0.0)
        assert "reason" not in verdict

    def test_rows_with_nulls_and_lax_values_are_accepted(self, gym_servers: RunningServers):
        # Lax coercion of the integer fields, as pydantic does for the reference's rows.
        task = row(0, id="0", expected_synonym_values=["711", 407.0], minefield_label_value="299", source=None)
        task["responses_create_params"] = {
            **task["responses_create_params"],
            "temperature": None,
            "max_output_tokens": None,
        }
        response = {**submit([711, 299]), "usage": None, "incomplete_details": None, "error": None}
        verdict = self.verdict(gym_servers, task, response)
        assert (verdict["reward"], verdict["set_overlap"], verdict["original_term_minefield_hit"]) == (0.0, 0.5, True)
        assert self.verdict(gym_servers, task, submit([711, 407]))["reward"] == 1.0

    @pytest.mark.parametrize(
        "field", ["id", "expected_synonym_values", "expected_synonyms", "minefield_label", "minefield_label_value"]
    )
    def test_a_row_missing_a_field_is_a_422_naming_it(self, gym_servers: RunningServers, field):
        task = row(0)
        del task[field]
        reply = gym_servers.caller().post("/verify", {**task, "response": submit([711, 407])})
        assert reply.status == 422, reply.text
        assert f"missing required field `{field}`" in reply.json()["error"]["message"]

    @pytest.mark.parametrize(
        ("changes", "message"),
        [
            ({"expected_synonym_values": []}, "expected_synonym_values must not be empty"),
            ({"expected_synonym_values": [711, "Warm"]}, "expected_synonym_values[1] must be an integer"),
            ({"minefield_label_value": 1.5}, "minefield_label_value must be an integer"),
            ({"id": "zero"}, "id must be an integer"),
            ({"minefield_label": 7}, "minefield_label"),
            ({"expected_synonyms": "Blazing"}, "expected_synonyms"),
        ],
    )
    def test_a_bad_row_field_is_a_422_naming_it(self, gym_servers: RunningServers, changes, message):
        reply = gym_servers.caller().post("/verify", {**row(0, **changes), "response": submit([711, 407])})
        assert reply.status == 422, reply.text
        assert message in reply.json()["error"]["message"]

    def test_large_submissions_are_scored_off_the_event_loop(self, gym_servers: RunningServers):
        # Past 32 KiB of arguments scoring runs in a thread: the same verdict.
        expected = list(range(1000, 9000))
        task = row(0, expected_synonym_values=expected)
        assert len(json.dumps({"synonym_values": expected})) > 32_768
        assert self.verdict(gym_servers, task, submit(expected))["reward"] == 1.0
        shuffled = self.verdict(gym_servers, task, submit(expected[::-1]))
        assert (shuffled["reward"], shuffled["order_instruction_following_failure"]) == (0.0, True)


def test_scoring_past_the_time_limit_gives_reward_0_with_a_reason():
    expected = list(range(1000, 30000))
    with running_servers(
        {"multi_step": {"plugin": "multi_step", "verify_timeout_s": 1e-6}}, plugins=manager_with()
    ) as config:
        caller = HTTPCaller(config.instances["multi_step"].url)
        verdict = caller.post(
            "/verify", {**row(0, expected_synonym_values=expected), "response": submit(expected)}
        ).json()
        assert (verdict["reward"], verdict["parsed_synonym_values"], verdict["reason"]) == (0.0, None, "timeout")
        # Small submissions are still scored inline.
        assert caller.post("/verify", {**row(0), "response": submit([711, 407])}).json()["reward"] == 1.0


def test_fail_on_malformed_arguments_answers_500_as_the_reference():
    options = {"plugin": "multi_step", "fail_on_malformed_arguments": True}
    with running_servers({"multi_step": options}, plugins=manager_with()) as config:
        caller = HTTPCaller(config.instances["multi_step"].url)
        reply = caller.post("/verify", {**row(0), "response": submit('{"synonym_values": [711')})
        assert reply.status == 500, reply.text
        # gym answers an unhandled error without its text (that stays in the server's log).
        assert reply.json()["error"]["type"] == "internal_error"
        # Readable submissions and no submission are scored as usual.
        assert caller.post("/verify", {**row(0), "response": submit([407, 711])}).json()["reward"] == 0.0
        assert (
            caller.post("/verify", {**row(0), "response": assistant_response("no")}).json()["parsed_synonym_values"]
            == []
        )


def test_aggregate_metrics_average_the_bool_fields_over_multi_step_rows_only():
    rows = [
        {
            "environment": "multi_step",
            "reward": 1.0,
            "accuracy": True,
            "original_term_minefield_hit": False,
            "order_instruction_following_failure": False,
            "minefield_looked_up": True,
            "set_overlap": 1.0,
        },
        {
            "environment": "multi_step",
            "reward": 0.0,
            "accuracy": False,
            "original_term_minefield_hit": True,
            "order_instruction_following_failure": False,
            "minefield_looked_up": True,
            "set_overlap": 0.5,
        },
        {
            "environment": "multi_step",
            "reward": 0.0,
            "accuracy": False,
            "original_term_minefield_hit": False,
            "order_instruction_following_failure": True,
            "minefield_looked_up": False,
            "set_overlap": 1.0,
        },
        {
            "environment": "multi_step",
            "reward": 0.0,
            "accuracy": False,
            "original_term_minefield_hit": False,
            "order_instruction_following_failure": False,
            "minefield_looked_up": False,
            "reason": "invalid_json",
        },
        {"environment": "math", "reward": 1.0, "accuracy": True, "reason": "timeout"},
    ]
    assert manager_with().aggregate_metrics(rows) == {
        "multi_step/mean/accuracy": 0.25,
        "multi_step/mean/original_term_minefield_hit": 0.25,
        "multi_step/mean/order_instruction_following_failure": 0.25,
        "multi_step/mean/minefield_looked_up": 0.5,
        "multi_step/unreadable_rate": 0.25,
    }


async def test_rollouts_through_simple_agent():
    # The scripted model looks up one synonym per turn (the tool answers reach it as
    # function_call_output items), submits, then answers; the session counts its lookups.
    manager = manager_with(*first_party("scripted", "simple_agent"))
    with running_servers(yaml.safe_load(CONFIG.read_text()), plugins=manager) as config:
        async with ServerClient(config) as client:
            task = row(1)  # 'Cold': Frosty, Icy, Chilly
            plays = {
                (1.0, False): ["Frosty", "Icy", "Chilly"],
                (0.0, True): ["Cold", "Frosty", "Icy"],  # looks up the term, submits its value
            }
            for (reward, minefield), lookups in plays.items():
                script = [{"tool_calls": [{"name": "get_synonym_value", "arguments": {"synonym": s}}]} for s in lookups]
                submission = {
                    "name": "extract_synonym_values",
                    "arguments": {"synonym_values": [value(s) for s in lookups]},
                }
                script.append({"tool_calls": [submission]})
                script.append({"text": "Done."})
                params = {**task["responses_create_params"], "metadata": {"scripted_turns": json.dumps(script)}}
                result = await client.post("agent", "/run", {**task, "responses_create_params": params})
                outputs = [
                    item["output"] for item in result["response"]["output"] if item["type"] == "function_call_output"
                ]
                assert outputs[:3] == [
                    json.dumps({"synonym_value": value(s)}, separators=(",", ":")) for s in lookups
                ], outputs
                assert (result["reward"], result["original_term_minefield_hit"]) == (reward, minefield), result
                assert (result["num_lookups"], result["minefield_looked_up"]) == (3, minefield), result
