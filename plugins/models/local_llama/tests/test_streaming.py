"""``stream: true`` token by token: each piece of text is sent as it is decoded.

First the rules on a scripted decoding (no model): which text is settled (whole UTF-8 characters,
nothing a stop string may cut, nothing tool-call parsing may change). Then the real model through
the official ``openai`` client: the deltas spell the plain answer byte for byte, the first arrives
while the request still holds its batch slot, concurrent streams get their own text, and a client
that goes away frees its slot.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import numpy as np
import openai
import pytest

from gym_core import hookimpl
from gym_core.testing import ModelServerTests, RunningServers

import gym_local_llama.plugin
from gym_local_llama.config import LocalLlamaConfig
from gym_local_llama.decoding import Decoding, Generation
from gym_local_llama.server import LocalLlamaModel
from gym_local_llama.tool_calls import parse_tool_calls, settled_text

# --------------------------------------------------------------------------- scripted decoding

EOS = 0


def scripted(pieces: list[bytes], stop: list[bytes] | None = None, tools: list[dict] | None = None) -> list[str]:
    """The texts ``on_text`` gets while a decoding samples token 1, 2, ... (token i reads
    ``pieces[i - 1]``) and then the end-of-generation token."""
    vocab = {i + 1: piece for i, piece in enumerate(pieces)}
    decoding = Decoding(
        [7, 8],
        n_ctx=1000,
        eog_token_ids=frozenset({EOS}),
        detokenize=lambda ids: b"".join(vocab.get(i, b"") for i in ids),
        tools=tools,
        temperature=0.0,
        top_p=1.0,
        max_tokens=100,
        stop_bytes=stop or [],
        rng=np.random.default_rng(0),
        return_token_ids=False,
        return_logprobs=False,
    )
    got: list[str] = []
    decoding.on_text = got.append
    for token in [*vocab, EOS]:
        logits = np.zeros(len(pieces) + 1, dtype=np.float32)
        logits[token] = 1.0
        if decoding.step(logits) is None:
            break
    return [*got, decoding.generation().text]


def test_a_character_split_across_tokens_is_sent_whole():
    # "é" is two bytes, "🙂" four: the tokens split them; no piece is half a character.
    *pieces, text = scripted([b"caf", b"\xc3", b"\xa9 ", b"\xf0\x9f", b"\x99", b"\x82", b"!", b"?"])
    assert pieces == ["caf", "é ", "🙂", "!", "?"]
    assert text == "café 🙂!?"


def test_invalid_bytes_are_replaced_as_in_the_whole_text():
    *pieces, text = scripted([b"a\xff", b"b\xc3", b"c", b"d"])
    assert pieces == ["a\ufffd", "b", "\ufffdc", "d"]
    assert "".join(pieces) == text == "a\ufffdb\ufffdcd"


def test_text_a_stop_string_may_still_cut_is_held_back():
    *pieces, text = scripted([b"one ", b"two E", b"N", b"D three"], stop=[b"END"])
    assert text == "one two "
    assert pieces == ["on", "e two", " "]  # never the "E": it might begin "END"


@pytest.mark.parametrize(
    "raw",
    [
        'Sure. <tool_call>{"name": "f", "arguments": {}}</tool_call>',
        'Sure.\n<tool_call>{"name": "f", "arguments": {}}',
        ' leading space then <tool_call>{"name": "f"}</tool_call>',
        '{"name": "f", "arguments": {"x": 1}}',
        '```json\n{"name": "f"}\n```',
        "Plain text, no call at all.  ",
        "Broken <tool_call>{not json</tool_call> rest",
        "a <tool_ca",
    ],
)
def test_settled_text_of_every_prefix_begins_the_parsed_text(raw):
    """Whatever the reply turns out to be, the text streamed from any prefix of it is where the
    parsed text (what a plain request answers) begins, and it only grows."""
    tools = [{"type": "function", "function": {"name": "f"}}]
    for given in (tools, None):
        final, _ = parse_tool_calls(raw, given)
        previous = ""
        for end in range(len(raw) + 1):
            settled = settled_text(raw[:end], given)
            assert final.startswith(settled), (raw[:end], settled, final)
            assert settled.startswith(previous)
            previous = settled


def test_text_before_a_tool_call_is_streamed_and_the_call_is_not():
    assert settled_text("Let me check.  <tool_", None) == "Let me check."
    assert settled_text('{"name": "f"', [{"type": "function", "function": {"name": "f"}}]) == ""
    assert settled_text('{"name": "f"', None) == '{"name": "f"'  # no tools: no bare-JSON calls


# --------------------------------------------------------------------------- the real model

COUNT = [{"role": "user", "content": "Count from 1 to 100, one number per line."}]
POEM = [{"role": "user", "content": "Write a short poem about the sea."}]
LONG = 160  # tokens: POEM's greedy answer uses them all (checked), so a cut is visible


class StreamingServer(ModelServerTests):
    """Two batch slots, so that 'more requests than slots' is three."""

    server_type = "local_llama"
    options = {"max_tokens": 48, "n_ctx": 2048, "n_threads": 1, "batch_size": 2}
    plugins = [gym_local_llama.plugin]


@pytest.fixture(scope="module")
def gym_servers():
    with StreamingServer.running() as servers:
        yield servers


@pytest.fixture
async def client(gym_servers: RunningServers) -> AsyncIterator[openai.AsyncOpenAI]:
    async with openai.AsyncOpenAI(
        base_url=f"{gym_servers.url}/v1", api_key=gym_servers.config.auth_token, max_retries=0
    ) as client:
        yield client


def stats(gym_servers: RunningServers):
    return gym_servers.server.engine.batch_stats  # the server runs in this process


async def test_chat_deltas_spell_the_plain_answer_and_arrive_while_it_is_generated(client, gym_servers):
    plain = await client.chat.completions.create(model="m", messages=POEM, temperature=0, max_tokens=48)
    stream = await client.chat.completions.create(
        model="m", messages=POEM, temperature=0, max_tokens=48, stream=True, stream_options={"include_usage": True}
    )
    deltas: list[str] = []
    slots_at_first_delta = None
    chunks = []
    async for chunk in stream:
        chunks.append(chunk)
        for choice in chunk.choices:
            if choice.delta.content:
                if slots_at_first_delta is None:
                    slots_at_first_delta = stats(gym_servers).busy_slots
                deltas.append(choice.delta.content)
    assert "".join(deltas) == plain.choices[0].message.content
    # Token by token: many deltas, the first while the request still held its slot (generating).
    assert len(deltas) >= 10
    assert slots_at_first_delta == 1
    finishes = [
        (i, c.choices[0].finish_reason) for i, c in enumerate(chunks) if c.choices and c.choices[0].finish_reason
    ]
    assert [f for _, f in finishes] == [plain.choices[0].finish_reason]
    first_delta = next(i for i, c in enumerate(chunks) if c.choices and c.choices[0].delta.content)
    assert first_delta < finishes[0][0]
    assert chunks[-1].usage.completion_tokens == plain.usage.completion_tokens
    assert len({c.id for c in chunks}) == 1


async def test_responses_deltas_spell_the_plain_answer_and_arrive_while_it_is_generated(client, gym_servers):
    plain = await client.responses.create(model="m", input="Write a short poem about the sea.", temperature=0)
    stream = await client.responses.create(
        model="m", input="Write a short poem about the sea.", temperature=0, stream=True
    )
    events = []
    slots_at_first_delta = None
    async for event in stream:
        if event.type == "response.output_text.delta" and slots_at_first_delta is None:
            slots_at_first_delta = stats(gym_servers).busy_slots
        events.append(event)
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert "".join(deltas) == plain.output_text
    assert len(deltas) >= 10 and slots_at_first_delta == 1
    types = [e.type for e in events]
    assert types[:2] == ["response.created", "response.in_progress"]
    assert types.index("response.output_text.delta") < types.index("response.output_text.done")
    assert types[-1] == ("response.incomplete" if plain.status == "incomplete" else "response.completed")
    final = events[-1].response
    assert final.output_text == plain.output_text and final.id == events[0].response.id
    assert final.usage.output_tokens == plain.usage.output_tokens
    added = next(e for e in events if e.type == "response.output_item.added")
    assert added.item.id == final.output[0].id
    assert [e.sequence_number for e in events] == list(range(len(events)))

    # The SDK's helper reads the same events into the same response (one that completes).
    hello = await client.responses.create(model="m", input="Say hello.", temperature=0)
    assert hello.status == "completed"
    async with client.responses.stream(model="m", input="Say hello.", temperature=0) as s:
        assert (await s.get_final_response()).output_text == hello.output_text


def logprob_key(entry: Any) -> tuple:
    """A log-prob entry as the SDK reads it (chat, a Responses delta or a whole output text)."""
    return entry.token, entry.logprob, [(t.token, t.logprob) for t in entry.top_logprobs or []]


async def test_chat_chunks_carry_their_own_tokens_log_probs(client):
    asked = dict(model="m", messages=POEM, temperature=0, max_tokens=48, logprobs=True, top_logprobs=2)
    plain = await client.chat.completions.create(**asked)
    whole = [logprob_key(e) for e in plain.choices[0].logprobs.content]
    streamed: list[tuple] = []
    text, spelled = "", b""
    carrying = 0  # chunks with text that carry log-probs
    async for chunk in await client.chat.completions.create(**asked, stream=True):
        choice = chunk.choices[0] if chunk.choices else None
        entries = choice.logprobs.content if choice is not None and choice.logprobs is not None else []
        streamed += [logprob_key(e) for e in entries or []]
        spelled += b"".join(bytes(e.bytes) for e in entries or [])
        if choice is not None and choice.delta.content:
            text += choice.delta.content
            carrying += bool(entries)
            assert text.encode().startswith(spelled)  # a chunk's tokens spell text sent by then, no more
    assert streamed == whole and len(whole) > 10
    assert carrying >= 10  # per chunk, not all at the end


async def test_responses_deltas_carry_their_own_tokens_log_probs(client):
    asked = dict(model="m", input="Write a short poem about the sea.", temperature=0, top_logprobs=2,
                 include=["message.output_text.logprobs"])  # fmt: skip
    plain = await client.responses.create(**asked)
    whole = [logprob_key(e) for e in plain.output[0].content[0].logprobs]
    streamed: list[tuple] = []
    carrying = 0
    async for event in await client.responses.create(**asked, stream=True):
        if event.type == "response.output_text.delta":
            streamed += [logprob_key(e) for e in event.logprobs]
            carrying += bool(event.delta and event.logprobs)
        elif event.type == "response.output_text.done":
            assert [logprob_key(e) for e in event.logprobs] == whole
    assert streamed == whole and len(whole) > 10
    assert carrying >= 10


async def test_concurrent_streams_get_their_own_text_while_decoded_together(client, gym_servers):
    plain = [
        (await client.chat.completions.create(model="m", messages=m, temperature=0, max_tokens=48))
        .choices[0]
        .message.content
        for m in (COUNT, POEM)
    ]
    arrivals: list[tuple[int, str]] = []  # (stream, "delta" | "end") in the order they arrived

    async def read(index: int, messages: list[dict]) -> str:
        stream = await client.chat.completions.create(
            model="m", messages=messages, temperature=0, max_tokens=48, stream=True
        )
        text = ""
        async for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                text += chunk.choices[0].delta.content
                arrivals.append((index, "delta"))
        arrivals.append((index, "end"))
        return text

    before = stats(gym_servers).max_sequences
    texts = await asyncio.gather(read(0, COUNT), read(1, POEM))
    assert texts == plain
    # Each stream's deltas came while the other was still streaming: neither waited for the other.
    ends = {i: arrivals.index((i, "end")) for i in (0, 1)}
    firsts = {i: arrivals.index((i, "delta")) for i in (0, 1)}
    assert firsts[0] < ends[1] and firsts[1] < ends[0]
    assert stats(gym_servers).max_sequences >= max(before, 2)


async def test_n_choices_stream_token_by_token_each_with_its_own_text(client):
    ask = {"model": "m", "messages": POEM, "n": 3, "seed": 11, "temperature": 1.0, "max_tokens": 24}
    plain = await client.chat.completions.create(**ask)
    chunks = [c async for c in await client.chat.completions.create(stream=True, **ask)]
    deltas = [(choice.index, choice.delta.content) for c in chunks for choice in c.choices if choice.delta.content]
    texts = ["".join(text for index, text in deltas if index == i) for i in range(3)]
    assert texts == [choice.message.content for choice in plain.choices]
    assert all(sum(index == i for index, _ in deltas) >= 5 for i in range(3))
    # Decoded together: a choice's deltas come between another's, not after them.
    order = [index for index, _ in deltas]
    assert order != sorted(order)
    finishes = {choice.index: choice.finish_reason for c in chunks for choice in c.choices if choice.finish_reason}
    assert finishes == {choice.index: choice.finish_reason for choice in plain.choices}


async def test_a_token_history_request_streams_the_plain_answer_with_its_training_fields(client):
    ids = {"return_token_ids": True}
    first = await client.responses.create(
        model="m", input="Say hello.", temperature=0, max_output_tokens=8, extra_body=ids
    )
    again = [
        {"role": "user", "content": "Say hello."},
        *(item.model_dump(exclude_none=True) for item in first.output),
        {"role": "user", "content": "Now write a short poem about the sea."},
    ]
    ask = {"model": "m", "input": again, "temperature": 0, "max_output_tokens": 32, "extra_body": ids}
    plain = await client.responses.create(**ask)
    events = [e async for e in await client.responses.create(stream=True, **ask)]
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert "".join(deltas) == plain.output_text and len(deltas) >= 5
    streamed, expected = events[-1].response.output[-1].model_dump(), plain.output[-1].model_dump()
    history = first.output[-1].model_dump()
    assert streamed["prompt_token_ids"] == expected["prompt_token_ids"]
    assert streamed["prompt_token_ids"][: len(history["prompt_token_ids"])] == history["prompt_token_ids"]
    assert streamed["generation_token_ids"] == expected["generation_token_ids"]


async def test_a_client_that_goes_away_frees_its_slot(client, gym_servers):
    plain = await client.chat.completions.create(model="m", messages=POEM, temperature=0, max_tokens=LONG)
    assert plain.choices[0].finish_reason == "length"  # the reply would use every token
    engine_stats = stats(gym_servers)
    tokens_before = engine_stats.tokens
    stream = await client.chat.completions.create(model="m", messages=POEM, temperature=0, max_tokens=LONG, stream=True)
    deltas = 0
    async for chunk in stream:
        deltas += bool(chunk.choices and chunk.choices[0].delta.content)
        if deltas == 3:
            break
    await stream.close()  # the connection goes away mid-stream
    for _ in range(600):  # bounded: 60 s
        if engine_stats.busy_slots == 0:
            break
        await asyncio.sleep(0.1)
    assert engine_stats.busy_slots == 0
    # Cancelled: it stopped well before its token budget (the plain call decoded all of them).
    decoded = engine_stats.tokens - tokens_before
    assert decoded < LONG // 2
    # More requests than slots (two) all get their answers: no slot is held by the stream that left.
    settings = {"model": "m", "temperature": 0, "max_tokens": 8}
    answers = await asyncio.wait_for(
        asyncio.gather(*(client.chat.completions.create(messages=COUNT, **settings) for _ in range(3))), 120
    )
    assert len({a.choices[0].message.content for a in answers}) == 1 and answers[0].choices[0].message.content


async def test_a_forced_tool_call_streams_as_one_call_at_the_end(client):
    tool = {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string", "enum": ["Paris", "Rome"]}},
                "required": ["city"],
            },
        },
    }
    ask = {
        "model": "m",
        "messages": [{"role": "user", "content": "Weather in Rome?"}],
        "tools": [tool],
        "tool_choice": "required",
        "temperature": 0,
        "max_tokens": 40,
    }
    plain = (await client.chat.completions.create(**ask)).choices[0]
    chunks = [c async for c in await client.chat.completions.create(stream=True, **ask)]
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    calls = [call for c in chunks if c.choices for call in c.choices[0].delta.tool_calls or []]
    assert content == (plain.message.content or "")
    assert [(c.function.name, json.loads(c.function.arguments)) for c in calls] == [
        (c.function.name, json.loads(c.function.arguments)) for c in plain.message.tool_calls
    ]
    assert chunks[-1].choices[0].finish_reason == plain.finish_reason == "tool_calls"


async def test_a_json_schema_reply_streams_token_by_token_and_validates(client):
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string", "maxLength": 12}, "age": {"type": "integer"}},
        "required": ["name", "age"],
        "additionalProperties": False,
    }
    ask = {
        "model": "m",
        "messages": [{"role": "user", "content": "Give a person's name and age as JSON."}],
        "response_format": {"type": "json_schema", "json_schema": {"name": "person", "schema": schema}},
        "temperature": 0,
        "max_tokens": 40,
    }
    plain = (await client.chat.completions.create(**ask)).choices[0].message.content
    deltas = [
        c.choices[0].delta.content
        async for c in await client.chat.completions.create(stream=True, **ask)
        if c.choices and c.choices[0].delta.content
    ]
    assert "".join(deltas) == plain and len(deltas) >= 5
    assert set(json.loads(plain)) == {"name", "age"}


def test_the_unbatched_engine_passes_the_text_as_it_decodes():
    """``batch_size: 1``: the same pieces, from the engine's worker thread."""
    from gym_local_llama.engine import LlamaEngine

    async def run(engine: LlamaEngine) -> tuple[list[str], str, str]:
        decoding = await engine.aprepare(POEM, temperature=0, max_tokens=24)
        loop = asyncio.get_running_loop()
        pieces: list[str] = []
        decoding.on_text = lambda piece: loop.call_soon_threadsafe(pieces.append, piece)
        streamed = await engine.arun(decoding)
        await asyncio.sleep(0)  # the last call_soon_threadsafe callbacks
        plain = await engine.agenerate(POEM, temperature=0, max_tokens=24)
        return pieces, streamed.text, plain.text

    with LlamaEngine(n_ctx=1024, n_threads=1, batch_size=1) as engine:
        pieces, streamed, plain = asyncio.run(run(engine))
    assert streamed == plain and len(pieces) >= 10
    assert plain.startswith("".join(pieces))


async def test_a_bad_streamed_request_is_a_4xx_not_a_stream(client):
    with pytest.raises(openai.BadRequestError, match="top_logprobs"):
        await client.chat.completions.create(model="m", messages=POEM, top_logprobs=2, stream=True)
    too_long = [{"role": "user", "content": "word " * 3000}]
    with pytest.raises(openai.BadRequestError, match="context window"):
        await client.responses.create(model="m", input=too_long, stream=True)


class UnbatchedServer(ModelServerTests):
    server_type = "local_llama"
    options = {"max_tokens": 48, "n_ctx": 2048, "n_threads": 1, "batch_size": 1}
    plugins = [gym_local_llama.plugin]


async def test_a_failure_after_the_stream_began_is_an_error_event_the_client_raises():
    """Streams queued behind a long one have begun (their first event sent) when the engine closes:
    each ends with an error event, which the official client raises; the running one finishes."""
    with UnbatchedServer.running() as servers:
        async with openai.AsyncOpenAI(
            base_url=f"{servers.url}/v1", api_key=servers.config.auth_token, max_retries=0
        ) as client:
            running = await client.chat.completions.create(
                model="m", messages=POEM, temperature=0, max_tokens=LONG, stream=True
            )
            first = await anext(aiter(running))
            queued_chat = await client.chat.completions.create(model="m", messages=POEM, stream=True)
            queued_responses = await client.responses.create(model="m", input="Say hello.", stream=True)
            assert first.choices[0].delta.role == "assistant"
            assert (await anext(aiter(queued_chat))).choices[0].delta.role == "assistant"
            assert (await anext(aiter(queued_responses))).type == "response.created"
            closing = asyncio.create_task(asyncio.to_thread(servers.server.engine.close))
            with pytest.raises(openai.APIError, match="could not answer"):
                async for _ in queued_chat:
                    pass
            with pytest.raises(openai.APIError, match="could not answer"):
                async for _ in queued_responses:
                    pass
            chunks = [chunk async for chunk in running]
            assert chunks[-1].choices[0].finish_reason == "length"
            await closing


# --------------------------------------------------------------------------- an engine with agenerate only

SCRIPTED_REPLY = "Hello there, friend."


class ScriptedEngine:
    """The engine contract gym-train's trainer policy keeps (``agenerate``, no ``aprepare``/``arun``):
    a deterministic scripted model that always answers ``SCRIPTED_REPLY``."""

    model_name = "scripted"
    llm = SimpleNamespace(detokenize=lambda ids: b"")

    def check_token_ids(self, ids: list[int], what: str) -> None:
        pass

    async def agenerate(self, messages: list[dict], **kwargs: object) -> Generation:
        return Generation(text=SCRIPTED_REPLY, prompt_tokens=5, completion_tokens=4)

    async def aclose(self) -> None:
        pass


class ScriptedModel(LocalLlamaModel):
    async def startup(self) -> None:
        self.engine = ScriptedEngine()
        self.model_name = "scripted"


class scripted_plugin:  # noqa: N801 - a plugin object, as a module would be
    @staticmethod
    @hookimpl
    def gym_register_servers(register):
        register(name="scripted_llama", kind="model", server=ScriptedModel, config=LocalLlamaConfig)


class ScriptedServer(ModelServerTests):
    server_type = "scripted_llama"
    plugins = [scripted_plugin]


async def test_an_engine_without_token_streaming_streams_the_whole_answer_at_the_end():
    """gym-train's policy engine has ``agenerate`` only: ``stream: true`` still answers, in one go."""
    with ScriptedServer.running() as servers:
        async with openai.AsyncOpenAI(
            base_url=f"{servers.url}/v1", api_key=servers.config.auth_token, max_retries=0
        ) as client:
            chunks = [c async for c in await client.chat.completions.create(model="m", messages=POEM, stream=True)]
            assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == SCRIPTED_REPLY
            assert chunks[-1].choices[0].finish_reason == "stop"
            async with client.responses.stream(model="m", input="Hi") as stream:
                assert (await stream.get_final_response()).output_text == SCRIPTED_REPLY
