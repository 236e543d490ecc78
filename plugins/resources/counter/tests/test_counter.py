"""The counter environment over real HTTP: seed, tools, verify, one session per cookie."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gym_core import ServerClient, ServerHTTPError
from gym_core.plugins import PluginManager
from gym_core.testing import running_servers

import gym_counter.plugin

DATA = Path(__file__).resolve().parents[1] / "data" / "example.jsonl"


@pytest.fixture
def plugins() -> PluginManager:
    manager = PluginManager(load_entry_points=False)
    manager.register(gym_counter.plugin, name="counter")
    return manager


def verify_body(expected: int) -> dict:
    return {
        "responses_create_params": {"input": "count"},
        "response": {"output": []},
        "expected_count": expected,
    }


async def test_tools_change_the_session_count_and_verify_reads_it(plugins):
    with running_servers({"counter": {"plugin": "counter"}}, plugins) as config:
        async with ServerClient(config) as client:
            mine: dict[str, str] = {}
            other: dict[str, str] = {}
            await client.post("counter", "/seed_session", {"initial_count": 5}, cookies=mine)
            await client.post("counter", "/seed_session", {"initial_count": 100}, cookies=other)
            assert await client.post("counter", "/increment_counter", {"count": 2}, cookies=mine) == {"count": 7}
            assert await client.post("counter", "/increment_counter", {"count": -10}, cookies=mine) == {"count": -3}
            assert await client.post("counter", "/get_counter_value", {}, cookies=other) == {"count": 100}
            good = await client.post("counter", "/verify", verify_body(-3), cookies=mine)
            bad = await client.post("counter", "/verify", verify_body(-3), cookies=other)
            unseeded = await client.post("counter", "/verify", verify_body(0), cookies={})
    assert good == {"reward": 1.0, "final_count": -3}
    assert bad == {"reward": 0.0, "final_count": 100}
    assert unseeded["reward"] == 0.0


async def test_tool_definitions_and_argument_errors(plugins):
    with running_servers({"counter": {"plugin": "counter"}}, plugins) as config:
        async with ServerClient(config) as client:
            tools = {t["name"]: t for t in await client.get("counter", "/tools")}
            with pytest.raises(ServerHTTPError) as wrong_type:
                await client.post("counter", "/increment_counter", {"count": "three"})
    assert set(tools) == {"increment_counter", "get_counter_value"}
    params = tools["increment_counter"]["parameters"]
    assert params["properties"]["count"]["type"] == "integer"
    assert params["required"] == ["count"]
    assert "add" in tools["increment_counter"]["description"].lower()
    assert wrong_type.value.status == 422 and "count" in str(wrong_type.value)


def test_example_data_is_consistent():
    rows = [json.loads(line) for line in DATA.read_text().splitlines()]
    assert len(rows) >= 5
    for row in rows:
        assert {"responses_create_params", "initial_count", "expected_count"} <= set(row)
        assert isinstance(row["responses_create_params"]["input"], list)
