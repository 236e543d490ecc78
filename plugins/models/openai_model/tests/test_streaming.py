"""``stream: true`` through openai_model: the official ``openai`` client's streaming API as the
caller; upstream, a stub OpenAI-compatible server streaming SSE (gym_vllm_model.testing's StubVllm,
real HTTP on loopback) for chat completions, and gym's scripted model for the Responses passthrough.

Checked: the deltas concatenate to the unstreamed answer, chunks reach the caller while the upstream
is still generating (the stub holds its stream at a gate the test opens only after the first delta
arrived), an upstream that dies mid-stream or ends without ``[DONE]`` is an error the client raises,
a caller that disconnects cancels the upstream request, a failure before the first byte keeps its
typed status.
"""

from __future__ import annotations

import http.server
import json
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from gym_core.config import free_port
from gym_core.testing import plugin_manager, running_servers

import gym_openai_model.plugin

testing = pytest.importorskip("gym_vllm_model.testing", reason="the stub upstream is vllm_model's")
gym_scripted = pytest.importorskip("gym_scripted.plugin")

ANSWER = "The answer is 4, as it was yesterday."
MESSAGES = [{"role": "user", "content": "What is 2+2?"}]


@pytest.fixture(scope="module")
def stub() -> Iterator[Any]:
    with testing.StubVllm("upstream", script=lambda body: {"content": ANSWER}) as running:
        yield running


class ErrorEventUpstream(http.server.BaseHTTPRequestHandler):
    """A Responses endpoint whose stream fails midway as OpenAI's does: a text delta, then an
    ``error`` event (``code``, ``message``, ``param``; no ``error`` field)."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["content-length"]))
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("connection", "close")
        self.end_headers()
        response = {"id": "resp_1", "object": "response", "created_at": 1, "model": "m", "status": "in_progress",
                    "output": []}  # fmt: skip
        events = [
            {"type": "response.created", "sequence_number": 0, "response": response},
            {"type": "response.output_text.delta", "sequence_number": 1, "item_id": "msg_1", "output_index": 0,
             "content_index": 0, "delta": "The answer", "logprobs": []},
            {"type": "error", "sequence_number": 2, "code": "server_error", "message": "the engine fell over",
             "param": None},
        ]  # fmt: skip
        for event in events:
            self.wfile.write(f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode())
            self.wfile.flush()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def error_upstream() -> Iterator[str]:
    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), ErrorEventUpstream) as running:
        thread = threading.Thread(target=running.serve_forever, daemon=True)
        thread.start()
        yield f"http://127.0.0.1:{running.server_address[1]}/v1"
        running.shutdown()


@pytest.fixture(scope="module")
def servers(stub: Any, error_upstream: str) -> Iterator[Any]:
    port = free_port()
    config = {
        "policy": {"plugin": "openai_model", "base_url": stub.url, "model": "stub-model"},
        "scripted": {"plugin": "scripted", "port": port},
        "passthrough": {
            "plugin": "openai_model", "base_url": f"http://127.0.0.1:{port}/v1", "model": "scripted",
            "api": "responses",
        },
        "erroring": {"plugin": "openai_model", "base_url": error_upstream, "model": "m", "api": "responses"},
        "unreachable": {"plugin": "openai_model", "base_url": "http://127.0.0.1:9/v1", "model": "m",
                        "max_attempts": 1},
        "impatient": {"plugin": "openai_model", "base_url": stub.url, "model": "stub-model", "timeout_s": 1.0},
        "single": {"plugin": "openai_model", "base_url": stub.url, "model": "stub-model", "max_concurrency": 1,
                   "queue_timeout_s": 2.0},
        "stalled": {"plugin": "openai_model", "base_url": stub.url, "model": "stub-model", "max_concurrency": 1,
                    "queue_timeout_s": 10.0, "timeout_s": 1.0},
    }  # fmt: skip
    with running_servers(config, plugins=plugin_manager(gym_openai_model.plugin, gym_scripted)) as running:
        yield running


@pytest.fixture(autouse=True)
def fresh(stub: Any) -> Iterator[None]:
    stub.clear()
    stub.gate, stub.die_after_chunks, stub.drop_done, stub.fail_status = None, None, False, None
    stub.piece_chars, stub.script = 3, lambda body: {"content": ANSWER}
    yield
    if stub.gate is not None:
        stub.gate.set()


def client(servers: Any, instance: str) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=f"{servers.instances[instance].url}/v1", api_key=servers.auth_token or "unused", max_retries=0
    )


def test_chat_deltas_concatenate_to_the_unstreamed_answer(servers, stub):
    with client(servers, "policy") as caller:
        whole = caller.chat.completions.create(model="any", messages=MESSAGES)
        chunks = list(
            caller.chat.completions.create(
                model="any", messages=MESSAGES, stream=True, stream_options={"include_usage": True}
            )
        )
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == whole.choices[0].message.content
    # Relayed chunk by chunk: role, the text in 3-character pieces, finish, usage.
    assert len(chunks) == 1 + -(-len(ANSWER) // 3) + 2
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
    sent = stub.completions()[-1]
    assert (sent["stream"], sent["model"], sent["stream_options"]) == (True, "stub-model", {"include_usage": True})


def test_responses_over_chat_deltas_make_the_unstreamed_response(servers):
    with client(servers, "policy") as caller:
        whole = caller.responses.create(model="any", input="What is 2+2?")
        with caller.responses.stream(model="any", input="What is 2+2?") as stream:
            events = list(stream)
            final = stream.get_final_response()
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert "".join(deltas) == final.output_text == whole.output_text == ANSWER
    assert len(deltas) == -(-len(ANSWER) // 3)
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert events[-1].type == "response.completed" and final.id == events[0].response.id


def test_responses_passthrough_relays_the_upstream_events(servers):
    with client(servers, "passthrough") as caller:
        whole = caller.responses.create(model="any", input="hi")
        with caller.responses.stream(model="any", input="hi") as stream:
            kinds = [event.type for event in stream]
            final = stream.get_final_response()
    assert final.output_text == whole.output_text != ""
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"


def test_an_upstream_error_event_is_an_error_the_client_raises(servers):
    # Relayed as it came, OpenAI's own error event (no "error" field) would be yielded by the
    # client as one more event, and the stream would end as if whole.
    deltas: list[str] = []
    with client(servers, "erroring") as caller:
        with pytest.raises(openai.APIError) as raised:
            for event in caller.responses.create(model="any", input="hi", stream=True):
                if event.type == "response.output_text.delta":
                    deltas.append(event.delta)
    assert deltas == ["The answer"]  # what came before the error was relayed
    assert raised.value.body["type"] == "upstream_error" and "the engine fell over" in raised.value.message


@pytest.mark.parametrize("api", ["chat", "responses"])
def test_chunks_arrive_while_the_upstream_is_still_generating(servers, stub, api):
    stub.gate = threading.Event()  # the stub stops after its first piece of text until this is set
    pieces: list[str] = []
    with client(servers, "policy") as caller:
        if api == "chat":
            stream: Any = caller.chat.completions.create(model="any", messages=MESSAGES, stream=True)
            deltas = (chunk.choices[0].delta.content or "" for chunk in stream)
        else:
            stream = caller.responses.create(model="any", input="What is 2+2?", stream=True)
            deltas = (event.delta for event in stream if event.type == "response.output_text.delta")
        for delta in deltas:
            pieces.append(delta)
            if delta == ANSWER[:3]:  # the first piece: relayed while the upstream is held at the gate
                assert not stub.gate.is_set() and stub.chunks_sent == 2
                stub.gate.set()
    assert stub.gate.is_set() and "".join(pieces) == ANSWER


@pytest.mark.parametrize("api", ["chat", "responses"])
@pytest.mark.parametrize("failure", ["dies", "no_done"])
def test_a_stream_that_breaks_off_is_an_error_the_client_raises(servers, stub, api, failure):
    if failure == "dies":
        stub.die_after_chunks = 4  # the connection drops mid-answer
    else:
        stub.drop_done = True  # the stream ends cleanly, without [DONE]
    with client(servers, "policy") as caller:
        with pytest.raises(openai.APIError) as raised:
            if api == "chat":
                list(caller.chat.completions.create(model="any", messages=MESSAGES, stream=True))
            else:
                list(caller.responses.create(model="any", input="What is 2+2?", stream=True))
    assert ("broke off" if failure == "dies" else "without [DONE]") in raised.value.message
    assert raised.value.body["type"] == "upstream_error"


@pytest.mark.parametrize("api", ["chat", "responses"])
def test_a_caller_that_disconnects_cancels_the_upstream_request(servers, stub, api):
    stub.gate = threading.Event()  # never set: the upstream generates until the request is cancelled
    with client(servers, "policy") as caller:
        if api == "chat":
            stream: Any = caller.chat.completions.create(model="any", messages=MESSAGES, stream=True)
        else:
            stream = caller.responses.create(model="any", input="What is 2+2?", stream=True)
        next(iter(stream))
        stream.close()
    deadline = time.monotonic() + 10
    while stub.disconnects == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert stub.disconnects == 1 and not stub.gate.is_set()


@pytest.mark.parametrize(("instance", "status", "kind"), [("unreachable", 502, "upstream_unavailable"),
                                                          ("policy", 502, "upstream_error")])  # fmt: skip
def test_failures_before_the_first_byte_keep_their_typed_status(servers, stub, instance, status, kind):
    stub.fail_status = 500
    with client(servers, instance) as caller:
        with pytest.raises(openai.APIStatusError) as raised:
            caller.chat.completions.create(model="any", messages=MESSAGES, stream=True)
    assert (raised.value.status_code, raised.value.body["type"]) == (status, kind)
    assert raised.value.response.headers["x-gym-final"] == "1"


def wait_for_disconnect(stub: Any) -> None:
    deadline = time.monotonic() + 10
    while stub.disconnects == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert stub.disconnects == 1


def test_a_stream_past_timeout_s_ends_with_a_timeout_error_and_is_cancelled_upstream(servers, stub):
    stub.gate = threading.Event()  # never set: the upstream stalls after its first piece
    with client(servers, "impatient") as caller:
        with pytest.raises(openai.APIError) as raised:
            list(caller.chat.completions.create(model="any", messages=MESSAGES, stream=True))
    assert raised.value.body["type"] == "upstream_timeout" and "timeout_s" in raised.value.message
    wait_for_disconnect(stub)


def test_broken_and_abandoned_streams_free_their_slot(servers, stub):
    # One slot: a stream that broke off, or whose caller left, must give it back for the next request.
    with client(servers, "single") as caller:
        stub.die_after_chunks = 4
        with pytest.raises(openai.APIError):
            list(caller.chat.completions.create(model="any", messages=MESSAGES, stream=True))
        stub.die_after_chunks, stub.gate = None, threading.Event()
        abandoned = caller.chat.completions.create(model="any", messages=MESSAGES, stream=True)
        next(iter(abandoned))
        abandoned.close()
        wait_for_disconnect(stub)
        stub.gate.set()
        chunks = list(caller.chat.completions.create(model="any", messages=MESSAGES, stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == ANSWER


def test_a_caller_who_stops_reading_holds_the_slot_no_longer_than_timeout_s(servers, stub):
    # A caller that sends its request and never reads: the relay blocks sending to it once the
    # buffers fill (8 MB of answer), reading the engine no more. At timeout_s (and a second) the
    # engine's connection and the only slot go, so a later request is served.
    stub.piece_chars, stub.script = 65_536, lambda body: {"content": "x" * 8_000_000}
    url = servers.instances["stalled"].url
    host, port = url.removeprefix("http://").split(":")
    body = json.dumps({"model": "any", "messages": MESSAGES, "stream": True}).encode()
    auth = f"authorization: Bearer {servers.auth_token}\r\n" if servers.auth_token else ""
    with socket.socket() as stalled:
        stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        stalled.connect((host, int(port)))
        stalled.sendall(
            f"POST /v1/chat/completions HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/json\r\n{auth}"
            f"content-length: {len(body)}\r\n\r\n".encode()
            + body
        )
        wait_for_disconnect_or(stub, lambda: stub.chunks_sent > 0)  # the engine is answering it
        stub.piece_chars, stub.script = 3, lambda body: {"content": ANSWER}
        chunks: list[Any] = []
        with client(servers, "stalled") as caller:
            for _ in range(10):  # each waits for the slot at most timeout_s (1 s)
                try:
                    chunks = list(caller.chat.completions.create(model="any", messages=MESSAGES, stream=True))
                    break
                except openai.InternalServerError as exc:
                    assert exc.body["type"] == "model_overloaded"
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == ANSWER


def wait_for_disconnect_or(stub: Any, condition: Any) -> None:
    deadline = time.monotonic() + 10
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert condition()
