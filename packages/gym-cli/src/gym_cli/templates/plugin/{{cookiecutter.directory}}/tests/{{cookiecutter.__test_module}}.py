"""End-to-end tests of the {{ cookiecutter.__plugin_name }} plugin: real servers on loopback, real HTTP.

The plugin is registered explicitly rather than found through its entry point, so these tests also
run from a source checkout. The test of the example config needs gym's first-party plugins too; it
is skipped where they are not installed (in the plugin's own environment, say).
"""

from __future__ import annotations

{% if cookiecutter.kind == "resources" %}import json
{% endif %}from importlib.metadata import entry_points
from pathlib import Path

import pytest
import yaml

{%- if cookiecutter.kind == "agent" %}
from gym_core import (
    ConfigError,
    ModelServer,
    PluginManager,
    ResourcesServer,
    ServerClient,
    Session,
    hookimpl,
    load_config,
)
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
{%- elif cookiecutter.kind == "model" %}
from gym_core import PluginManager, ServerClient
from gym_core.schemas import decode_response, response_text
{%- else %}
from gym_core import PluginManager, ServerClient
from gym_core.schemas import Message, OutputText, Response, decode_create_params
{%- endif %}
from gym_core.testing import running_servers

import {{ cookiecutter.__module_name }}.plugin

PACKAGE = Path(__file__).resolve().parents[1]
CONFIG = PACKAGE / "configs" / "{{ cookiecutter.__plugin_name }}.yaml"


def plugins(*first_party: str, extra: dict[str, object] | None = None) -> PluginManager:
    """A plugin manager holding this plugin, the named first-party plugins and ``extra`` ones."""
    manager = PluginManager(load_entry_points=False)
    manager.register({{ cookiecutter.__module_name }}.plugin, name="{{ cookiecutter.__plugin_name }}")
    installed = {ep.name: ep for ep in entry_points(group="gym")}
    missing = [name for name in first_party if name not in installed]
    if missing:
        pytest.skip(f"needs the first-party plugins {', '.join(missing)} (installed in gym's workspace)")
    for name in first_party:
        manager.register(installed[name].load(), name=name)
    for name, plugin in (extra or {}).items():
        manager.register(plugin, name=name)
    return manager


def example_config() -> dict:
    return yaml.safe_load(CONFIG.read_text())
{%- if cookiecutter.kind == "resources" %}


def answer(text: str) -> Response:
    """A model response whose final message is ``text``."""
    return Response(output=[Message(role="assistant", content=[OutputText(text=text)])])


def example_tasks() -> list[dict]:
    lines = (PACKAGE / "data" / "example.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


TASK = {"responses_create_params": {"input": "What is 12 + 30?"}, "expected_answer": "42"}


@pytest.fixture
def servers():
    with running_servers({"env": {"plugin": "{{ cookiecutter.__plugin_name }}"}}, plugins=plugins()) as config:
        yield config


async def test_tool_then_verify(servers):
    async with ServerClient(servers) as client:
        cookies: dict[str, str] = {}
        await client.post("env", "/seed_session", TASK, cookies=cookies)
        assert await client.post("env", "/add", {"a": 12, "b": 30}, cookies=cookies) == {"sum": 42}
        right = await client.post("env", "/verify", {**TASK, "response": answer("42")}, cookies=cookies)
        wrong = await client.post("env", "/verify", {**TASK, "response": answer("41")}, cookies=cookies)
    assert right == {"reward": 1.0, "answer": "42", "tool_calls": 1}
    assert wrong["reward"] == 0.0


async def test_sessions_are_separate(servers):
    async with ServerClient(servers) as client:
        first: dict[str, str] = {}
        second: dict[str, str] = {}
        await client.post("env", "/add", {"a": 1, "b": 1}, cookies=first)
        await client.post("env", "/add", {"a": 1, "b": 1}, cookies=first)
        await client.post("env", "/add", {"a": 1, "b": 1}, cookies=second)
        verdict = await client.post("env", "/verify", {**TASK, "response": answer("42")}, cookies=first)
    assert verdict["tool_calls"] == 2


async def test_tools_are_offered_to_models(servers):
    async with ServerClient(servers) as client:
        tools = await client.get("env", "/tools")
    assert [t["name"] for t in tools] == ["add"]
    assert set(tools[0]["parameters"]["properties"]) == {"a", "b"}


def test_example_tasks_are_valid():
    tasks = example_tasks()
    assert len(tasks) >= 3
    for task in tasks:
        decode_create_params(task["responses_create_params"])
        assert isinstance(task["expected_answer"], str)


async def test_example_config_solves_every_example():
    # The scripted model calls the tool, then gives the expected answer (its script rides in metadata).
    manager = plugins("scripted", "simple_agent")
    with running_servers(example_config(), plugins=manager) as config:
        async with ServerClient(config) as client:
            for task in example_tasks():
                script = [{"tool_calls": [{"name": "add", "arguments": {"a": 1, "b": 2}}]}, {"text": task["expected_answer"]}]
                params = {**task["responses_create_params"], "metadata": {"scripted_turns": json.dumps(script)}}
                result = await client.post("agent", "/run", {**task, "responses_create_params": params})
                assert (result["reward"], result["tool_calls"]) == (1.0, 1), result
{%- elif cookiecutter.kind == "model" %}


@pytest.fixture
def servers():
    with running_servers({"policy": {"plugin": "{{ cookiecutter.__plugin_name }}"}}, plugins=plugins()) as config:
        yield config


async def test_responses_echo_the_last_user_message(servers):
    conversation = [
        {"role": "user", "content": "first question"},
        {"role": "assistant", "content": "first answer"},
        {"role": "user", "content": [{"type": "input_text", "text": "second question"}]},
    ]
    async with ServerClient(servers) as client:
        raw = await client.request("POST", "policy", "/v1/responses", body={"input": conversation})
    response = decode_response(raw)
    assert response_text(response) == "second question"
    assert response.usage is not None and response.usage.output_tokens == 2


async def test_chat_completions_are_derived(servers):
    async with ServerClient(servers) as client:
        completion = await client.post("policy", "/v1/chat/completions", {"messages": [{"role": "user", "content": "hello"}]})
    assert completion["choices"][0]["message"]["content"] == "hello"


async def test_prefix_option():
    manager = plugins()
    with running_servers({"policy": {"plugin": "{{ cookiecutter.__plugin_name }}", "prefix": "echo: "}}, plugins=manager) as config:
        async with ServerClient(config) as client:
            raw = await client.request("POST", "policy", "/v1/responses", body={"input": "hi"})
    assert response_text(decode_response(raw)) == "echo: hi"


async def test_example_config_runs_a_rollout():
    # The echo model calls no tool, so the counter keeps its initial count and the task is solved.
    manager = plugins("counter", "simple_agent")
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
        text = params.input if isinstance(params.input, str) else ""
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


SERVERS = {
    "policy": {"plugin": "echo_model"},
    "answers": {"plugin": "exact_answer"},
    "agent": {"plugin": "{{ cookiecutter.__plugin_name }}", "model_server": "policy", "resources_server": "answers"},
}


@pytest.fixture
def servers():
    with running_servers(SERVERS, plugins=plugins(extra={"helpers": HelperServers()})) as config:
        yield config


async def test_run_scores_the_model_answer(servers):
    async with ServerClient(servers) as client:
        right = await client.post("agent", "/run", {"responses_create_params": {"input": "42"}, "expected_answer": "42"})
        wrong = await client.post("agent", "/run", {"responses_create_params": {"input": "41"}, "expected_answer": "42"})
    assert right["reward"] == 1.0
    assert response_text(decode_response(right["response"])) == "42"
    assert wrong["reward"] == 0.0


async def test_responses_asks_the_model(servers):
    async with ServerClient(servers) as client:
        response = await client.post("agent", "/v1/responses", {"input": "hello"})
    assert response_text(decode_response(response)) == "hello"


def test_references_must_name_servers_of_the_right_kind():
    swapped = {**SERVERS, "agent": {**SERVERS["agent"], "model_server": "answers"}}
    manager = plugins(extra={"helpers": HelperServers()})
    with pytest.raises(ConfigError, match="expected a model server"):
        load_config(base=swapped, env_file=None, plugins=manager, allocate_ports=False)


async def test_example_config_runs_a_rollout():
    # The scripted model says its line; the counter keeps its initial count, so the task is solved.
    manager = plugins("scripted", "counter")
    task = {"responses_create_params": {"input": "count to two"}, "initial_count": 2, "expected_count": 2}
    with running_servers(example_config(), plugins=manager) as config:
        async with ServerClient(config) as client:
            result = await client.post("agent", "/run", task)
    assert result["reward"] == 1.0
    assert result["final_count"] == 2

{%- endif %}
