"""Batched decoding (``batch_size`` > 1) against the unbatched engine: the real model, no mocks.

Both engines use small prompt chunks (``n_batch=32``), so a long prompt is read over several step
boundaries while other requests generate, and three slots for five requests, so requests queue,
finish, and their slots are taken again.
"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from gym_local_llama.engine import EngineClosedError, Generation, LlamaEngine

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
# Prompts of different lengths (the fourth is read in several chunks), one with tools; max_tokens differ
# so that requests finish at different steps.
REQUESTS = [
    ([{"role": "user", "content": "Say hello."}], {"max_tokens": 10}),
    ([{"role": "user", "content": "Write a short poem about the sea and the wind."}], {"max_tokens": 24}),
    ([{"role": "user", "content": "What is the weather in Paris?"}], {"max_tokens": 16, "tools": [WEATHER_TOOL]}),
    ([{"role": "user", "content": "Name three fruits, then three vegetables. " * 6}], {"max_tokens": 20}),
    (
        [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Tell me about dragons."}],
        {"max_tokens": 30, "stop": ["."]},
    ),
]
OPTIONS = {"n_ctx": 512, "n_threads": 1, "n_batch": 32}
LONG = [{"role": "user", "content": "Write a very long story about a lighthouse."}]


@pytest.fixture(scope="module")
def reference():
    with LlamaEngine(**OPTIONS) as engine:
        yield engine


@pytest.fixture(scope="module")
def batched():
    with LlamaEngine(**OPTIONS, batch_size=3) as engine:
        yield engine


def fields(g: Generation) -> tuple:
    calls = [(c.name, c.arguments) for c in g.tool_calls]
    return (g.text, calls, g.finish_reason, g.prompt_token_ids, g.generation_token_ids, g.generation_log_probs)


async def wait_for(condition, what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.005)


async def test_concurrent_greedy_requests_equal_the_unbatched_engine(reference, batched):
    """Tokens, text, tool calls and log-probs are those of the unbatched engine, bit for bit,
    whatever the requests decoded beside them and whenever they joined."""
    kw = {"temperature": 0, "return_token_ids": True, "return_logprobs": True}
    expected = [reference.generate(messages, **kw, **extra) for messages, extra in REQUESTS]
    stats = batched.batch_stats
    steps_before, tokens_before = stats.steps, stats.tokens
    first = asyncio.create_task(batched.agenerate(REQUESTS[0][0], **kw, **REQUESTS[0][1]))
    await wait_for(lambda: stats.steps >= steps_before + 3, "the first request to be generating")
    rest = [asyncio.create_task(batched.agenerate(messages, **kw, **extra)) for messages, extra in REQUESTS[1:]]
    got = await asyncio.gather(first, *rest)
    for index, (want, have) in enumerate(zip(expected, got)):
        assert fields(have) == fields(want), f"request {index} differs from the unbatched engine"
    assert {g.finish_reason for g in got} >= {"length", "stop"}
    # Every generated token but each request's last was decoded by a batched step, and the steps
    # decoded several sequences at once (three slots, five requests: some waited for a free slot).
    assert stats.tokens - tokens_before == sum(g.completion_tokens - 1 for g in got)
    assert stats.steps - steps_before < stats.tokens - tokens_before
    assert stats.max_sequences == 3
    # The teacher-forced log-probs (on the unbatched context) agree with the batched generation.
    assert batched.log_probs(got[3].prompt_token_ids, got[3].generation_token_ids) == got[3].generation_log_probs


async def test_the_prefix_cache_serves_a_repeated_prompt_with_the_same_result(reference, batched):
    messages, extra = REQUESTS[3]
    kw = {"temperature": 0, "return_token_ids": True, "return_logprobs": True, **extra}
    want = reference.generate(messages, **kw)
    first = await batched.agenerate(messages, **kw)
    again = await batched.agenerate(messages, **kw)
    assert again.cached_prompt_tokens == again.prompt_tokens - 2  # its slot kept the prompt's cells
    assert fields(first) == fields(again) == fields(want)


async def test_seeded_sampling_repeats_per_request_and_matches_the_unbatched_engine(reference, batched):
    kw = {"temperature": 1.0, "top_p": 0.9, "max_tokens": 12, "return_token_ids": True, "return_logprobs": True}
    prompts = [messages for messages, _ in REQUESTS[:3]]
    expected = [reference.generate(p, seed=100 + i, **kw) for i, p in enumerate(prompts)]
    got = await asyncio.gather(*(batched.agenerate(p, seed=100 + i, **kw) for i, p in enumerate(prompts)))
    # Submitted in the opposite order, decoded beside different neighbours: the same per request.
    reversed_got = await asyncio.gather(
        *(batched.agenerate(p, seed=100 + i, **kw) for i, p in reversed(list(enumerate(prompts))))
    )
    assert [fields(g) for g in got] == [fields(g) for g in expected] == [fields(g) for g in reversed_got[::-1]]


async def test_repeats_of_a_prompt_arriving_together_read_it_once_with_the_same_results(reference, batched):
    """The repeats of one task (``gym collect --repeats``, a GRPO group) arrive at once: the first to
    read the prompt reads it for all of them (its cells copied into their streams), and each result
    is still the unbatched engine's for its seed."""
    messages = [{"role": "user", "content": "List the planets of the solar system with one fact about each. " * 3}]
    kw = {"temperature": 1.0, "top_p": 0.9, "max_tokens": 10, "return_token_ids": True, "return_logprobs": True}
    expected = [reference.generate(messages, seed=7 + i, **kw) for i in range(3)]
    stats = batched.batch_stats
    shared_before = stats.shared_prompt_tokens
    got = await asyncio.gather(*(batched.agenerate(messages, seed=7 + i, **kw) for i in range(3)))
    assert [fields(g) for g in got] == [fields(g) for g in expected]
    prompt_tokens = got[0].prompt_tokens
    assert prompt_tokens > 2 * OPTIONS["n_batch"]  # read in several chunks by the first
    # The two others took all but the last two prompt tokens from the first one's cells.
    assert [g.cached_prompt_tokens for g in got[1:]] == [prompt_tokens - 2] * 2
    assert got[0].cached_prompt_tokens < prompt_tokens - 2
    assert stats.shared_prompt_tokens - shared_before >= 2 * (prompt_tokens - 2 - OPTIONS["n_batch"])


def test_generate_from_threads_is_decoded_in_batches(reference, batched):
    """The blocking ``generate`` goes through the same scheduler (thread-safe, same results)."""
    kw = {"temperature": 0, "max_tokens": 8, "return_token_ids": True}
    prompts = [messages for messages, _ in REQUESTS[:3]]
    out: dict[int, Generation] = {}

    def work(i: int) -> None:
        out[i] = batched.generate(prompts[i], **kw)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert [fields(out[i]) for i in range(3)] == [fields(reference.generate(p, **kw)) for p in prompts]


async def test_a_cancelled_request_frees_its_slot(batched):
    stats = batched.batch_stats
    kw = {"temperature": 0, "max_tokens": 400}
    running = [asyncio.create_task(batched.agenerate(LONG, **kw)) for _ in range(3)]
    await wait_for(lambda: stats.busy_slots == 3, "three running requests")
    queued = asyncio.create_task(batched.agenerate(LONG, **kw))
    await wait_for(lambda: stats.queued == 1, "a queued request")
    queued.cancel()  # dropped before it ever ran
    running[0].cancel()  # stopped at the next step
    for task in (queued, running[0]):
        with pytest.raises(asyncio.CancelledError):
            await task
    await wait_for(lambda: stats.busy_slots == 2 and stats.queued == 0, "the cancelled requests to leave")
    # The freed slot serves a new request beside the two still running.
    short = await batched.agenerate(REQUESTS[0][0], temperature=0, max_tokens=4)
    assert short.completion_tokens == 4
    for task in running[1:]:
        task.cancel()
    await asyncio.gather(*running[1:], return_exceptions=True)
    await wait_for(lambda: stats.busy_slots == 0, "every slot to be free")


async def test_close_finishes_running_requests_and_fails_queued_ones():
    engine = LlamaEngine(**OPTIONS, batch_size=2)
    stats = engine.batch_stats
    tasks = [asyncio.create_task(engine.agenerate(REQUESTS[0][0], temperature=0, max_tokens=12)) for _ in range(4)]
    await wait_for(lambda: stats.busy_slots == 2 and stats.queued == 2 and stats.steps >= 1, "two running, two queued")
    await engine.aclose()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert [type(r) for r in results] == [Generation, Generation, EngineClosedError, EngineClosedError], results
    assert all(r.completion_tokens == 12 or r.finish_reason == "stop" for r in results[:2])
    with pytest.raises(EngineClosedError):
        await engine.agenerate(REQUESTS[0][0], max_tokens=2)
    with pytest.raises(EngineClosedError):
        engine.generate(REQUESTS[0][0], max_tokens=2)


def test_batch_size_must_be_positive():
    with pytest.raises(ValueError, match="batch_size must be >= 1"):
        LlamaEngine(batch_size=0)


def test_unbatched_engine_has_no_batch_stats(reference):
    assert reference.batch_size == 1 and reference.batch_stats is None


async def test_a_request_longer_than_a_slot_is_decoded_alone_with_the_same_result(reference):
    """Slots hold ``batch_n_ctx`` tokens; a request whose prompt and budget do not fit is decoded on
    the unbatched context (same result), beside the batched ones."""
    kw = {"temperature": 0, "return_token_ids": True, "return_logprobs": True}
    short, long = (REQUESTS[0][0], {"max_tokens": 8}), (REQUESTS[3][0], {"max_tokens": 8})
    with LlamaEngine(**OPTIONS, batch_size=2, batch_n_ctx=64) as engine:
        got = await asyncio.gather(*(engine.agenerate(m, **kw, **extra) for m, extra in (short, long)))
        stats = engine.batch_stats
        assert got[0].prompt_tokens + 8 <= 64 < got[1].prompt_tokens + 8
        assert stats.tokens == got[0].completion_tokens - 1  # only the short one went through the batch
        assert fields(engine.generate(long[0], **kw, **long[1])) == fields(got[1])
    assert [fields(g) for g in got] == [fields(reference.generate(m, **kw, **extra)) for m, extra in (short, long)]


def test_batch_n_ctx_must_hold_two_tokens():
    with pytest.raises(ValueError, match="batch_n_ctx must be >= 2"):
        LlamaEngine(batch_size=2, batch_n_ctx=1)
