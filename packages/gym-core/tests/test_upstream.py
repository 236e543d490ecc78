"""gym_core.upstream on its own, against a stub inference engine served by uvicorn on loopback: the
failure mapping and which statuses are retried, the slot and its bounded wait, deadlines, redaction
of the key, answers that are no answers, and the raw-body routes that keep the fields gym does not
model (served by a small model server, which also shows how a gym server answers an UpstreamError)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import msgspec
import pytest
from litestar.exceptions import HTTPException

from gym_core.client import FINAL_HEADER, REQUEST_DEADLINE
from gym_core.config import free_port
from gym_core.options import ClientConfig
from gym_core.schemas import ChatCompletion, ChatCompletionRequest, ResponseCreateParams
from gym_core.servers import ModelServer
from gym_core.serving import ServerThread
from gym_core.testing import HTTPCaller
from gym_core.upstream import (
    BUSY_STATUSES,
    RESPONSES_ONLY,
    Upstream,
    UpstreamError,
    chat_fields,
    raw_body_routes,
    unmodelled,
    without_credentials,
)

KEY = "sk-upstream-test-5e1d"
FAST = ClientConfig(backoff_s=0.01, backoff_max_s=0.02)
COMPLETION = {"object": "chat.completion", "model": "m",
              "choices": [{"index": 0, "message": {"role": "assistant", "content": "4"}, "finish_reason": "stop"}]}  # fmt: skip


class Engine:
    """A stub engine (raw ASGI): records each request; the body's ``status`` picks the answer's status
    (200 by default: a completion), and an error answer repeats the request's headers, as a careless
    proxy would."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, dict[str, str], Any]] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (message := await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        chunks = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        headers = {name.decode(): value.decode() for name, value in scope["headers"]}
        body = json.loads(b"".join(chunks) or b"null")
        self.requests.append((scope["path"], headers, body))
        status = body.get("status", 200) if isinstance(body, dict) else 200
        payload = body.get("payload") if isinstance(body, dict) else None
        if payload is not None:
            answer = payload.encode()
        elif status == 200:
            answer = json.dumps(COMPLETION).encode()
        else:
            answer = json.dumps({"error": {"message": f"trouble; you sent {headers}"}}).encode()
        await send(
            {"type": "http.response.start", "status": status, "headers": [(b"content-type", b"application/json")]}
        )
        await send({"type": "http.response.body", "body": answer})


@pytest.fixture(scope="module")
def engine() -> Iterator[tuple[Engine, str]]:
    stub = Engine()
    with ServerThread(stub) as thread:
        yield stub, thread.url


@contextlib.contextmanager
def silent() -> Iterator[str]:
    """A port that accepts connections (the kernel completes the handshake) and never answers."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"


def upstream(**options: Any) -> Upstream:
    settings: dict[str, Any] = dict(name="engine", timeout_s=10, max_attempts=3, max_concurrency=4, queue_timeout_s=10,
                                    headers={"api-key": KEY}, secret=KEY, client_config=FAST)  # fmt: skip
    return Upstream("policy", **{**settings, **options})


async def test_an_answer_comes_back_and_the_request_carries_the_headers(engine):
    stub, url = engine
    up = upstream()
    try:
        payload = await up.post(url, "/v1/chat/completions", {"messages": [], "n": 1})
        completion = up.decode("/v1/chat/completions", payload, msgspec.json.Decoder(ChatCompletion).decode)
    finally:
        await up.close()
    assert completion.choices[0].message.content == "4"
    path, headers, body = stub.requests[-1]
    assert path == "/v1/chat/completions" and headers["api-key"] == KEY and body == {"messages": [], "n": 1}
    assert "authorization" not in headers  # no global config: no run token goes upstream


@pytest.mark.parametrize(
    ("status", "retry_statuses", "answered", "kind", "requests"),
    [
        (400, BUSY_STATUSES, 424, "upstream_refused", 1),
        (401, BUSY_STATUSES, 424, "upstream_refused", 1),
        (429, BUSY_STATUSES, 502, "upstream_unavailable", 3),  # busy: nothing generated, tried again
        (503, BUSY_STATUSES, 502, "upstream_unavailable", 3),
        (500, BUSY_STATUSES, 502, "upstream_error", 1),  # may have been generated (and billed): not retried
        (502, BUSY_STATUSES, 502, "upstream_error", 1),
        (504, BUSY_STATUSES, 502, "upstream_error", 1),  # the engine's own timeout is an error of the engine
        (
            500,
            BUSY_STATUSES | {500},
            502,
            "upstream_unavailable",
            3,
        ),  # a server whose engine bills nothing may retry it
    ],
)
async def test_failures_are_typed_and_only_the_chosen_statuses_retried(engine, status, retry_statuses, answered, kind,
                                                                        requests):  # fmt: skip
    stub, url = engine
    before = len(stub.requests)
    up = upstream(retry_statuses=retry_statuses)
    try:
        with pytest.raises(UpstreamError) as caught:
            await up.post(url, "/v1/chat/completions", {"status": status})
    finally:
        await up.close()
    error = caught.value
    assert (error.status, error.kind, error.upstream_status) == (answered, kind, status)
    assert len(stub.requests) - before == requests
    assert f"engine /v1/chat/completions: status {status} trouble" in str(error)
    assert f"after {requests} attempt" in str(error)
    assert error.detail.startswith("trouble; you sent")


async def test_an_unreachable_engine_is_unavailable_after_bounded_attempts():
    up = upstream(max_attempts=2)
    dead = f"http://127.0.0.1:{free_port()}"
    try:
        with pytest.raises(UpstreamError) as caught:
            await up.post(dead, "/v1/chat/completions", {})
    finally:
        await up.close()
    assert (caught.value.status, caught.value.kind) == (502, "upstream_unavailable")
    assert "after 2 attempts" in str(caught.value) and caught.value.upstream_status is None


@pytest.mark.timeout(30)
async def test_a_hung_engine_times_out_once_not_retried():
    up = upstream(timeout_s=0.3, max_attempts=3)
    try:
        with silent() as url, pytest.raises(UpstreamError) as caught:
            await up.post(url, "/v1/chat/completions", {})
    finally:
        await up.close()
    assert (caught.value.status, caught.value.kind) == (504, "upstream_timeout")
    assert "after 1 attempt)" in str(caught.value)  # the engine may still be generating it


@pytest.mark.timeout(30)
@pytest.mark.parametrize("bound", ["deadline", "caller"])
async def test_a_deadline_bounds_the_call_and_is_restored_after(bound):
    up = upstream(timeout_s=600)
    token = REQUEST_DEADLINE.set(time.monotonic() + 0.3) if bound == "caller" else None
    before = REQUEST_DEADLINE.get()
    try:
        with silent() as url, pytest.raises(UpstreamError) as caught:
            await up.post(
                url, "/v1/chat/completions", {}, deadline=time.monotonic() + 0.3 if bound == "deadline" else None
            )
        assert (caught.value.status, caught.value.kind) == (504, "upstream_timeout")
        assert REQUEST_DEADLINE.get() == before  # the call's own deadline was the call's only
    finally:
        if token is not None:
            REQUEST_DEADLINE.reset(token)
        await up.close()


@pytest.mark.timeout(30)
@pytest.mark.parametrize("bound", ["queue_timeout_s", "deadline", "caller"])
async def test_the_wait_for_a_slot_is_bounded_typed_and_the_slot_freed(engine, bound):
    _, url = engine
    up = upstream(max_concurrency=1, queue_timeout_s=0.2 if bound == "queue_timeout_s" else 600, timeout_s=600)
    with silent() as hung:
        holder = asyncio.create_task(up.post(hung, "/v1/chat/completions", {}))
        await asyncio.sleep(0)  # the holder takes the only slot, then waits for its answer
        token = REQUEST_DEADLINE.set(time.monotonic() + 0.2) if bound == "caller" else None
        try:
            with pytest.raises(UpstreamError) as caught:
                await up.post(
                    url, "/v1/chat/completions", {}, deadline=time.monotonic() + 0.2 if bound == "deadline" else None
                )
        finally:
            if token is not None:
                REQUEST_DEADLINE.reset(token)
        holder.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await holder
    try:
        assert (caught.value.status, caught.value.kind) == (503, "model_overloaded")
        assert str(caught.value).startswith("policy: no upstream slot free") and "max_concurrency 1" in str(
            caught.value
        )
        # The cancelled holder gave its slot back: the next call gets it.
        assert await up.post(url, "/v1/chat/completions", {})
    finally:
        await up.close()


async def test_the_key_never_appears_in_an_error(engine):
    _, url = engine
    up = upstream()
    try:
        with pytest.raises(UpstreamError) as refused:
            await up.post(url, "/v1/chat/completions", {"status": 401})
        payload = await up.post(url, "/v1/chat/completions", {"payload": f'{{"error": "bad key {KEY}"}}'})
        bad = up.bad_answer("/v1/chat/completions", "no choices", payload)
    finally:
        await up.close()
    for error in (refused.value, bad):
        assert KEY not in str(error) and KEY not in error.detail
        assert "[api_key]" in str(error)
    assert (bad.status, bad.kind) == (502, "upstream_error")
    assert str(bad).startswith("engine /v1/chat/completions: no choices: ")


async def test_an_answer_that_cannot_be_read_is_an_upstream_error(engine):
    _, url = engine
    up = upstream()
    try:
        payload = await up.post(url, "/v1/chat/completions", {"payload": "<html>gateway</html>"})
        with pytest.raises(UpstreamError) as caught:
            up.decode("/v1/chat/completions", payload, msgspec.json.Decoder(ChatCompletion).decode, name="replica 2")
    finally:
        await up.close()
    assert (caught.value.status, caught.value.kind) == (502, "upstream_error")
    assert str(caught.value).startswith("replica 2 /v1/chat/completions: unexpected answer") and "<html>gateway" in str(
        caught.value
    )


# --- fields gym does not model --------------------------------------------------------------------


def test_unmodelled_fields_are_the_unknown_non_null_ones():
    body = {"messages": [], "temperature": 0.5, "logit_bias": {"7": -100}, "user": "u1", "top_k": None}
    assert unmodelled(body, frozenset({"messages", "temperature"})) == {"logit_bias": {"7": -100}, "user": "u1"}
    assert unmodelled([1, 2], frozenset()) == {}


def test_chat_fields_drop_convert_and_refuse():
    request = ChatCompletionRequest(messages=[])
    fields = {"truncation": "auto", "include": ["x"], "top_logprobs": 2, "frequency_penalty": 0.5, "user": "u1"}
    assert chat_fields(fields, request, owner="policy") == {"frequency_penalty": 0.5, "user": "u1"}
    assert (request.logprobs, request.top_logprobs) == (True, 2)
    assert (
        chat_fields({"user": "u1"}, ChatCompletionRequest(messages=[]), owner="p", drop=RESPONSES_ONLY | {"user"}) == {}
    )
    for name in ("previous_response_id", "conversation"):
        with pytest.raises(HTTPException) as caught:
            chat_fields({name: "x"}, ChatCompletionRequest(messages=[]), owner="policy", remedy=" (api: responses)")
        assert caught.value.status_code == 400
        assert caught.value.detail.startswith(f"policy: {name!r} needs a Responses API endpoint (api: responses)")


def test_without_credentials():
    assert without_credentials("https://user:pw@host:8000/v1") == "https://host:8000/v1"
    assert without_credentials("http://host/v1/a@b") == "http://host/v1/a@b"


class Relay(ModelServer):
    """A model server relaying chat completions to ``engine`` through an Upstream, recording the
    fields its routes hand over."""

    engine_url = ""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.upstream = upstream(max_attempts=1)
        self.seen: list[tuple[str, Any, dict[str, Any]]] = []

    async def shutdown(self) -> None:
        await self.upstream.close()

    def routes(self) -> list[Any]:
        return raw_body_routes(self, super().routes(), chat=self._chat, responses=self._responses)

    async def _chat(self, request: Any, chat: ChatCompletionRequest, fields: dict[str, Any]) -> Any:
        self.seen.append(("chat", chat, fields))
        payload = await self.upstream.post(
            self.engine_url, "/v1/chat/completions", {**msgspec.to_builtins(chat), **fields}
        )
        return self.upstream.decode("/v1/chat/completions", payload, msgspec.json.Decoder(ChatCompletion).decode)

    async def _responses(self, request: Any, params: ResponseCreateParams, fields: dict[str, Any]) -> Any:
        self.seen.append(("responses", params, fields))
        return await self.responses(params)

    async def chat_completions(self, request: ChatCompletionRequest) -> ChatCompletion:
        return await self._chat(None, request, {})


def test_raw_body_routes_keep_the_unmodelled_fields_and_answer_failures_final(engine, serve):
    stub, url = engine
    Relay.engine_url = url
    relay = Relay(name="relay")
    with serve(relay) as relay_url:
        caller = HTTPCaller(relay_url)
        hello = [{"role": "user", "content": "hi"}]
        reply = caller.post(
            "/v1/chat/completions", {"messages": hello, "logit_bias": {"7": -100}, "seed": 1, "top_k": None}
        )
        assert reply.status == 200 and reply.json()["choices"][0]["message"]["content"] == "4"
        kind, chat, fields = relay.seen[-1]
        assert kind == "chat" and chat.seed == 1 and fields == {"logit_bias": {"7": -100}}
        assert stub.requests[-1][2]["logit_bias"] == {"7": -100}  # forwarded upstream as sent

        reply = caller.post("/v1/responses", {"input": "hi", "truncation": "auto", "temperature": 0})
        assert reply.status == 200 and reply.json()["output"][0]["content"][0]["text"] == "4"
        kind, params, fields = relay.seen[-2]  # then converted to a chat completion, relayed
        assert kind == "responses" and params.temperature == 0 and fields == {"truncation": "auto"}

        # The inherited routes stay; streaming and bodies of the wrong shape are 4xx, never reaching a handler.
        assert caller.get("/v1/models").json()["data"][0]["id"] == relay.model_name
        seen = len(relay.seen)
        for path, body in [("/v1/chat/completions", {"messages": hello, "stream": True}), ("/v1/responses", {"input": "x", "stream": True}),
                           ("/v1/chat/completions", [1, 2]), ("/v1/responses", b"{not json")]:  # fmt: skip
            reply = caller.post(path, body)
            assert 400 <= reply.status < 500 and reply.json()["error"]["message"], (path, body, reply.text)
        assert len(relay.seen) == seen

        # An UpstreamError is answered with its status and type, marked final, the key left out.
        request = urllib.request.Request(
            f"{relay_url}/v1/chat/completions",
            method="POST",
            data=json.dumps({"messages": hello, "status": 401}).encode(),
        )
        with pytest.raises(urllib.error.HTTPError) as caught:
            urllib.request.urlopen(request, timeout=30)
        text = caught.value.read().decode()
        error = json.loads(text)["error"]
        assert (caught.value.code, error["type"], error["status"]) == (424, "upstream_refused", 424)
        assert caught.value.headers[FINAL_HEADER] == "1"  # this server spent the retries: nobody retries on top
        assert KEY not in text and "[api_key]" in error["message"]
