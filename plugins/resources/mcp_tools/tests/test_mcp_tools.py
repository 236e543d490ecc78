"""Tests of the mcp_tools plugin, real servers on loopback: gym's conformance kit for
a resources server, then what is particular to this one.

The plugin is registered explicitly rather than found through its entry point, so these tests also
run from a source checkout. The test of the example config needs gym's first-party plugins too; it
is skipped where they are not installed (in the plugin's own venv, say).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from gym_core import PluginManager, ServerClient
from gym_core.testing import (
    ResourcesServerTests,
    RunningServers,
    assistant_response,
    first_party,
    plugin_manager,
    read_rows,
    running_servers,
)

import gym_mcp_tools.plugin

PACKAGE = Path(__file__).resolve().parents[1]
CONFIG = PACKAGE / "configs" / "mcp_tools.yaml"




def plugins(*others: object) -> PluginManager:
    """A plugin manager holding this plugin and ``others``."""
    return plugin_manager(gym_mcp_tools.plugin, *others)


def example_config() -> dict:
    return yaml.safe_load(CONFIG.read_text())


class TestMcpTools(ResourcesServerTests):
    server_type = "mcp_tools"
    plugins = [gym_mcp_tools.plugin]
    example_data = PACKAGE / "data" / "example.jsonl"

    # What a perfect policy does with each example task: one call of the tool, then the answer.
    def tool_calls_for(self, row):
        return [("add", {"a": 1, "b": 2})]

    def response_for(self, row):
        return assistant_response(row["expected_answer"])

    def expected_reward(self, row):
        return 1.0

    def test_verify_reports_the_answer_and_the_tool_calls(self, gym_servers: RunningServers):
        task = {"responses_create_params": {"input": "What is 12 + 30?"}, "expected_answer": "42"}
        caller = gym_servers.caller()
        caller.post("/seed_session", task)
        assert caller.post("/add", {"a": 12, "b": 30}).json() == {"sum": 42}
        right = caller.post("/verify", {**task, "response": assistant_response("42")}).json()
        wrong = caller.post("/verify", {**task, "response": assistant_response("41")}).json()
        assert right == {"reward": 1.0, "answer": "42", "tool_calls": 1}
        assert wrong["reward"] == 0.0

    def test_sessions_are_separate(self, gym_servers: RunningServers):
        first, second = gym_servers.caller(), gym_servers.caller()
        for caller in (first, first, second):
            caller.post("/add", {"a": 1, "b": 1})
        task = {"responses_create_params": {"input": "q"}, "expected_answer": "2"}
        assert first.post("/verify", {**task, "response": assistant_response("2")}).json()["tool_calls"] == 2

    def test_tools_are_offered_to_models(self, gym_servers: RunningServers):
        tools = gym_servers.caller().get("/tools").json()
        assert [t["name"] for t in tools] == ["add"]
        assert set(tools[0]["parameters"]["properties"]) == {"a", "b"}


async def test_example_config_solves_every_example():
    # The scripted model calls the tool, then gives the expected answer (its script rides in metadata).
    manager = plugins(*first_party("scripted", "simple_agent"))
    with running_servers(example_config(), plugins=manager) as config:
        async with ServerClient(config) as client:
            for task in read_rows(PACKAGE / "data" / "example.jsonl"):
                script = [{"tool_calls": [{"name": "add", "arguments": {"a": 1, "b": 2}}]}, {"text": task["expected_answer"]}]
                params = {**task["responses_create_params"], "metadata": {"scripted_turns": json.dumps(script)}}
                result = await client.post("agent", "/run", {**task, "responses_create_params": params})
                assert (result["reward"], result["tool_calls"]) == (1.0, 1), result
