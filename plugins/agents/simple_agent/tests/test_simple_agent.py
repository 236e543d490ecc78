"""The simple agent over real HTTP: gym's conformance kit (with the scripted model in the counter
environment), then its loop against a tiny environment and a model defined here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gym_core import (
    ConfigError,
    ModelServer,
    ResourcesServer,
    Session,
    SessionError,
    ToolError,
    hookimpl,
    load_config,
    tool,
)
from gym_core.schemas import FunctionCall, Response, ResponseCreateParams, VerifyRequest, VerifyResponse, new_id
from gym_core.testing import AgentServerTests, RunningServers, conformance_reward, conformance_tool_calls

import gym_counter.plugin
import gym_scripted.plugin
import gym_simple_agent.plugin

# Counter tasks kept beside the tests (not read from the counter plugin's folder): the tests also run
# from this plugin's published sdist (`gym test simple_agent`), where no workspace surrounds them.
COUNTER_TASKS = Path(__file__).resolve().parent / "data" / "counter_tasks.jsonl"


class Notes(ResourcesServer):
    @tool
    async def write(self, session: Session, text: str) -> dict:
        """Append a note."""
        notes = self.sessions.get_or_create(session.id, list)
        notes.append(text)
        return {"notes": len(notes)}

    @tool
    async def fail(self) -> dict:
        """Always fails."""
        raise ToolError("this tool always fails")

    @tool
    async def crash(self) -> dict:
        """A bug in the environment: a 500."""
        raise RuntimeError("environment bug")

    @tool
    async def lose_session(self) -> dict:
        """The session's state is gone (as after an eviction or a restart)."""
        raise SessionError("notes: no session state for this caller")

    async def verify(self, session: Session, body: VerifyRequest) -> VerifyResponse:
        notes = self.sessions.get(session.id, []) if session.exists else []
        return VerifyResponse(reward=float(len(notes)))

    reward_range = (0.0, float("inf"))  # one point per note


class AlwaysCalls(ModelServer):
    """Calls `write` on every turn: only max_steps stops it."""

    async def responses(self, params: ResponseCreateParams) -> Response:
        tools = [t.name for t in params.tools] if params.tools else []
        mode = (params.metadata or {}).get("mode", "write")
        names = {"fail": ["fail"], "crash": ["write", "crash"], "lose": ["write", "lose_session"]}.get(mode, ["write"])
        assert set(names) <= set(tools), tools
        return Response(
            output=[
                FunctionCall(
                    id=new_id("fc"),
                    call_id=new_id("call"),
                    name=name,
                    arguments=json.dumps({"text": "n"}) if name == "write" else "{}",
                )
                for name in names
            ]
        )


class HelperServers:
    """The tiny environment and the model above, registered like any plugin."""

    @hookimpl
    def gym_register_servers(self, register):
        register(name="notes", kind="resources", server=Notes)
        register(name="always_calls", kind="model", server=AlwaysCalls)


def notes_agent(max_steps: int) -> dict:
    return {
        "plugin": "simple_agent",
        "model_server": "always_calls",
        "resources_server": "notes",
        "max_steps": max_steps,
    }


class TestSimpleAgent(AgentServerTests):
    # The kit runs `simple_agent` (scripted policy, counter environment); the other agents play notes.
    instances = {
        "policy": {"plugin": "scripted"},
        "environment": {"plugin": "counter"},
        "simple_agent": {"plugin": "simple_agent", "model_server": "policy", "resources_server": "environment"},
        "notes": {"plugin": "notes"},
        "always_calls": {"plugin": "always_calls"},
        "three_steps": notes_agent(max_steps=3),
        "one_step": notes_agent(max_steps=1),
    }
    instance = "simple_agent"
    plugins = [gym_simple_agent.plugin, gym_scripted.plugin, gym_counter.plugin, HelperServers()]
    example_data = COUNTER_TASKS

    # The agent kit does not read the rows' `conformance` field: these hooks do. The scripted policy
    # makes the row's conformance tool calls (what the task asks) in one turn, then stops, and the
    # rollout must get the row's conformance reward.
    def run_body(self, row):
        calls = [{"name": name, "arguments": arguments} for name, arguments in conformance_tool_calls(row)]
        assert calls, "each counter example row has conformance tool calls"
        script = json.dumps([{"tool_calls": calls}, {"text": "done"}])
        params = {**row["responses_create_params"], "metadata": {"scripted_turns": script}}
        return {**row, "responses_create_params": params}

    def expected_reward(self, row):
        return conformance_reward(row)

    def test_max_steps_bounds_the_loop_and_tools_come_from_the_resources_server(self, gym_servers: RunningServers):
        result = (
            gym_servers.caller("three_steps").post("/run", {"responses_create_params": {"input": "take notes"}}).json()
        )
        kinds = [item["type"] for item in result["response"]["output"]]
        assert kinds == ["function_call", "function_call_output"] * 3
        assert result["reward"] == 3.0  # three notes in this rollout's session

    def test_the_rollout_records_what_produced_it_and_its_usage(self, gym_servers: RunningServers):
        # Turn 1: two offered calls and one unknown name (all three go through call_tool); turn 2: text.
        calls = [
            {"name": "increment_counter", "arguments": {"count": 3}},
            {"name": "get_counter_value", "arguments": {}},
            {"name": "no_such_tool", "arguments": {}},
        ]
        script = json.dumps([{"tool_calls": calls}, {"text": "done now"}])
        body = {
            "responses_create_params": {"input": "Add 3.", "metadata": {"scripted_turns": script}},
            "initial_count": 0,
            "expected_count": 3,
        }
        result = gym_servers.caller().post("/run", body).json()
        facts = {
            k: result[k]
            for k in (
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
            "agent": "simple_agent",
            "model_server": "policy",
            "model": "scripted",
            "environment": "counter",
            "resources_server": "environment",
            "num_model_calls": 2,
            "num_tool_calls": 3,
        }
        # The scripted model counts input items and output words: turn 1 sees 1 item and makes 3 calls;
        # turn 2 sees 7 items (the user's, 3 calls, 3 outputs) and says 2 words.
        per_turn = [(u["input_tokens"], u["output_tokens"], u["total_tokens"]) for u in result["usage_per_turn"]]
        assert per_turn == [(1, 3, 4), (7, 2, 9)]
        assert (result["usage"]["input_tokens"], result["usage"]["output_tokens"], result["usage"]["total_tokens"]) == (
            8,
            5,
            13,
        )
        assert result["usage"] == result["response"]["usage"]
        assert result["reward"] == 1.0

    def test_failing_tool_is_an_output_the_model_sees(self, gym_servers: RunningServers):
        task = {"responses_create_params": {"input": "x", "metadata": {"mode": "fail"}}}
        output = gym_servers.caller("one_step").post("/run", task).json()["response"]["output"][1]
        assert output["type"] == "function_call_output"
        assert json.loads(output["output"]) == {"error": "this tool always fails"}

    def test_the_model_cannot_call_control_routes_as_tools(self, gym_servers: RunningServers):
        """On a counter task (0 → 7), a model that "calls"
        seed_session with initial_count 7 must not reach it (reward 0, the count untouched), nor
        verify, close_session or a path outside the tools."""
        row = {"responses_create_params": {"input": "count to 7"}, "initial_count": 0, "expected_count": 7}
        calls = [
            {"name": "seed_session", "arguments": {"initial_count": 7}},
            {"name": "verify", "arguments": {"expected_count": 0}},
            {"name": "close_session", "arguments": {}},
            {"name": "../health", "arguments": {}},
            {"name": "tools/increment_counter", "arguments": {"count": 7}},
        ]
        script = json.dumps([{"tool_calls": calls}, {"text": "done"}])
        body = {**row, "responses_create_params": {"input": "count to 7", "metadata": {"scripted_turns": script}}}
        result = gym_servers.caller().post("/run", body).json()
        assert (result["reward"], result["final_count"]) == (0.0, 0)
        outputs = [json.loads(i["output"]) for i in result["response"]["output"] if i["type"] == "function_call_output"]
        assert len(outputs) == len(calls)
        for call, output in zip(calls, outputs):
            assert output["error"].startswith(
                f"unknown tool {call['name']!r}: the tools offered are get_counter_value, increment_counter"
            ), output

    def test_a_tool_that_crashes_fails_the_rollout_instead_of_informing_the_model(self, gym_servers: RunningServers):
        reply = gym_servers.caller("one_step").post(
            "/run", {"responses_create_params": {"input": "x", "metadata": {"mode": "crash"}}}
        )
        assert reply.status == 502, reply.text  # retryable for the collector: an infrastructure failure
        error = reply.json()["error"]
        assert error["type"] == "internal_error" and "notes /tools/crash: status 500" in error["message"], error
        assert "environment bug" not in reply.text  # the 500 carries no exception text

    def test_a_lost_session_fails_the_rollout_with_its_type(self, gym_servers: RunningServers):
        reply = gym_servers.caller("one_step").post(
            "/run", {"responses_create_params": {"input": "x", "metadata": {"mode": "lose"}}}
        )
        assert reply.status == 424 and reply.json()["error"]["type"] == "session_expired", reply.text

    def test_sessions_are_closed_after_each_rollout_failed_or_not(self, gym_servers: RunningServers):
        notes = gym_servers.servers["notes"]
        gym_servers.caller("three_steps").post("/run", {"responses_create_params": {"input": "take notes"}})
        gym_servers.caller("one_step").post(
            "/run", {"responses_create_params": {"input": "x", "metadata": {"mode": "crash"}}}
        )
        assert len(notes.sessions) == 0
        counter = gym_servers.servers["environment"]
        for line in COUNTER_TASKS.read_text().splitlines():
            assert gym_servers.caller().post("/run", self.run_body(json.loads(line))).json()["reward"] == 1.0
        assert len(counter.sessions) == 0


def test_config_requires_references():
    servers = TestSimpleAgent.plugin_manager().servers()
    config = {
        "agent": {"plugin": "simple_agent", "model_server": "modl", "resources_server": "env"},
        "env": {"plugin": "notes"},
        "model": {"plugin": "always_calls"},
    }
    with pytest.raises(ConfigError) as error:
        load_config(base=config, env_file=None, server_types=servers)
    assert "agent.model_server" in str(error.value) and "did you mean 'model'" in str(error.value)
