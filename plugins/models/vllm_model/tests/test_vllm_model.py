"""Tests of the vllm_model plugin, real servers on loopback: gym's conformance kit for
a model server, then what is particular to this one.

The plugin is registered explicitly rather than found through its entry point, so these tests also
run from a source checkout. The test of the example config needs gym's first-party plugins too; it
is skipped where they are not installed (in the plugin's own venv, say).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gym_core import PluginManager, ServerClient
from gym_core.schemas import decode_response, response_text
from gym_core.testing import ModelServerTests, RunningServers, first_party, plugin_manager, running_servers

import gym_vllm_model.plugin

PACKAGE = Path(__file__).resolve().parents[1]
CONFIG = PACKAGE / "configs" / "vllm_model.yaml"




def plugins(*others: object) -> PluginManager:
    """A plugin manager holding this plugin and ``others``."""
    return plugin_manager(gym_vllm_model.plugin, *others)


def example_config() -> dict:
    return yaml.safe_load(CONFIG.read_text())


class TestVllmModel(ModelServerTests):
    # The kit checks `policy`; `prefixed` shows an option at work.
    instances = {
        "policy": {"plugin": "vllm_model"},
        "prefixed": {"plugin": "vllm_model", "prefix": "echo: "},
    }
    instance = "policy"
    plugins = [gym_vllm_model.plugin]
    deterministic = True  # an echo: the same request, the same answer

    def test_responses_echo_the_last_user_message(self, gym_servers: RunningServers):
        conversation = [
            {"role": "user", "content": "first question"},
            {"role": "assistant", "content": "first answer"},
            {"role": "user", "content": [{"type": "input_text", "text": "second question"}]},
        ]
        response = decode_response(gym_servers.caller().post("/v1/responses", {"input": conversation}).body)
        assert response_text(response) == "second question"
        assert response.usage is not None and response.usage.output_tokens == 2

    def test_chat_completions_are_derived(self, gym_servers: RunningServers):
        completion = gym_servers.caller().post("/v1/chat/completions", {"messages": [{"role": "user", "content": "hello"}]})
        assert completion.json()["choices"][0]["message"]["content"] == "hello"

    def test_prefix_option(self, gym_servers: RunningServers):
        reply = gym_servers.caller("prefixed").post("/v1/responses", {"input": "hi"})
        assert response_text(decode_response(reply.body)) == "echo: hi"


async def test_example_config_runs_a_rollout():
    # The echo model calls no tool, so the counter keeps its initial count and the task is solved.
    manager = plugins(*first_party("counter", "simple_agent"))
    task = {"responses_create_params": {"input": "count to three"}, "initial_count": 3, "expected_count": 3}
    with running_servers(example_config(), plugins=manager) as config:
        async with ServerClient(config) as client:
            result = await client.post("agent", "/run", task)
    assert result["reward"] == 1.0
    assert response_text(decode_response(result["response"])) == "count to three"
