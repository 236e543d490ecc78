"""``stream: true`` through vllm_model: the official ``openai`` client's streaming API as the caller,
a stub vLLM (gym_vllm_model.testing, real HTTP on loopback) streaming its chunks upstream.

What is checked: the deltas concatenate to the unstreamed answer (reasoning inline on chat, a
reasoning item on Responses), events reach the caller while the upstream is still generating (the
stub holds its stream at a gate the test opens only after the first delta arrived), an upstream
that dies mid-stream is an error the client raises, a caller that disconnects cancels the upstream
request, and failures before the first byte keep their typed statuses.
"""

from __future__ import annotations

import gc
import json
import logging
import threading
import time
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import openai
import pytest

import gym_core.testing
from gym_core.relay import chat_error_sse
from gym_core.testing import HTTPCaller, running_servers
from gym_core.upstream import Upstream, chat_relay, relay

import gym_vllm_model.plugin
from gym_vllm_model.server import ThinkSplitter
from gym_vllm_model.testing import StubVllm

REASONING = {"reasoning": "two and two make four", "content": "\nThe answer is 4, as always."}


def wait_for(condition: Any, what: str, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


@pytest.fixture(scope="module")
def stubs() -> Iterator[dict[str, StubVllm]]:
    made = {"main": StubVllm("main"), "inline": StubVllm("inline", reasoning_parser=False)}
    for stub in made.values():
        stub.start()
    yield made
    for stub in made.values():
        stub.stop()


@pytest.fixture(scope="module")
def servers(stubs: dict[str, StubVllm]) -> Iterator[Any]:
    def on(stub: str, **options: Any) -> dict[str, Any]:
        return {"plugin": "vllm_model", "base_url": stubs[stub].url, "model": "stub-model", **options}

    config = {
        "policy": on("main"),
        "inline": on("inline"),
        "training": on("main", return_token_id_information=True),
        "unreachable": {"plugin": "vllm_model", "base_url": "http://127.0.0.1:9/v1", "model": "m", "max_attempts": 1},
    }
    manager = gym_core.testing.plugin_manager(gym_vllm_model.plugin)
    with running_servers(config, plugins=manager) as running:
        yield running


@pytest.fixture(autouse=True)
def fresh(stubs: dict[str, StubVllm]) -> Iterator[None]:
    for stub in stubs.values():
        stub.clear()
        stub.script = lambda body: dict(REASONING)
        stub.gate = None
        stub.die_after_chunks = None
        stub.drop_done = False
    yield
    for stub in stubs.values():
        if stub.gate is not None:
            stub.gate.set()


def client(servers: Any, instance: str) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=f"{servers.instances[instance].url}/v1",
        api_key=servers.auth_token or "unused",
        max_retries=0,
        timeout=30,
    )


MESSAGES = [{"role": "user", "content": "What is 2+2?"}]


def pieces(text: str) -> int:
    """How many chunks the stub streams ``text`` in (3 characters each)."""
    return -(-len(text) // 3)


@pytest.mark.parametrize("instance", ["policy", "inline", "training"])
def test_chat_deltas_concatenate_to_the_unstreamed_answer(servers, stubs, instance):
    with client(servers, instance) as caller:
        whole = caller.chat.completions.create(model="any", messages=MESSAGES)
        chunks = list(
            caller.chat.completions.create(
                model="any", messages=MESSAGES, stream=True, stream_options={"include_usage": True}
            )
        )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert (
        text == whole.choices[0].message.content == "<think>two and two make four</think>\nThe answer is 4, as always."
    )
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["stop"]
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
    assert {c.model for c in chunks} == {"stub-model"}
    # vLLM was asked to stream (the unstreamed call was not).
    assert [body.get("stream") for body in stubs["main" if instance != "inline" else "inline"].completions()] == [
        None,
        True,
    ]
    if instance == "policy":  # live: as many chunks as vLLM sent (role, reasoning, text, finish, usage)
        assert len(chunks) == 1 + pieces(REASONING["reasoning"]) + pieces(REASONING["content"]) + 2
    elif instance == "training":  # assembled: the answer's chunks, written at the end
        assert len(chunks) == 3


@pytest.mark.parametrize("instance", ["policy", "inline", "training"])
def test_responses_events_make_the_unstreamed_response(servers, instance):
    with client(servers, instance) as caller:
        whole = caller.responses.create(model="any", input="What is 2+2?")
        with caller.responses.stream(model="any", input="What is 2+2?") as stream:
            events = list(stream)
            final = stream.get_final_response()
    assert [item.type for item in final.output] == [item.type for item in whole.output] == ["reasoning", "message"]
    assert final.output_text == whole.output_text == "\nThe answer is 4, as always."
    assert final.output[0].summary[0].text == "two and two make four"
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == whole.output_text
    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-1] == "response.completed"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    # The streamed items are the final ones: same ids, in the same places.
    added = [(e.output_index, e.item.id) for e in events if e.type == "response.output_item.added"]
    assert added == [(index, item.id) for index, item in enumerate(final.output)]
    if instance == "training":
        assert final.output[-1].generation_token_ids == whole.output[-1].generation_token_ids
        assert final.output[-1].prompt_token_ids == whole.output[-1].prompt_token_ids
    elif instance == "policy":  # the text in vLLM's pieces, the reasoning too
        assert kinds.count("response.output_text.delta") == pieces(REASONING["content"])
        assert kinds.count("response.reasoning_summary_text.delta") == pieces(REASONING["reasoning"])


def test_tool_calls_stream_whole(servers, stubs):
    stubs["main"].script = lambda body: {"tool_calls": [{"name": "add", "arguments": '{"a": 2, "b": 2}'}]}
    tools = [{"type": "function", "name": "add", "parameters": {"type": "object"}}]
    with client(servers, "policy") as caller:
        with caller.responses.stream(model="any", input="add", tools=tools) as stream:
            final = stream.get_final_response()
        chunks = list(caller.chat.completions.create(model="any", messages=MESSAGES, stream=True))
    assert [(item.type, item.name, item.arguments) for item in final.output] == [
        ("function_call", "add", '{"a": 2, "b": 2}')
    ]
    calls = [call for c in chunks for call in (c.choices[0].delta.tool_calls or [])]
    assert [(call.function.name, call.function.arguments) for call in calls] == [("add", '{"a": 2, "b": 2}')]


@pytest.mark.parametrize("api", ["chat", "responses"])
def test_events_arrive_while_vllm_is_still_generating(servers, stubs, api):
    stub = stubs["main"]
    stub.gate = threading.Event()  # the stub stops after its first reasoning piece until this is set
    seen: list[str] = []
    with client(servers, "policy") as caller:
        if api == "chat":
            stream: Any = caller.chat.completions.create(model="any", messages=MESSAGES, stream=True)
            for chunk in stream:
                seen.append(chunk.choices[0].delta.content or "")
                if "two" in "".join(seen) and len(seen) == 2:  # the first piece of reasoning
                    # Relayed before vLLM sent the rest: it is still held at the gate.
                    assert not stub.gate.is_set() and stub.chunks_sent == 2
                    stub.gate.set()
        else:
            with caller.responses.stream(model="any", input="What is 2+2?") as stream:
                for event in stream:
                    seen.append(event.type)
                    if event.type == "response.reasoning_summary_text.delta" and event.delta == "two":
                        assert not stub.gate.is_set() and stub.chunks_sent == 2
                        stub.gate.set()
    assert stub.gate.is_set()  # opened on the first delta, while vLLM was held
    if api == "chat":
        assert "".join(seen) == "<think>two and two make four</think>\nThe answer is 4, as always."
    else:
        assert seen[-1] == "response.completed"


@pytest.mark.parametrize("api", ["chat", "responses"])
def test_vllm_dying_mid_stream_is_an_error_the_client_raises(servers, stubs, api):
    stubs["main"].die_after_chunks = 4
    with client(servers, "policy") as caller:
        with pytest.raises(openai.APIError) as raised:
            if api == "chat":
                for _ in caller.chat.completions.create(model="any", messages=MESSAGES, stream=True):
                    pass
            else:
                with caller.responses.stream(model="any", input="What is 2+2?") as stream:
                    for _ in stream:
                        pass
    assert "broke off" in raised.value.message
    assert raised.value.body["type"] == "upstream_error"


@pytest.mark.parametrize("api", ["chat", "responses"])
def test_a_stream_that_ends_without_done_is_an_error_not_a_short_answer(servers, stubs, api):
    stubs["main"].drop_done = True  # the stream ends cleanly, but vLLM never said it was done
    with client(servers, "policy") as caller:
        with pytest.raises(openai.APIError) as raised:
            if api == "chat":
                list(caller.chat.completions.create(model="any", messages=MESSAGES, stream=True))
            else:
                list(caller.responses.create(model="any", input="What is 2+2?", stream=True))
    assert "without [DONE]" in raised.value.message


@pytest.mark.parametrize("api", ["chat", "responses"])
def test_a_caller_that_disconnects_cancels_the_vllm_request(servers, stubs, api):
    stub = stubs["main"]
    stub.gate = threading.Event()  # never set: vLLM "generates" until the request is cancelled
    with client(servers, "policy") as caller:
        if api == "chat":
            stream: Any = caller.chat.completions.create(model="any", messages=MESSAGES, stream=True)
            next(iter(stream))
        else:
            stream = caller.responses.create(model="any", input="What is 2+2?", stream=True)
            next(iter(stream))
        stream.close()
    wait_for(lambda: stub.disconnects == 1, "the stub to see its request cancelled")
    assert not stub.gate.is_set()


def test_failures_before_the_first_byte_keep_their_typed_status(servers, stubs):
    with client(servers, "unreachable") as caller:
        with pytest.raises(openai.APIStatusError) as raised:
            caller.chat.completions.create(model="any", messages=MESSAGES, stream=True)
    assert raised.value.status_code == 502 and raised.value.body["type"] == "upstream_unavailable"
    stubs["main"].fail_status = 500
    try:
        with client(servers, "policy") as caller:
            with pytest.raises(openai.APIStatusError) as raised:
                caller.responses.create(model="any", input="hi", stream=True)
    finally:
        stubs["main"].fail_status = None
    assert raised.value.status_code == 502 and raised.value.body["type"] in ("upstream_error", "upstream_unavailable")


def test_a_context_overflow_streams_an_incomplete_response(servers):
    with client(servers, "policy") as caller:
        events = list(caller.responses.create(model="any", input="x" * 5000, stream=True))
    assert events[-1].type == "response.incomplete"
    assert events[-1].response.incomplete_details.reason == "max_output_tokens"


def test_think_splitter_holds_back_a_tag_split_across_pieces():
    split = ThinkSplitter()
    pieces = ["<thi", "nk>ab", "c</th", "ink>x", "y<", "z"]
    out = [split.feed(p) for p in pieces] + [split.flush()]
    assert "".join(r for r, _ in out) == "abc"
    assert "".join(t for _, t in out) == "xy<z"
    assert out[0] == ("", "")  # "<thi" could be a tag: held back


async def test_a_stream_whose_answer_is_never_sent_frees_its_slot(stubs):
    # The caller left before the answer began: the streaming body is never iterated, so its own
    # cleanup never runs; collecting it gives the slot (one here) and the connection back.
    upstream = Upstream("t", name="stub", timeout_s=5, max_attempts=1, max_concurrency=1, queue_timeout_s=0.5)
    body = {"model": "m", "messages": MESSAGES, "stream": True}
    server: Any = SimpleNamespace(name="t", log=logging.getLogger("t"))
    try:
        stream = await upstream.open_stream(stubs["main"].url, "/chat/completions", body)
        answer = relay(server, stream, chat_relay(stream), chat_error_sse)
        del answer, stream
        gc.collect()
        again = await upstream.open_stream(stubs["main"].url, "/chat/completions", body)
        assert [event.data async for event in again.events()][-1] == "[DONE]"
        again.close()
    finally:
        await upstream.close()


def streamed_text(body: bytes) -> str:
    """The text of a streamed chat completion's ``data:`` chunks (``[DONE]`` last)."""
    lines = [line.removeprefix(b"data: ") for line in body.split(b"\n\n") if line.startswith(b"data: ")]
    assert lines[-1] == b"[DONE]"
    return "".join(json.loads(line)["choices"][0]["delta"].get("content") or "" for line in lines[:-1])


def test_a_stream_fails_over_to_the_next_replica_before_its_first_byte():
    stubs = [StubVllm("a").start(), StubVllm("b").start()]
    options = {"base_url": [stub.url for stub in stubs], "model": "stub-model", "max_attempts": 1}
    try:
        config = {"policy": {"plugin": "vllm_model", **options}}
        with running_servers(config, plugins=gym_core.testing.plugin_manager(gym_vllm_model.plugin)) as running:
            caller = HTTPCaller(running.instances["policy"].url, auth_token=running.auth_token)
            body = {"messages": MESSAGES, "stream": True}
            assert streamed_text(caller.post("/v1/chat/completions", body).body) == "What is 2+2?"
            (home,) = [index for index, stub in enumerate(stubs) if stub.completions()]  # the session's replica
            stubs[home].fail_status = 500
            moved = caller.post("/v1/chat/completions", body)
            assert moved.status == 200 and streamed_text(moved.body) == "What is 2+2?"
            assert len(stubs[home].completions()) == 2 and len(stubs[1 - home].completions()) == 1
    finally:
        for stub in stubs:
            stub.stop()
