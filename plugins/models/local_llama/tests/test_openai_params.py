"""The OpenAI parameters local_llama honours, through the official ``openai`` client: streaming,
``n``, ``tool_choice``, JSON schemas (constrained decoding), ``top_logprobs``; and a 400 naming the
parameter it does not honour. Replies are kept to a few tokens."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import jsonschema  # the plugin's test group has it
import openai
import pytest

from gym_core.testing import ModelServerTests, RunningServers

import gym_local_llama.plugin

HELLO = [{"role": "user", "content": "Say hello."}]


class LocalLlamaServers(ModelServerTests):
    """The server these tests call (the kit's class, only to start it): batched, so that constrained
    and plain requests are decoded together."""

    server_type = "local_llama"
    options = {"max_tokens": 16, "n_ctx": 2048, "n_threads": 1, "batch_size": 8}
    plugins = [gym_local_llama.plugin]


@pytest.fixture(scope="module")
def gym_servers():
    with LocalLlamaServers.running() as servers:
        yield servers


@pytest.fixture
async def client(gym_servers: RunningServers) -> AsyncIterator[openai.AsyncOpenAI]:
    async with openai.AsyncOpenAI(
        base_url=f"{gym_servers.url}/v1", api_key=gym_servers.config.auth_token, max_retries=0
    ) as client:
        yield client


async def test_chat_streams_the_same_text_as_a_plain_call(client):
    plain = await client.chat.completions.create(model="m", messages=HELLO, temperature=0, max_tokens=8)
    stream = await client.chat.completions.create(
        model="m", messages=HELLO, temperature=0, max_tokens=8, stream=True, stream_options={"include_usage": True}
    )
    chunks = [chunk async for chunk in stream]
    text = "".join(choice.delta.content or "" for c in chunks for choice in c.choices)
    assert text == plain.choices[0].message.content
    assert [choice.finish_reason for c in chunks for choice in c.choices][-1] == plain.choices[0].finish_reason
    assert chunks[-1].usage.completion_tokens == plain.usage.completion_tokens


async def test_responses_stream_with_the_sdk(client):
    plain = await client.responses.create(model="m", input="Say hello.", temperature=0, max_output_tokens=8)
    async with client.responses.stream(model="m", input="Say hello.", temperature=0, max_output_tokens=8) as stream:
        events = [event async for event in stream]
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    # Cut at max_output_tokens: "response.incomplete", as OpenAI ends such a stream.
    assert events[-1].type == ("response.incomplete" if plain.status == "incomplete" else "response.completed")
    assert "".join(deltas) == events[-1].response.output_text == plain.output_text


async def test_a_parameter_it_does_not_honour_is_a_400_naming_it(client):
    with pytest.raises(openai.BadRequestError, match="'frequency_penalty'"):
        await client.chat.completions.create(model="m", messages=HELLO, frequency_penalty=1.0, max_tokens=2)
    with pytest.raises(openai.BadRequestError, match="'temperature'"):
        await client.responses.create(model="m", input="x", temperature=7, max_output_tokens=2)


async def test_n_choices(client):
    settings = {"model": "m", "messages": HELLO, "temperature": 1.0, "max_tokens": 6}
    completion = await client.chat.completions.create(n=3, seed=5, **settings)
    one = await client.chat.completions.create(seed=5, **settings)
    six = await client.chat.completions.create(seed=6, **settings)
    assert [choice.index for choice in completion.choices] == [0, 1, 2]
    # Choice i samples with seed + i: the same as a single call with that seed.
    assert completion.choices[0].message.content == one.choices[0].message.content
    assert completion.choices[1].message.content == six.choices[0].message.content
    assert 3 <= completion.usage.completion_tokens <= 18


WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "enum": ["Paris", "Rome", "London"]}},
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}
NOTE_TOOL = {
    "type": "function",
    "function": {
        "name": "take_note",
        "parameters": {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]},
    },
}
SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 12}, "age": {"type": "integer", "maximum": 150}},
    "required": ["name", "age"],
    "additionalProperties": False,
}


async def test_constrained_and_free_requests_decoded_together_follow_their_grammar(client, gym_servers):
    """A JSON schema, a required call, a named call and a free request at once, in one batch: the
    135M model's JSON validates, the calls are calls of the right tool with valid arguments."""
    ask = [{"role": "user", "content": "Give a person's name and age as JSON."}]
    weather = [{"role": "user", "content": "What is the weather like in Rome?"}]
    fmt = {"type": "json_schema", "json_schema": {"name": "person", "schema": SCHEMA, "strict": True}}
    tools = [WEATHER_TOOL, NOTE_TOOL]
    stats = gym_servers.server.engine.batch_stats
    steps, tokens = stats.steps, stats.tokens
    person, required, named, free, text = await asyncio.gather(
        client.chat.completions.create(model="m", messages=ask, response_format=fmt, temperature=0, max_tokens=40),
        client.chat.completions.create(
            model="m", messages=weather, tools=tools, tool_choice="required", temperature=0, max_tokens=48
        ),
        client.chat.completions.create(
            model="m",
            messages=weather,
            tools=tools,
            tool_choice={"type": "function", "function": {"name": "take_note"}},
            temperature=0,
            max_tokens=48,
        ),
        client.chat.completions.create(model="m", messages=weather, tools=tools, tool_choice="none", max_tokens=8),
        client.responses.create(
            model="m",
            input="Give a person's name and age as JSON.",
            text={"format": {"type": "json_schema", "name": "person", "schema": SCHEMA}},
            temperature=0,
            max_output_tokens=40,
        ),
    )
    assert person.choices[0].finish_reason == "stop"
    jsonschema.validate(json.loads(person.choices[0].message.content), SCHEMA)
    jsonschema.validate(json.loads(text.output_text), SCHEMA)
    call = required.choices[0].message.tool_calls[0]
    assert required.choices[0].finish_reason == "tool_calls" and call.function.name in ("get_weather", "take_note")
    jsonschema.validate(
        json.loads(call.function.arguments),
        {t["function"]["name"]: t for t in tools}[call.function.name]["function"]["parameters"],
    )
    [note] = named.choices[0].message.tool_calls
    assert note.function.name == "take_note"
    assert isinstance(json.loads(note.function.arguments)["ok"], bool)
    assert not free.choices[0].message.tool_calls
    # Decoded side by side: some steps decoded several sequences.
    assert stats.tokens - tokens > stats.steps - steps


async def test_a_bad_tool_choice_or_format_is_a_400_naming_it(client):
    with pytest.raises(openai.BadRequestError, match="tool_choice"):
        await client.chat.completions.create(
            model="m",
            messages=HELLO,
            tools=[WEATHER_TOOL],
            tool_choice={"type": "function", "function": {"name": "nope"}},
            max_tokens=2,
        )
    with pytest.raises(openai.BadRequestError, match="tool_choice"):
        await client.chat.completions.create(model="m", messages=HELLO, tool_choice="required", max_tokens=2)
    with pytest.raises(openai.BadRequestError, match="response_format"):
        await client.chat.completions.create(
            model="m", messages=HELLO, response_format={"type": "json_schema", "json_schema": {"name": "x"}}
        )


async def test_top_logprobs_on_both_endpoints(client):
    completion = await client.chat.completions.create(
        model="m", messages=HELLO, temperature=0, max_tokens=5, logprobs=True, top_logprobs=3
    )
    entries = completion.choices[0].logprobs.content
    assert len(entries) == completion.usage.completion_tokens
    for entry in entries:
        assert len(entry.top_logprobs) == 3
        values = [alt.logprob for alt in entry.top_logprobs]
        assert values == sorted(values, reverse=True) and values[0] <= 0
        # Greedy: the sampled token is the most likely one.
        assert (entry.token, entry.logprob) == (entry.top_logprobs[0].token, values[0])
    response = await client.responses.create(
        model="m",
        input="Say hello.",
        temperature=0,
        max_output_tokens=5,
        include=["message.output_text.logprobs"],
        top_logprobs=2,
    )
    logprobs = response.output[0].content[0].logprobs
    assert len(logprobs) == response.usage.output_tokens
    assert all(len(entry.top_logprobs) == 2 for entry in logprobs)
    assert [e.token for e in logprobs] == [e.token for e in entries]
    with pytest.raises(openai.BadRequestError, match="'top_logprobs'"):
        await client.chat.completions.create(model="m", messages=HELLO, top_logprobs=2, max_tokens=2)
