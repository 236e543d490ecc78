"""A whole rollout over real HTTP: head, counter (stateful tools), scripted model, simple agent."""

from __future__ import annotations

import json

import msgspec
import pytest

from gym_core import ServerClient
from gym_core.schemas import FunctionCall, FunctionCallOutput, decode_response
from gym_core.testing import running_servers

TWO_CALLS = [
    {"tool_calls": [{"name": "increment_counter", "arguments": {"count": 3}}]},
    {"tool_calls": [{"name": "increment_counter", "arguments": {"count": 4}}]},
    {"text": "I added 3 and then 4."},
]

CONFIG = {
    "counter": {"plugin": "counter"},
    "policy": {"plugin": "scripted", "turns": TWO_CALLS},
    "agent": {"plugin": "simple_agent", "model_server": "policy", "resources_server": "counter"},
}


def task(initial: int, expected: int) -> dict:
    return {
        "responses_create_params": {"input": [{"role": "user", "content": "Add 3 then 4 to the counter."}]},
        "initial_count": initial,
        "expected_count": expected,
    }


async def test_rollout_keeps_session_state_between_tool_calls(plugins):
    with running_servers(CONFIG, plugins) as config:
        async with await ServerClient.from_head(config.head_url) as client:
            result = await client.post("agent", "/run", task(initial=1, expected=8))
            other = await client.post("agent", "/run", task(initial=10, expected=8))

    # 1 + 3 + 4: both increments reached the same session, and verify saw it.
    assert result["reward"] == 1.0
    assert result["final_count"] == 8
    response = decode_response(msgspec.json.encode(result["response"]))
    calls = [i for i in response.output if isinstance(i, FunctionCall)]
    outputs = [i for i in response.output if isinstance(i, FunctionCallOutput)]
    assert [json.loads(c.arguments) for c in calls] == [{"count": 3}, {"count": 4}]
    assert [json.loads(o.output) for o in outputs] == [{"count": 4}, {"count": 8}]
    assert response.usage is not None and response.usage.output_tokens > 0
    # A second rollout gets its own session: 10 + 3 + 4 = 17, not 8 + 7.
    assert other["final_count"] == 17
    assert other["reward"] == 0.0


async def test_tool_error_becomes_output_the_model_sees(plugins):
    turns = [{"tool_calls": [{"name": "no_such_tool", "arguments": {}}]}, {"text": "done"}]
    config = {**CONFIG, "policy": {"plugin": "scripted", "turns": turns}}
    with running_servers(config, plugins) as global_config:
        async with await ServerClient.from_head(global_config.head_url) as client:
            result = await client.post("agent", "/run", task(initial=0, expected=0))
    outputs = [i for i in result["response"]["output"] if i["type"] == "function_call_output"]
    assert len(outputs) == 1
    assert "error" in json.loads(outputs[0]["output"])
    assert result["reward"] == 1.0


@pytest.mark.parametrize("path", ["/server_instances", "/global_config_dict_yaml"])
async def test_head_server_publishes_instances(plugins, path):
    with running_servers(CONFIG, plugins) as config:
        async with ServerClient() as client:
            body = await client.request("GET", config.head_url, path)
    text = body.decode()
    for name in ("counter", "policy", "agent"):
        assert name in text
