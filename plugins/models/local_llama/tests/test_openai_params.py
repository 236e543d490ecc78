"""The OpenAI parameters local_llama honours, through the official ``openai`` client: streaming,
``n``, ``tool_choice``, JSON schemas (constrained decoding), ``top_logprobs``; and a 400 naming the
parameter it does not honour. Replies are kept to a few tokens."""

from __future__ import annotations

from collections.abc import AsyncIterator

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
