"""The simple agent against a tiny environment and a scripted model defined here, over real HTTP."""

from __future__ import annotations

import json
import pytest

from gym_core import ModelServer, ResourcesServer, ServerClient, Session, ToolError, hookimpl, tool
from gym_core.plugins import PluginManager
from gym_core.schemas import FunctionCall, Response, ResponseCreateParams, VerifyRequest, VerifyResponse, new_id
from gym_core.testing import running_servers

import gym_simple_agent.plugin


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


class AlwaysCalls(ModelServer):
    """Calls `write` on every turn: only max_steps stops it."""

    async def responses(self, params: ResponseCreateParams) -> Response:
        tools = [t.name for t in params.tools] if params.tools else []
        name = "fail" if "fail" in str(params.metadata) else "write"
        assert name in tools, tools
        arguments = json.dumps({"text": "n"}) if name == "write" else "{}"
        return Response(output=[FunctionCall(id=new_id("fc"), call_id=new_id("call"), name=name, arguments=arguments)])


class Plugin:
    @hookimpl
    def gym_register_servers(self, register):
        register(name="notes", kind="resources", server=Notes)
        register(name="always_calls", kind="model", server=AlwaysCalls)


@pytest.fixture
def plugins() -> PluginManager:
    manager = PluginManager(load_entry_points=False)
    manager.register(gym_simple_agent.plugin, name="simple_agent")
    manager.register(Plugin(), name="test_servers")
    return manager


def config(max_steps: int) -> dict:
    return {
        "env": {"plugin": "notes"},
        "model": {"plugin": "always_calls"},
        "agent": {"plugin": "simple_agent", "model_server": "model", "resources_server": "env", "max_steps": max_steps},
    }


async def test_max_steps_bounds_the_loop_and_tools_come_from_the_resources_server(plugins):
    with running_servers(config(max_steps=3), plugins) as global_config:
        async with ServerClient(global_config) as client:
            result = await client.post("agent", "/run", {"responses_create_params": {"input": "take notes"}})
    kinds = [item["type"] for item in result["response"]["output"]]
    assert kinds == ["function_call", "function_call_output"] * 3
    assert result["reward"] == 3.0  # three notes in this rollout's session


async def test_failing_tool_is_an_output_the_model_sees(plugins):
    with running_servers(config(max_steps=1), plugins) as global_config:
        async with ServerClient(global_config) as client:
            result = await client.post(
                "agent", "/run", {"responses_create_params": {"input": "x", "metadata": {"mode": "fail"}}}
            )
    output = result["response"]["output"][1]
    assert output["type"] == "function_call_output"
    assert json.loads(output["output"]) == {"error": "this tool always fails"}


def test_config_requires_references(plugins):
    from gym_core import ConfigError, load_config

    with pytest.raises(ConfigError) as error:
        load_config(base={"agent": {"plugin": "simple_agent", "model_server": "modl", "resources_server": "env"},
                          "env": {"plugin": "notes"}, "model": {"plugin": "always_calls"}},
                    env_file=None, plugins=plugins)
    assert "agent.model_server" in str(error.value) and "did you mean 'model'" in str(error.value)

