"""Tests of the mini_swe_agent plugin, real servers on loopback: gym's conformance kit for
an agent server, then what is particular to this one.

The plugin is registered explicitly rather than found through its entry point, so these tests also
run from a source checkout. The test of the example config needs gym's first-party plugins too; it
is skipped where they are not installed (in the plugin's own venv, say).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gym_core import ConfigError, ModelServer, PluginManager, ResourcesServer, ServerClient, Session, hookimpl, load_config
from gym_core.schemas import (
    Message,
    OutputText,
    Response,
    ResponseCreateParams,
    VerifyRequest,
    VerifyResponse,
    decode_response,
    response_text,
)
from gym_core.testing import AgentServerTests, RunningServers, first_party, plugin_manager, running_servers

import gym_mini_swe_agent.plugin

PACKAGE = Path(__file__).resolve().parents[1]
CONFIG = PACKAGE / "configs" / "mini_swe_agent.yaml"




def plugins(*others: object) -> PluginManager:
    """A plugin manager holding this plugin and ``others``."""
    return plugin_manager(gym_mini_swe_agent.plugin, *others)


def example_config() -> dict:
    return yaml.safe_load(CONFIG.read_text())


class EchoModel(ModelServer):
    """Answers with the request's input text."""

    async def responses(self, params: ResponseCreateParams) -> Response:
        # Agents send a string input as one user message.
        messages = [params.input] if isinstance(params.input, str) else [
            item.content for item in params.input if isinstance(item, Message) and item.role == "user"]
        text = messages[-1] if messages and isinstance(messages[-1], str) else ""
        return Response(output=[Message(role="assistant", content=[OutputText(text=text)])])


class ExactAnswerRequest(VerifyRequest, kw_only=True):
    expected_answer: str


class ExactAnswer(ResourcesServer):
    """Reward 1 when the response's text is the task's ``expected_answer``."""

    async def verify(self, session: Session, body: ExactAnswerRequest) -> VerifyResponse:
        return VerifyResponse(reward=float(response_text(body.response) == body.expected_answer))


class HelperServers:
    """A model and an environment for these tests, registered like any plugin."""

    @hookimpl
    def gym_register_servers(self, register):
        register(name="echo_model", kind="model", server=EchoModel)
        register(name="exact_answer", kind="resources", server=ExactAnswer)


class TestMiniSweAgent(AgentServerTests):
    server_type = "mini_swe_agent"
    plugins = [gym_mini_swe_agent.plugin, HelperServers()]
    model = {"plugin": "echo_model"}
    environment = {"plugin": "exact_answer"}
    # The echo model answers the question itself: right when the question is the answer.
    example_data = [
        {"responses_create_params": {"input": "42"}, "expected_answer": "42"},
        {"responses_create_params": {"input": "41"}, "expected_answer": "42"},
    ]

    def expected_reward(self, row):
        return float(row["responses_create_params"]["input"] == row["expected_answer"])

    def test_run_returns_the_model_response(self, gym_servers: RunningServers):
        result = gym_servers.caller().post("/run", {"responses_create_params": {"input": "42"}, "expected_answer": "42"})
        assert response_text(decode_response(result.json()["response"])) == "42"

    def test_responses_asks_the_model(self, gym_servers: RunningServers):
        response = gym_servers.caller().post("/v1/responses", {"input": "hello"})
        assert response_text(decode_response(response.body)) == "hello"


def test_references_must_name_servers_of_the_right_kind():
    config = TestMiniSweAgent.instances_config()
    config["mini_swe_agent"]["model_server"] = "environment"
    with pytest.raises(ConfigError, match="expected a model server"):
        load_config(base=config, env_file=None, server_types=plugins(HelperServers()).servers(), allocate_ports=False)


async def test_example_config_runs_a_rollout():
    # The scripted model says its line; the counter keeps its initial count, so the task is solved.
    manager = plugins(*first_party("scripted", "counter"))
    task = {"responses_create_params": {"input": "count to two"}, "initial_count": 2, "expected_count": 2}
    with running_servers(example_config(), plugins=manager) as config:
        async with ServerClient(config) as client:
            result = await client.post("agent", "/run", task)
    assert result["reward"] == 1.0
    assert result["final_count"] == 2
