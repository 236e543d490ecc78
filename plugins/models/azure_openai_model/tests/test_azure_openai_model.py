"""Tests of the azure_openai_model plugin, real servers on loopback.

The upstream is a stub of an Azure OpenAI resource (a Litestar app in a uvicorn thread) that is as
strict as Azure about what identifies a call: the deployment in the URL path, the ``api-version``
query parameter, the ``api-key`` header, and no argument it does not know; it answers with Azure's
error bodies otherwise. The official ``AzureOpenAI`` client calls the stub directly, which shows the
stub speaks what Azure's own SDK speaks; then gym's conformance kit and the plain ``openai`` client
call the plugin in front of it.

The plugin is registered explicitly rather than found through its entry point, so these tests also
run from a source checkout. The test of the example config needs gym's first-party plugins too.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import openai
import pytest
import yaml
from litestar import Litestar, Request, Response, post
from litestar.response import Stream

from gym_core import ConfigError, PluginManager, ServerClient
from gym_core.config import free_port, load_config
from gym_core.schemas import decode_response, response_text
from gym_core.serving import ServerThread
from gym_core.testing import ModelServerTests, RunningServers, first_party, plugin_manager, running_servers

import gym_azure_openai_model.plugin

PACKAGE = Path(__file__).resolve().parents[1]
CONFIG = PACKAGE / "configs" / "azure_openai_model.yaml"

DEPLOYMENT = "gpt-4o-mini-eval"
API_KEY = "azure-test-key-3f9c2b7e"
API_VERSION = "2024-10-21"
# The model Azure names in its answers: the deployment's model, not the deployment.
UPSTREAM_MODEL = "gpt-4o-mini-2024-07-18"
# Chat completion arguments Azure accepts; any other is refused with 400, as Azure does.
CHAT_ARGUMENTS = frozenset({
    "messages", "model", "tools", "tool_choice", "temperature", "top_p", "max_tokens", "max_completion_tokens",
    "stop", "n", "seed", "logprobs", "top_logprobs", "parallel_tool_calls", "metadata", "stream", "stream_options",
    "response_format", "reasoning_effort", "user", "frequency_penalty", "presence_penalty", "logit_bias",
})  # fmt: skip
NO_FILTER = {"hate": {"filtered": False, "severity": "safe"}, "violence": {"filtered": False, "severity": "safe"}}


def azure_error(status: int, code: str, message: str, headers: dict[str, str] | None = None) -> Response:
    return Response({"error": {"code": code, "message": message}}, status_code=status, headers=headers)


class AzureStub:
    """An Azure OpenAI resource with one deployment, which answers "echo: <last user message>".

    Some messages ask for a behaviour instead: ``busy`` (429), ``crash`` (500), ``slow`` (answers
    after 1.5 s), ``hold`` (answers after 0.5 s, to overlap calls), ``filtered`` (the content filter
    stops the answer), ``leak`` (a 401 that echoes the request's api-key header), ``add`` (with
    ``tools``: calls the first tool), ``die`` (with ``stream``: the connection drops mid-answer), ``no
    stream`` (with ``stream``: the whole JSON answer, as a server that does not stream gives).

    With ``stream: true`` the answer comes as Azure streams it: a first chunk without choices (the
    prompt's filter results), the role, the text in pieces of 4 characters, the tool calls, the
    finish reason, the usage when ``stream_options.include_usage``, ``[DONE]``.
    """

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []
        self.texts: Counter[str] = Counter()
        self.in_flight = 0
        self.most_in_flight = 0
        self.thread = ServerThread(Litestar(route_handlers=[self._route()], debug=False))

    @property
    def url(self) -> str:
        return self.thread.url

    def _route(self) -> Any:
        @post("/openai/deployments/{deployment:str}/chat/completions", status_code=200)
        async def chat(request: Request) -> Response:
            return await self._answer(request, request.path_params["deployment"])

        return chat

    async def _answer(self, request: Request, deployment: str) -> Response:
        body = await request.json()
        self.calls.append({"deployment": deployment, "query": dict(request.query_params),
                           "headers": dict(request.headers), "body": body})  # fmt: skip
        text = _last_user_text(body.get("messages") or [])
        self.texts[text] += 1
        if text == "leak":
            return azure_error(401, "401", f"Access denied for key {request.headers.get('api-key')}")
        if request.headers.get("api-key") != API_KEY:
            return azure_error(401, "401", "Access denied due to invalid subscription key or wrong API endpoint.")
        if "api-version" not in request.query_params:
            return azure_error(404, "404", "Resource not found")
        if request.query_params["api-version"] not in {API_VERSION, "2025-04-01-preview"}:
            return azure_error(400, "BadRequest", "API version not supported")
        if deployment != DEPLOYMENT:
            return azure_error(404, "DeploymentNotFound", "The API deployment for this resource does not exist.")
        unknown = sorted(set(body) - CHAT_ARGUMENTS)
        if unknown:
            return azure_error(400, "invalid_request_error", f"Unrecognized request argument supplied: {unknown[0]}")
        if text == "busy":
            return azure_error(429, "429", "Requests have exceeded the token rate limit.", {"retry-after": "1"})
        if text == "crash":
            return azure_error(500, "InternalServerError", "The server had an error while processing your request.")
        if text == "slow":
            await asyncio.sleep(1.5)
        if text == "hold":  # counted apart: a "slow" call another test gave up on may still be here
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
            try:
                await asyncio.sleep(0.5)
            finally:
                self.in_flight -= 1
        message: dict[str, Any] = {"role": "assistant", "content": f"echo: {text}", "refusal": None}
        finish_reason = "stop"
        if text == "filtered":
            message["content"], finish_reason = "", "content_filter"
        elif body.get("tools") and text == "add":
            call = {
                "id": "call_1",
                "type": "function",
                "function": {"name": body["tools"][0]["function"]["name"], "arguments": "{}"},
            }
            message.update(content=None, tool_calls=[call])
            finish_reason = "tool_calls"
        if body.get("stream") and text != "no stream":
            return Stream(
                _azure_chunks(message, finish_reason, body, die=text == "die"), media_type="text/event-stream"
            )
        return Response({
            "id": "chatcmpl-stub", "object": "chat.completion", "created": int(time.time()), "model": UPSTREAM_MODEL,
            "system_fingerprint": "fp_stub", "prompt_filter_results": [{"prompt_index": 0, "content_filter_results": NO_FILTER}],
            "choices": [{"index": 0, "finish_reason": finish_reason, "logprobs": None, "message": message,
                         "content_filter_results": NO_FILTER}],
            "usage": {"prompt_tokens": 9, "completion_tokens": 3, "total_tokens": 12},
        })  # fmt: skip


async def _azure_chunks(message: dict[str, Any], finish: str, body: dict[str, Any], die: bool) -> Any:
    base = {
        "id": "chatcmpl-stub",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": UPSTREAM_MODEL,
    }

    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None,
                  "content_filter_results": NO_FILTER}  # fmt: skip
        return b"data: " + json.dumps({**base, "choices": [choice]}).encode() + b"\n\n"

    yield b"data: " + json.dumps({**base, "choices": [], "prompt_filter_results": [{"prompt_index": 0}]}).encode()
    yield b"\n\n" + chunk({"role": "assistant", "content": ""})
    text = message.get("content") or ""
    for start in range(0, len(text), 4):
        if die and start >= 8:
            raise ConnectionAbortedError("the deployment dies mid-answer on purpose")
        yield chunk({"content": text[start : start + 4]})
    for index, call in enumerate(message.get("tool_calls") or []):
        yield chunk({"tool_calls": [{"index": index, **call}]})
    yield chunk({}, finish)
    if (body.get("stream_options") or {}).get("include_usage"):
        usage = {"prompt_tokens": 9, "completion_tokens": 3, "total_tokens": 12}
        yield b"data: " + json.dumps({**base, "choices": [], "usage": usage}).encode() + b"\n\n"
    yield b"data: [DONE]\n\n"


def _last_user_text(messages: list[dict[str, Any]]) -> str:
    for message in reversed(messages):
        if message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, str):
                return content
            return "".join(part.get("text", "") for part in content or [])
    return ""


STUB: AzureStub | None = None


@pytest.fixture(scope="module", autouse=True)
def azure_stub():
    """The stub, started before any test class's servers (whose config needs its URL)."""
    global STUB
    STUB = AzureStub()
    with STUB.thread:
        yield STUB
    STUB = None


def policy(**options: Any) -> dict[str, Any]:
    """Options of a plugin instance in front of the stub's deployment."""
    assert STUB is not None
    return {
        "plugin": "azure_openai_model",
        "endpoint": STUB.url,
        "deployment": DEPLOYMENT,
        "api_key": API_KEY,
        **options,
    }


def plugins(*others: object) -> PluginManager:
    """A plugin manager holding this plugin and ``others``."""
    return plugin_manager(gym_azure_openai_model.plugin, *others)


# --- the stub is faithful: Azure's own client calls it ------------------------------------------


def azure_client(**options: Any) -> openai.AzureOpenAI:
    assert STUB is not None
    settings = {
        "azure_endpoint": STUB.url,
        "api_key": API_KEY,
        "api_version": API_VERSION,
        "max_retries": 0,
        "timeout": 30.0,
    }
    return openai.AzureOpenAI(**{**settings, **options})


def test_the_azure_client_calls_the_stub(azure_stub: AzureStub):
    with azure_client() as client:
        completion = client.chat.completions.create(model=DEPLOYMENT, messages=[{"role": "user", "content": "hi"}])
    assert completion.choices[0].message.content == "echo: hi"
    assert completion.model == UPSTREAM_MODEL
    call = azure_stub.calls[-1]
    assert call["deployment"] == DEPLOYMENT and call["query"] == {"api-version": API_VERSION}
    assert call["headers"]["api-key"] == API_KEY and "authorization" not in call["headers"]


@pytest.mark.parametrize(
    ("options", "model", "error"),
    [
        ({"api_key": "wrong"}, DEPLOYMENT, openai.AuthenticationError),
        ({}, "no-such-deployment", openai.NotFoundError),
        ({"api_version": "2023-01-01"}, DEPLOYMENT, openai.BadRequestError),
    ],
)
def test_the_stub_refuses_what_azure_refuses(options: dict[str, Any], model: str, error: type[Exception]):
    with azure_client(**options) as client, pytest.raises(error):
        client.chat.completions.create(model=model, messages=[{"role": "user", "content": "hi"}])


# --- the plugin in front of the stub ------------------------------------------------------------


class TestAzureOpenAIModel(ModelServerTests):
    instance = "policy"
    plugins = [gym_azure_openai_model.plugin]
    deterministic = True  # the stub echoes

    @classmethod
    def instances_config(cls) -> dict[str, Any]:
        return {
            "policy": policy(),
            "wrong_key": policy(api_key="not-the-key"),
            "wrong_deployment": policy(deployment="gpt-4o-typo"),
            "old_version": policy(api_version="2023-01-01"),
            "preview": policy(api_version="2025-04-01-preview", model_name="judge", extra_body={"seed": 7}),
            "pair": policy(max_concurrency=2),
            "single": policy(max_concurrency=1, queue_timeout_s=0.2),
            "impatient": policy(timeout_s=0.5),
            "unreachable": policy(endpoint=f"http://127.0.0.1:{free_port()}", max_attempts=2),
        }

    def test_calls_are_azure_shaped(self, gym_servers: RunningServers, azure_stub: AzureStub):
        reply = gym_servers.caller().post("/v1/responses", {"input": "shape", "return_token_ids": True})
        assert response_text(decode_response(reply.body)) == "echo: shape"
        call = azure_stub.calls[-1]
        assert call["deployment"] == DEPLOYMENT and call["query"] == {"api-version": API_VERSION}
        assert call["headers"]["api-key"] == API_KEY
        # The run's token is for the run's servers only; gym's extension is not sent to Azure.
        assert "authorization" not in call["headers"]
        assert call["body"]["model"] == DEPLOYMENT and "return_token_ids" not in call["body"]

    def test_the_openai_client_gets_the_deployment_s_answers(self, gym_servers: RunningServers):
        client = openai.OpenAI(base_url=f"{gym_servers.url}/v1", api_key=gym_servers.config.auth_token, max_retries=0)
        with client:
            response = client.responses.create(model="any", input="hello", instructions="Be brief.")
            completion = client.chat.completions.create(model="any", messages=[{"role": "user", "content": "hello"}])
        assert response.output_text == "echo: hello" and response.model == DEPLOYMENT
        assert response.usage is not None and response.usage.total_tokens == 12
        assert completion.choices[0].message.content == "echo: hello"

    def test_model_name_api_version_and_extra_body(self, gym_servers: RunningServers, azure_stub: AzureStub):
        reply = gym_servers.caller("preview").post("/v1/responses", {"input": "options"})
        assert decode_response(reply.body).model == "judge"
        call = azure_stub.calls[-1]
        assert call["query"] == {"api-version": "2025-04-01-preview"} and call["body"]["seed"] == 7

    def test_tool_calls_are_converted(self, gym_servers: RunningServers, azure_stub: AzureStub):
        tool = {
            "type": "function",
            "name": "add",
            "description": "Add one.",
            "parameters": {"type": "object", "properties": {}},
        }
        body = gym_servers.caller().post("/v1/responses", {"input": "add", "tools": [tool]}).json()
        assert [(item["type"], item["name"], item["call_id"]) for item in body["output"]] == [
            ("function_call", "add", "call_1")
        ]
        assert azure_stub.calls[-1]["body"]["tools"][0] == {"type": "function", "function": {
            "name": "add", "description": "Add one.", "parameters": {"type": "object", "properties": {}}}}  # fmt: skip

    def test_fields_gym_does_not_model_are_forwarded(self, gym_servers: RunningServers, azure_stub: AzureStub):
        chat = {"messages": [{"role": "user", "content": "fields"}], "frequency_penalty": 0.5, "logit_bias": {"7": -100},
                "user": "u1"}  # fmt: skip
        reply = gym_servers.caller().post("/v1/chat/completions", chat)
        assert reply.status == 200, reply.text
        sent = azure_stub.calls[-1]["body"]
        assert (sent["frequency_penalty"], sent["logit_bias"], sent["user"]) == (0.5, {"7": -100}, "u1")
        # From /v1/responses: Responses-only settings stay behind; top_logprobs becomes chat's two fields.
        reply = gym_servers.caller().post(
            "/v1/responses", {"input": "fields", "user": "u2", "truncation": "auto", "top_logprobs": 2}
        )
        assert reply.status == 200, reply.text
        sent = azure_stub.calls[-1]["body"]
        assert (
            sent["user"] == "u2" and "truncation" not in sent and (sent["logprobs"], sent["top_logprobs"]) == (True, 2)
        )
        # A field Azure does not know is Azure's to refuse; one whose meaning a chat completion would lose is ours.
        reply = gym_servers.caller().post("/v1/chat/completions", {**chat, "top_k": 5})
        assert (reply.status, reply.json()["error"]["type"]) == (424, "upstream_refused") and "top_k" in reply.text
        calls = len(azure_stub.calls)
        reply = gym_servers.caller().post("/v1/responses", {"input": "fields", "previous_response_id": "resp_1"})
        assert reply.status == 400 and "previous_response_id" in reply.json()["error"]["message"]
        assert len(azure_stub.calls) == calls

    def test_a_filtered_answer_is_incomplete(self, gym_servers: RunningServers):
        body = gym_servers.caller().post("/v1/responses", {"input": "filtered"}).json()
        assert body["status"] == "incomplete" and body["incomplete_details"] == {"reason": "content_filter"}

    @pytest.mark.parametrize(
        ("instance", "text", "status", "kind", "upstream_says"),
        [
            ("wrong_key", "hi", 424, "upstream_refused", "Access denied"),
            ("wrong_deployment", "hi", 424, "upstream_refused", "deployment for this resource does not exist"),
            ("old_version", "hi", 424, "upstream_refused", "API version not supported"),
            ("policy", "crash", 502, "upstream_error", "status 500"),
            ("impatient", "slow", 504, "upstream_timeout", "0.5 s"),
            ("unreachable", "hi", 502, "upstream_unavailable", "127.0.0.1"),
        ],
    )
    def test_failures_are_typed_and_final(
        self, gym_servers: RunningServers, instance, text, status, kind, upstream_says
    ):
        for path, body in (
            ("/v1/responses", {"input": text}),
            ("/v1/chat/completions", {"messages": [{"role": "user", "content": text}]}),
        ):
            reply = gym_servers.caller(instance).post(path, body)
            error = reply.json()["error"]
            assert (reply.status, error["type"]) == (status, kind), reply.text
            assert upstream_says in error["message"]

    # --- stream: true ---

    def test_streamed_deltas_make_the_unstreamed_answers(self, gym_servers: RunningServers, azure_stub: AzureStub):
        text = "a longer question, in several pieces"
        client = openai.OpenAI(base_url=f"{gym_servers.url}/v1", api_key=gym_servers.config.auth_token, max_retries=0)
        with client:
            whole = client.chat.completions.create(model="any", messages=[{"role": "user", "content": text}])
            chunks = list(
                client.chat.completions.create(model="any", messages=[{"role": "user", "content": text}], stream=True)
            )
            response = client.responses.create(model="any", input=text)
            with client.responses.stream(model="any", input=text) as stream:
                deltas = [event.delta for event in stream if event.type == "response.output_text.delta"]
                final = stream.get_final_response()
        streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert streamed == whole.choices[0].message.content == f"echo: {text}"
        # Relayed as Azure sent them: the filter results' chunk, the role, 4-character pieces, the finish.
        assert len(chunks) == 2 + -(-len(streamed) // 4) + 1 and chunks[0].choices == []
        assert "".join(deltas) == final.output_text == response.output_text
        assert len(deltas) == -(-len(streamed) // 4)
        assert final.model == DEPLOYMENT and final.usage is not None and final.usage.total_tokens == 12
        assert azure_stub.calls[-1]["body"]["stream"] is True

    def test_a_filtered_stream_is_incomplete(self, gym_servers: RunningServers):
        client = openai.OpenAI(base_url=f"{gym_servers.url}/v1", api_key=gym_servers.config.auth_token, max_retries=0)
        with client:
            events = list(client.responses.create(model="any", input="filtered", stream=True))
        assert events[-1].type == "response.incomplete"
        assert events[-1].response.incomplete_details.reason == "content_filter"

    @pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/responses"])
    @pytest.mark.parametrize(("text", "says"), [("die", "broke off"), ("no stream", "with JSON, not events")])
    def test_a_stream_that_fails_midway_is_an_error_the_client_raises(
        self, gym_servers: RunningServers, path, text, says
    ):
        client = openai.OpenAI(base_url=f"{gym_servers.url}/v1", api_key=gym_servers.config.auth_token, max_retries=0)
        with client, pytest.raises(openai.APIError) as raised:
            if path == "/v1/chat/completions":
                messages = [{"role": "user", "content": text}]
                list(client.chat.completions.create(model="a", messages=messages, stream=True))
            else:
                list(client.responses.create(model="any", input=text, stream=True))
        assert says in raised.value.message and raised.value.body["type"] == "upstream_error"

    @pytest.mark.parametrize(
        ("instance", "text", "status", "kind", "upstream_says"),
        [
            ("wrong_key", "hi", 424, "upstream_refused", "Access denied"),
            ("policy", "crash", 502, "upstream_error", "status 500"),
            ("impatient", "slow", 504, "upstream_timeout", "0.5 s"),
            ("unreachable", "hi", 502, "upstream_unavailable", "127.0.0.1"),
        ],
    )
    def test_stream_failures_before_the_first_byte_are_typed(
        self, gym_servers: RunningServers, instance, text, status, kind, upstream_says
    ):
        for path, body in (
            ("/v1/responses", {"input": text, "stream": True}),
            ("/v1/chat/completions", {"messages": [{"role": "user", "content": text}], "stream": True}),
        ):
            reply = gym_servers.caller(instance).post(path, body)
            error = reply.json()["error"]
            assert (reply.status, error["type"]) == (status, kind), reply.text
            assert upstream_says in error["message"] and reply.content_type.startswith("application/json")

    def test_busy_answers_are_retried_then_final(self, gym_servers: RunningServers, azure_stub: AzureStub):
        reply = gym_servers.caller().post("/v1/responses", {"input": "busy"})
        assert (reply.status, reply.json()["error"]["type"]) == (502, "upstream_unavailable")
        assert azure_stub.texts["busy"] == 3  # max_attempts

    def test_the_key_is_never_in_an_answer_or_a_log(
        self, gym_servers: RunningServers, caplog: pytest.LogCaptureFixture
    ):
        with caplog.at_level(logging.WARNING):
            reply = gym_servers.caller().post("/v1/responses", {"input": "leak"})
        assert reply.status == 424 and "Access denied for key [api_key]" in reply.text
        assert API_KEY not in reply.text
        assert "Access denied for key" in caplog.text and API_KEY not in caplog.text

    def test_concurrency_is_limited(self, gym_servers: RunningServers, azure_stub: AzureStub):
        azure_stub.most_in_flight = 0
        caller = gym_servers.caller("pair")
        with ThreadPoolExecutor(5) as pool:
            replies = list(pool.map(lambda _: caller.post("/v1/responses", {"input": "hold"}), range(5)))
        assert [reply.status for reply in replies] == [200] * 5
        assert azure_stub.most_in_flight == 2

    def test_no_slot_in_time_is_model_overloaded(self, gym_servers: RunningServers, azure_stub: AzureStub):
        caller = gym_servers.caller("single")
        with ThreadPoolExecutor(1) as pool:
            first = pool.submit(caller.post, "/v1/responses", {"input": "hold"})
            # The second call is sent once the first holds the only slot (up to the stub, which holds it 0.5 s).
            for _ in range(500):
                if azure_stub.in_flight or first.done():
                    break
                time.sleep(0.01)
            second = caller.post("/v1/responses", {"input": "hold"})
            assert first.result().status == 200
        assert (second.status, second.json()["error"]["type"]) == (503, "model_overloaded")


# --- config ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"deployment": "../models"}, "deployment"),
        ({"endpoint": "https://r.openai.azure.com/openai/deployments"}, "endpoint"),
        ({"api_version": "latest"}, "api_version"),
        ({"api_key": None}, "api_key"),
        ({"max_concurrency": 0}, "max_concurrency"),
    ],
)
def test_bad_options_are_config_errors(options: dict[str, Any], field: str):
    instance = {k: v for k, v in policy(**options).items() if v is not None}
    with pytest.raises(ConfigError) as caught, running_servers({"policy": instance}, plugins=plugins()):
        pass
    assert "policy" in str(caught.value) and field in str(caught.value)


def test_config_show_redacts_the_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    # gym's CLI is in gym's workspace; `gym test` runs these tests in the plugin's own venv, without it.
    cli = pytest.importorskip("gym_cli.main", reason="needs gym's CLI (installed in gym's workspace)").cli
    from click.testing import CliRunner

    env = tmp_path / "env.yaml"
    env.write_text(yaml.safe_dump({"policy": {"api_key": API_KEY}}))
    monkeypatch.setenv("GYM_ENV_FILE", str(env))
    overrides = ["policy.endpoint=https://r.openai.azure.com", f"policy.deployment={DEPLOYMENT}"]
    result = CliRunner().invoke(cli(), ["config", "show", str(CONFIG), *overrides])
    assert result.exit_code == 0, result.output
    shown = yaml.safe_load(result.output)["policy"]
    assert shown["api_key"] == "<redacted>" and shown["deployment"] == DEPLOYMENT
    assert API_KEY not in result.output
    # The key reaches the server all the same.
    config = load_config([str(CONFIG)], overrides, env_file=str(env), allocate_ports=False)
    assert config.instances["policy"].options["api_key"] == API_KEY


async def test_example_config_runs_a_rollout(azure_stub: AzureStub):
    # The stub calls no tool, so the counter keeps its initial count and the task is solved.
    config = yaml.safe_load(CONFIG.read_text())
    config["policy"].update(endpoint=azure_stub.url, deployment=DEPLOYMENT, api_key=API_KEY)
    task = {"responses_create_params": {"input": "count to three"}, "initial_count": 3, "expected_count": 3}
    with running_servers(config, plugins=plugins(*first_party("counter", "simple_agent"))) as global_config:
        async with ServerClient(global_config) as client:
            result = await client.post("agent", "/run", task)
    assert result["reward"] == 1.0
    assert response_text(decode_response(result["response"])) == "echo: count to three"
