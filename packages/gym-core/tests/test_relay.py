"""Relaying an engine's stream: gym_core.relay's pieces on their own, and Upstream.open_stream against
a stub engine that streams server-sent events (raw ASGI, uvicorn on loopback)."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Iterator
from typing import Any

import msgspec
import pytest

from gym_core.options import ClientConfig
from gym_core.relay import SSE, ChatAssembler, SSEDecoder
from gym_core.schemas import ChatCompletion
from gym_core.serving import ServerThread
from gym_core.streaming import chat_completion_chunks
from gym_core.upstream import Upstream, UpstreamError, chat_chunks

KEY = "sk-stream-test-9a7c"
STREAM = b': keep-alive\r\n\r\nevent: message\r\ndata: first\r\ndata: line\r\n\r\ndata: {"x": 1}\n\ndata: [DONE]\r\r'


def test_sse_decoder_gives_the_same_events_whatever_the_chunking():
    whole = SSEDecoder().feed(STREAM)
    assert whole == [SSE("message", "first\nline"), SSE(None, '{"x": 1}'), SSE(None, "[DONE]")]
    for cut in range(1, len(STREAM)):  # a chunk boundary anywhere, a \r\n split across two included
        decoder = SSEDecoder()
        assert decoder.feed(STREAM[:cut]) + decoder.feed(STREAM[cut:]) == whole, cut


def test_chat_assembler_rebuilds_the_completion_from_its_chunks():
    completion = msgspec.convert(
        {"id": "c1", "created": 5, "model": "m",
         "choices": [{"index": 0, "finish_reason": "tool_calls",
                      "message": {"role": "assistant", "content": "calling",
                                  "tool_calls": [{"id": "call_1", "type": "function",
                                                  "function": {"name": "add", "arguments": '{"a": 1}'}}]}}],
         "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}},
        ChatCompletion,
    )  # fmt: skip
    assembler = ChatAssembler()
    for chunk in chat_completion_chunks(completion, include_usage=True):
        assembler.feed(chunk)
    rebuilt = msgspec.convert(assembler.completion(), ChatCompletion)
    assert msgspec.to_builtins(rebuilt.choices) == msgspec.to_builtins(completion.choices)
    assert (rebuilt.id, rebuilt.model, rebuilt.usage) == (completion.id, completion.model, completion.usage)


class Engine:
    """Streams ``data:`` chunks of the text in the body's ``say``; the body's ``status`` answers an
    error instead (repeating the request's headers, as a careless proxy would), ``statuses`` one
    status per request in turn."""

    def __init__(self) -> None:
        self.requests = 0

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (message := await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        raw = b""
        while True:
            message = await receive()
            raw += message.get("body", b"")
            if not message.get("more_body"):
                break
        body = json.loads(raw)
        self.requests += 1
        statuses = body.get("statuses") or [body.get("status", 200)]
        status = statuses[min(self.requests - 1, len(statuses) - 1)]
        if status != 200:
            headers = {name.decode(): value.decode() for name, value in scope["headers"]}
            answer = json.dumps({"error": {"message": f"trouble; you sent {headers}"}}).encode()
            await send({"type": "http.response.start", "status": status,
                        "headers": [(b"content-type", b"application/json")]})  # fmt: skip
            await send({"type": "http.response.body", "body": answer})
            return
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
        for word in body["say"].split():
            chunk = {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": word}}]}
            await send({"type": "http.response.body", "body": b"data: %s\n\n" % json.dumps(chunk).encode(),
                        "more_body": True})  # fmt: skip
        await send({"type": "http.response.body", "body": b"data: [DONE]\n\n"})


@pytest.fixture(scope="module")
def engine() -> Iterator[tuple[Engine, str]]:
    stub = Engine()
    with ServerThread(stub) as thread:
        yield stub, thread.url


def upstream(**options: Any) -> Upstream:
    settings: dict[str, Any] = dict(name="engine", timeout_s=10, max_attempts=3, max_concurrency=4, queue_timeout_s=10,
                                    headers={"api-key": KEY}, secret=KEY,
                                    client_config=ClientConfig(backoff_s=0.01, backoff_max_s=0.02))  # fmt: skip
    return Upstream("policy", **{**settings, **options})


async def words(up: Upstream, url: str, body: dict[str, Any]) -> list[str]:
    stream = await up.open_stream(url, "/v1/chat/completions", {"stream": True, **body})
    try:
        return [chunk["choices"][0]["delta"]["content"] async for chunk in chat_chunks(stream)]
    finally:
        stream.close()


async def test_busy_answers_are_tried_again_before_the_first_byte(engine):
    stub, url = engine
    stub.requests = 0
    up = upstream()
    try:
        assert await words(up, url, {"say": "two four", "statuses": [429, 503, 200]}) == ["two", "four"]
    finally:
        await up.close()
    assert stub.requests == 3


@pytest.mark.parametrize(("status", "answered", "kind"), [(400, 424, "upstream_refused"), (500, 502, "upstream_error")])
async def test_an_error_before_the_first_byte_is_typed_and_the_key_redacted(engine, status, answered, kind):
    up = upstream()
    try:
        with pytest.raises(UpstreamError) as raised:
            await words(up, engine[1], {"say": "x", "status": status})
    finally:
        await up.close()
    assert (raised.value.status, raised.value.kind, raised.value.upstream_status) == (answered, kind, status)
    assert KEY not in str(raised.value) and "[api_key]" in str(raised.value)


async def test_an_engine_that_never_answers_is_a_timeout_and_frees_the_slot():
    with socket.socket() as listener:  # accepts connections (the kernel's handshake), never answers
        listener.bind(("127.0.0.1", 0))
        listener.listen(4)
        up = upstream(timeout_s=0.3, max_concurrency=1, queue_timeout_s=1)
        try:
            for _ in range(2):  # the second needs the slot the first had
                with pytest.raises(UpstreamError) as raised:
                    await up.open_stream(f"http://127.0.0.1:{listener.getsockname()[1]}", "/v1/x", {})
                assert raised.value.kind == "upstream_timeout"
        finally:
            await up.close()


async def test_no_slot_in_time_is_model_overloaded(engine):
    up = upstream(max_concurrency=1, queue_timeout_s=0.05)
    try:
        held = await up.open_stream(engine[1], "/v1/chat/completions", {"stream": True, "say": "a"})
        with pytest.raises(UpstreamError) as raised:
            await up.open_stream(engine[1], "/v1/chat/completions", {"stream": True, "say": "b"})
        held.close()
        assert await asyncio.wait_for(words(up, engine[1], {"say": "after"}), 5) == ["after"]
    finally:
        await up.close()
    assert raised.value.kind == "model_overloaded"
