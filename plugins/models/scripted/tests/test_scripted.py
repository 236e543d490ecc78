"""The scripted model: turn selection, scripts in metadata, both OpenAI endpoints."""

from __future__ import annotations

import json

import pytest

from gym_core import ServerClient, ServerHTTPError
from gym_core.plugins import PluginManager
from gym_core.schemas import decode_create_params
from gym_core.testing import running_servers

import gym_scripted.plugin
from gym_scripted.server import model_turns_in

TURNS = [{"tool_calls": [{"name": "add", "arguments": {"x": 1}}]}, {"text": "done"}]


@pytest.fixture
def plugins() -> PluginManager:
    manager = PluginManager(load_entry_points=False)
    manager.register(gym_scripted.plugin, name="scripted")
    return manager


def test_model_turns_counts_runs_of_generated_items():
    params = decode_create_params(
        {
            "input": [
                {"role": "user", "content": "hi"},
                {"type": "function_call", "call_id": "a", "name": "f", "arguments": "{}"},
                {"type": "function_call", "call_id": "b", "name": "f", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "a", "output": "1"},
                {"type": "function_call_output", "call_id": "b", "output": "1"},
                {"role": "assistant", "content": "ok"},
                {"role": "user", "content": "again"},
            ]
        }
    )
    assert model_turns_in(params) == 2
    assert model_turns_in(decode_create_params({"input": "hello"})) == 0


async def test_walks_the_script_turn_by_turn(plugins):
    with running_servers({"m": {"plugin": "scripted", "turns": TURNS}}, plugins) as config:
        async with ServerClient(config) as client:
            first = await client.post("m", "/v1/responses", {"input": "go"})
            call = first["output"][0]
            second = await client.post(
                "m",
                "/v1/responses",
                {"input": [{"role": "user", "content": "go"}, call,
                           {"type": "function_call_output", "call_id": call["call_id"], "output": "2"}]},
            )
            chat = await client.post("m", "/v1/chat/completions", {"messages": [{"role": "user", "content": "go"}]})
    assert call["type"] == "function_call" and json.loads(call["arguments"]) == {"x": 1}
    assert second["output"][0]["content"][0]["text"] == "done"
    assert chat["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "add"
    assert chat["choices"][0]["finish_reason"] == "tool_calls"


async def test_script_from_request_metadata_and_bad_script(plugins):
    with running_servers({"m": {"plugin": "scripted"}}, plugins) as config:
        async with ServerClient(config) as client:
            own = json.dumps([{"text": "from metadata"}])
            reply = await client.post("m", "/v1/responses", {"input": "x", "metadata": {"scripted_turns": own}})
            with pytest.raises(ServerHTTPError) as bad:
                await client.post("m", "/v1/responses", {"input": "x", "metadata": {"scripted_turns": "[{"}})
    assert reply["output"][0]["content"][0]["text"] == "from metadata"
    assert bad.value.status == 422 and "scripted_turns" in str(bad.value)
