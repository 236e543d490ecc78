"""Tests of the non_executing agent, real servers on loopback: gym's conformance kit over xlam_fc's
example rows (the scripted model answering each row with its conformance response, exact rewards),
then the agent's rules: one model call, tool calls never executed, the session seeded, carried to
verify and closed (failures too), typed failures, the rollout's facts, the configs.

The scripted model (``metadata.scripted_turns``) gives exact outputs; helper servers registered like
any plugin play a model that fails and one that answers garbage.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from gym_core import ModelServer, hookimpl, load_config
from gym_core.schemas import ResponseCreateParams
from gym_core.testing import AgentServerTests, RunningServers, plugin_manager, read_rows, running_servers

import gym_counter.plugin
import gym_non_executing.plugin
import gym_scripted.plugin
import gym_structured_outputs.plugin
import gym_xlam_fc.plugin

PACKAGE = Path(__file__).resolve().parents[1]
CONFIGS = PACKAGE / "configs"
XLAM_ROWS = Path(gym_xlam_fc.plugin.__file__).resolve().parents[2] / "data" / "example.jsonl"
STRUCTURED_ROWS = Path(gym_structured_outputs.plugin.__file__).resolve().parents[2] / "data" / "example.jsonl"


def turn_of(response: dict[str, Any]) -> dict[str, Any]:
    """The scripted model's turn that produces ``response``'s output: its text and its calls.

    Arguments that are not a JSON object (cut off by a length limit, say) become ``{}``, which is
    how xlam_fc and structured_outputs read them too: the reward is the same."""
    turn: dict[str, Any] = {"tool_calls": []}
    for item in response["output"]:
        if item["type"] == "message":
            turn["text"] = "".join(part.get("text", "") for part in item["content"])
        elif item["type"] == "function_call":
            try:
                arguments = json.loads(item["arguments"])
            except ValueError:
                arguments = {}
            turn["tool_calls"].append(
                {"name": item["name"], "arguments": arguments if isinstance(arguments, dict) else {}}
            )
    return turn


def scripted(row: dict[str, Any], *turns: dict[str, Any]) -> dict[str, Any]:
    """``row`` with the scripted model's turns in its params' metadata (default: its conformance answer)."""
    script = list(turns) or [turn_of(row["conformance"]["response"])]
    params = {**row["responses_create_params"], "metadata": {"scripted_turns": json.dumps(script)}}
    return {**row, "responses_create_params": params}


class FailingModel(ModelServer):
    """A model server with a bug: every request is a 500."""

    async def responses(self, params: ResponseCreateParams) -> Any:
        raise RuntimeError("boom")


class GarbageModel(ModelServer):
    """A model server that answers 200 with something that is not a Responses API object."""

    async def responses(self, params: ResponseCreateParams) -> Any:
        return {"output": "not a list of items"}


class HelperModels:
    @hookimpl
    def gym_register_servers(self, register):
        register(name="failing_model", kind="model", server=FailingModel)
        register(name="garbage_model", kind="model", server=GarbageModel)


def counter_task(initial: int, expected: int, *turns: dict[str, Any]) -> dict[str, Any]:
    row = {
        "responses_create_params": {"input": [{"role": "user", "content": "Add 3 to the counter."}]},
        "initial_count": initial,
        "expected_count": expected,
    }
    return scripted(row, *turns)


class TestNonExecutingOnXlamFc(AgentServerTests):
    """The kit, over xlam_fc's example rows: each row answered with its conformance response by the
    scripted model, through one model call, must get exactly the reward its conformance field says."""

    server_type = "non_executing"
    plugins = [gym_non_executing.plugin, gym_scripted.plugin, gym_xlam_fc.plugin, gym_counter.plugin, HelperModels()]
    environment = {"plugin": "xlam_fc"}
    example_data = XLAM_ROWS
    instances = {
        "policy": {"plugin": "scripted"},
        "environment": {"plugin": "xlam_fc"},
        "non_executing": {"plugin": "non_executing", "model_server": "policy", "resources_server": "environment"},
        "counter": {"plugin": "counter"},
        "counter_agent": {"plugin": "non_executing", "model_server": "policy", "resources_server": "counter"},
        "failing": {"plugin": "failing_model"},
        "failing_agent": {"plugin": "non_executing", "model_server": "failing", "resources_server": "counter"},
        "garbage": {"plugin": "garbage_model"},
        "garbage_agent": {"plugin": "non_executing", "model_server": "garbage", "resources_server": "counter"},
    }
    instance = "non_executing"

    def run_body(self, row):
        return scripted(row)

    def expected_reward(self, row):
        return row["conformance"]["reward"]

    def environment_reward_range(self, servers):
        return (0.0, 1.0)

    def test_the_example_rows_cover_both_rewards(self):
        assert {row["conformance"]["reward"] for row in read_rows(XLAM_ROWS)} == {0.0, 1.0}

    def test_one_model_call_whose_calls_are_returned_unexecuted(self, gym_servers: RunningServers):
        row = read_rows(XLAM_ROWS)[0]
        oslo, lima = row["expected_answers"]
        # A second turn would make the rollout wrong: it must never be asked for.
        body = scripted(row, {"tool_calls": [oslo, lima]}, {"tool_calls": [oslo]})
        result = gym_servers.caller().post("/run", body).json()
        output = result["response"]["output"]
        assert [item["type"] for item in output] == ["function_call", "function_call"]
        assert [json.loads(item["arguments"]) for item in output] == [oslo["arguments"], lima["arguments"]]
        assert (result["reward"], result["num_predicted"], result["num_correct"]) == (1.0, 2, 2)

    def test_the_rollout_records_what_produced_it_and_its_usage(self, gym_servers: RunningServers):
        row = read_rows(XLAM_ROWS)[0]
        result = gym_servers.caller().post("/run", scripted(row)).json()
        facts = {
            key: result[key]
            for key in (
                "agent",
                "model_server",
                "model",
                "environment",
                "resources_server",
                "num_model_calls",
                "num_tool_calls",
            )
        }
        assert facts == {
            "agent": "non_executing",
            "model_server": "policy",
            "model": "scripted",
            "environment": "xlam_fc",
            "resources_server": "environment",
            "num_model_calls": 1,
            "num_tool_calls": 2,
        }
        # The scripted model counts input items and output calls: 2 input messages, 2 calls.
        assert (result["usage"]["input_tokens"], result["usage"]["output_tokens"], result["usage"]["total_tokens"]) == (
            2,
            2,
            4,
        )
        assert result["usage_per_turn"] == [result["usage"]] == [result["response"]["usage"]]

    def test_tools_are_never_executed_and_the_seeded_session_reaches_verify(self, gym_servers: RunningServers):
        # counter's seed sets the count from the row, verify reads it from the session (409 when
        # no session came), and increment_counter would change it: the call must not run.
        call = {"tool_calls": [{"name": "increment_counter", "arguments": {"count": 3}}]}
        caller = gym_servers.caller("counter_agent")
        unchanged = caller.post("/run", counter_task(5, 5, call)).json()
        assert (unchanged["reward"], unchanged["final_count"], unchanged["num_tool_calls"]) == (1.0, 5, 1)
        assert unchanged["response"]["output"][0]["name"] == "increment_counter"
        assert not [item for item in unchanged["response"]["output"] if item["type"] == "function_call_output"]
        wanted = caller.post("/run", counter_task(5, 8, call)).json()
        assert (wanted["reward"], wanted["final_count"]) == (0.0, 5)

    def test_every_rollout_closes_its_session(self, gym_servers: RunningServers):
        counter = gym_servers.servers["counter"]
        caller = gym_servers.caller("counter_agent")
        for initial in range(3):
            assert caller.post("/run", counter_task(initial, initial, {"text": "done"})).status == 200
        assert len(counter.sessions) == 0

    def test_a_verify_that_refuses_the_row_fails_the_rollout_and_closes_its_session(self, gym_servers: RunningServers):
        counter = gym_servers.servers["counter"]
        row = counter_task(1, 1, {"text": "done"})
        del row["expected_count"]  # counter's verify needs it: a 422 from /verify
        reply = gym_servers.caller("counter_agent").post("/run", row)
        assert reply.status == 424, reply.text
        assert reply.json()["error"]["type"] == "validation_error"
        assert len(counter.sessions) == 0

    def test_a_model_that_refuses_the_request_fails_the_rollout_and_closes_its_session(
        self, gym_servers: RunningServers
    ):
        counter = gym_servers.servers["counter"]
        row = counter_task(1, 1, {"text": "done"})
        row["responses_create_params"]["metadata"] = {"scripted_turns": "not a script"}  # the model answers 422
        reply = gym_servers.caller("counter_agent").post("/run", row)
        assert reply.status == 424, reply.text
        assert "/v1/responses" in reply.json()["error"]["message"]
        assert len(counter.sessions) == 0

    def test_a_model_server_failure_fails_the_rollout_retryably_and_closes_its_session(
        self, gym_servers: RunningServers
    ):
        counter = gym_servers.servers["counter"]
        reply = gym_servers.caller("failing_agent").post("/run", counter_task(1, 1, {"text": "done"}))
        assert reply.status == 502, reply.text  # retryable: the collector tries the rollout again
        assert "failing /v1/responses" in reply.json()["error"]["message"]
        assert len(counter.sessions) == 0

    def test_an_invalid_model_response_fails_the_rollout_naming_the_model(self, gym_servers: RunningServers):
        counter = gym_servers.servers["counter"]
        reply = gym_servers.caller("garbage_agent").post("/run", counter_task(1, 1, {"text": "done"}))
        assert reply.status == 424, reply.text
        assert "invalid response from the model server" in reply.json()["error"]["message"]
        assert len(counter.sessions) == 0

    def test_responses_returns_the_model_response_with_string_input_as_one_message(self, gym_servers: RunningServers):
        script = json.dumps([{"tool_calls": [{"name": "f", "arguments": {"a": 1}}]}])
        reply = gym_servers.caller().post(
            "/v1/responses", {"input": "three words here", "metadata": {"scripted_turns": script}}
        )
        response = reply.json()
        assert [(item["type"], item["name"], item["arguments"]) for item in response["output"]] == [
            ("function_call", "f", '{"a":1}')
        ]
        # The scripted model counts a string input's words but a list's items: one message came.
        assert response["usage"]["input_tokens"] == 1
        # No rollout: nothing was seeded on the environment.
        assert len(gym_servers.servers["environment"].sessions) == 0


class TestToolCallModeOfStructuredOutputs(AgentServerTests):
    """structured_outputs' tool-call rows through the agent: the call is validated, never executed."""

    server_type = "non_executing"
    plugins = [gym_non_executing.plugin, gym_scripted.plugin, gym_structured_outputs.plugin]
    environment = {"plugin": "structured_outputs", "verify_workers": 1}
    example_data = [row for row in read_rows(STRUCTURED_ROWS) if row.get("response_mode") == "tool_call"]

    def run_body(self, row):
        return scripted(row)

    def expected_reward(self, row):
        return row["conformance"]["reward"]

    def test_the_rows_cover_a_right_call_and_wrong_ones(self):
        assert sorted(row["conformance"]["reward"] for row in self.example_data) == [0.0, 0.0, 1.0]

    def test_a_wrong_tool_is_scored_not_executed(self, gym_servers: RunningServers):
        row = self.example_data[0]
        call = {"name": "save_person", "arguments": {"extraction": {"name": "Ann", "age": 3, "email": None}}}
        result = gym_servers.caller().post("/run", scripted(row, {"tool_calls": [call]})).json()
        assert (result["reward"], result["error_type"], result["num_tool_calls"]) == (0.0, "wrong_tool_name", 1)


def test_skip_verification_is_ignored_as_in_the_reference():
    manager = plugin_manager(gym_non_executing.plugin, gym_scripted.plugin, gym_xlam_fc.plugin)
    config = {
        "policy": {"plugin": "scripted"},
        "xlam_fc": {"plugin": "xlam_fc"},
        "agent": {
            "plugin": "non_executing",
            "model_server": "policy",
            "resources_server": "xlam_fc",
            "skip_verification": True,
            "skip_verification_reward": 0.5,
        },
    }
    row = read_rows(XLAM_ROWS)[2]  # a wrong answer: reward 0 from the verifier
    with running_servers(config, plugins=manager) as global_config:
        from gym_core.testing import HTTPCaller

        result = HTTPCaller(global_config.instances["agent"].url).post("/run", scripted(row)).json()
    assert result["reward"] == 0.0
    assert "verification_skipped" not in result and result["num_correct"] == 0


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("*.yaml")), ids=lambda p: p.name)
def test_every_config_is_valid_and_pairs_the_agent_with_its_environment(path: Path):
    from gym_core import get_plugin_manager

    manager = get_plugin_manager()
    overrides = ["policy_model.base_url=http://127.0.0.1:9/v1", "policy_model.model=m"] if "openai" in path.name else []
    config = load_config([path], overrides, env_file=None, server_types=manager.servers(), allocate_ports=False)
    agents = [i for i in config.instances.values() if i.plugin == "non_executing"]
    assert len(agents) == 1
    raw = yaml.safe_load(path.read_text())
    environment = raw[raw[agents[0].name]["resources_server"]]["plugin"]
    assert environment in {"xlam_fc", "structured_outputs"}
    assert environment.split("_")[0] in path.name or path.name == "non_executing.yaml"
