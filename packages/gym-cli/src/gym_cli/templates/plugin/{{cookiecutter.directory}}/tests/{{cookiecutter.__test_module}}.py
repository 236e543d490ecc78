"""Tests of the {{ cookiecutter.__plugin_name }} plugin, real servers on loopback: gym's conformance kit for
{{ 'an' if cookiecutter.kind == 'agent' else 'a' }} {{ cookiecutter.kind }} server, then what is particular to this one.

The plugin is registered explicitly rather than found through its entry point, so these tests also
run from a source checkout. The test of the example config needs gym's first-party plugins too; it
is skipped where they are not installed (in the plugin's own venv, say).
"""

from __future__ import annotations

{% if cookiecutter.kind == "resources" %}import json
{% endif %}from pathlib import Path

import pytest
import yaml
{% if cookiecutter.kind == "agent" %}
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
{%- elif cookiecutter.kind == "model" %}
from gym_core import PluginManager, ServerClient
from gym_core.schemas import decode_response, response_text
from gym_core.testing import ModelServerTests, RunningServers, first_party, plugin_manager, running_servers
{%- else %}
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
{%- endif %}

import {{ cookiecutter.__module_name }}.plugin

PACKAGE = Path(__file__).resolve().parents[1]
CONFIG = PACKAGE / "configs" / "{{ cookiecutter.__plugin_name }}.yaml"




def plugins(*others: object) -> PluginManager:
    """A plugin manager holding this plugin and ``others``."""
    return plugin_manager({{ cookiecutter.__module_name }}.plugin, *others)


def example_config() -> dict:
    return yaml.safe_load(CONFIG.read_text())
{%- if cookiecutter.kind == "resources" %}


class Test{{ cookiecutter.__class_prefix }}(ResourcesServerTests):
    server_type = "{{ cookiecutter.__plugin_name }}"
    plugins = [{{ cookiecutter.__module_name }}.plugin]
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
{%- elif cookiecutter.kind == "model" %}


class Test{{ cookiecutter.__class_prefix }}(ModelServerTests):
    # The kit checks `policy`; `prefixed` shows an option at work.
    instances = {
        "policy": {"plugin": "{{ cookiecutter.__plugin_name }}"},
        "prefixed": {"plugin": "{{ cookiecutter.__plugin_name }}", "prefix": "echo: "},
    }
    instance = "policy"
    plugins = [{{ cookiecutter.__module_name }}.plugin]
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
{%- else %}


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


class Test{{ cookiecutter.__class_prefix }}(AgentServerTests):
    server_type = "{{ cookiecutter.__plugin_name }}"
    plugins = [{{ cookiecutter.__module_name }}.plugin, HelperServers()]
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
    config = Test{{ cookiecutter.__class_prefix }}.instances_config()
    config["{{ cookiecutter.__plugin_name }}"]["model_server"] = "environment"
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
{%- endif %}
