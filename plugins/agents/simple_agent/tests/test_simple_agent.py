"""The simple agent over real HTTP: gym's conformance kit (with the scripted model in the counter
environment), then its loop against a tiny environment and a model defined here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gym_core import ConfigError, ModelServer, ResourcesServer, Session, ToolError, hookimpl, load_config, tool
from gym_core.schemas import FunctionCall, Response, ResponseCreateParams, VerifyRequest, VerifyResponse, new_id
from gym_core.testing import AgentServerTests, RunningServers

import gym_counter.plugin
import gym_scripted.plugin
import gym_simple_agent.plugin

COUNTER_TASKS = Path(__file__).resolve().parents[3] / "resources" / "counter" / "data" / "example.jsonl"


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

    async def verify(self, session: Session, body: VerifyRequest) -> VerifyResponse:
        notes = self.sessions.get(session.id, []) if session.exists else []
        return VerifyResponse(reward=float(len(notes)))

    reward_range = (0.0, float("inf"))  # one point per note


class AlwaysCalls(ModelServer):
    """Calls `write` on every turn: only max_steps stops it."""

    async def responses(self, params: ResponseCreateParams) -> Response:
        tools = [t.name for t in params.tools] if params.tools else []
        name = "fail" if "fail" in str(params.metadata) else "write"
        assert name in tools, tools
        arguments = json.dumps({"text": "n"}) if name == "write" else "{}"
        return Response(output=[FunctionCall(id=new_id("fc"), call_id=new_id("call"), name=name, arguments=arguments)])


class HelperServers:
    """The tiny environment and the model above, registered like any plugin."""

    @hookimpl
    def gym_register_servers(self, register):
        register(name="notes", kind="resources", server=Notes)
        register(name="always_calls", kind="model", server=AlwaysCalls)


def notes_agent(max_steps: int) -> dict:
    return {"plugin": "simple_agent", "model_server": "always_calls", "resources_server": "notes", "max_steps": max_steps}


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

    def run_body(self, row):
        # The scripted policy adds exactly what the task asks, then stops: every rollout solves its task.
        add = {"name": "increment_counter", "arguments": {"count": row["expected_count"] - row["initial_count"]}}
        script = json.dumps([{"tool_calls": [add]}, {"text": "done"}])
        params = {**row["responses_create_params"], "metadata": {"scripted_turns": script}}
        return {**row, "responses_create_params": params}

    def expected_reward(self, row):
        return 1.0

    def test_max_steps_bounds_the_loop_and_tools_come_from_the_resources_server(self, gym_servers: RunningServers):
        result = gym_servers.caller("three_steps").post("/run", {"responses_create_params": {"input": "take notes"}}).json()
        kinds = [item["type"] for item in result["response"]["output"]]
        assert kinds == ["function_call", "function_call_output"] * 3
        assert result["reward"] == 3.0  # three notes in this rollout's session

    def test_failing_tool_is_an_output_the_model_sees(self, gym_servers: RunningServers):
        task = {"responses_create_params": {"input": "x", "metadata": {"mode": "fail"}}}
        output = gym_servers.caller("one_step").post("/run", task).json()["response"]["output"][1]
        assert output["type"] == "function_call_output"
        assert json.loads(output["output"]) == {"error": "this tool always fails"}


def test_config_requires_references():
    servers = TestSimpleAgent.plugin_manager().servers()
    config = {"agent": {"plugin": "simple_agent", "model_server": "modl", "resources_server": "env"},
              "env": {"plugin": "notes"}, "model": {"plugin": "always_calls"}}
    with pytest.raises(ConfigError) as error:
        load_config(base=config, env_file=None, server_types=servers)
    assert "agent.model_server" in str(error.value) and "did you mean 'model'" in str(error.value)
