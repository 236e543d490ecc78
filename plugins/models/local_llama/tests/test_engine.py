"""Tests of the local SmolLM2 engine: the real model, no mocks, small max_tokens."""

from __future__ import annotations

import asyncio
import json
import threading

import pytest

from gym_local_llama.engine import (
    DEFAULT_SYSTEM_PROMPT,
    EngineClosedError,
    GeneratedToolCall,
    Generation,
    GenerationCancelled,
    LlamaEngine,
    PromptTooLongError,
    default_model_path,
    parse_tool_calls,
    render_prompt,
)

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
TIME_TOOL = {"type": "function", "function": {"name": "get_time", "description": "Current time"}}
HELLO = [{"role": "user", "content": "Say hello in one short sentence."}]


@pytest.fixture(scope="module")
def engine():
    eng = LlamaEngine(n_ctx=2048, n_threads=1)  # see test_server.TestLocalLlama.options
    yield eng
    eng.close()


# --------------------------------------------------------------------------- model file


def test_default_model_path():
    path = default_model_path()
    assert path.is_file()
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert path.stat().st_size > 50_000_000


def test_missing_model_path_is_clear(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        LlamaEngine(model_path=tmp_path / "nope.gguf")


# --------------------------------------------------------------------------- generation


def test_greedy_is_deterministic(engine):
    a = engine.generate(HELLO, temperature=0, max_tokens=16, return_token_ids=True)
    b = engine.generate(HELLO, temperature=0, max_tokens=16, return_token_ids=True)
    assert a.text and a.text == b.text
    assert a.generation_token_ids == b.generation_token_ids
    assert a.finish_reason in ("stop", "length")
    assert b.cached_prompt_tokens == b.prompt_tokens - 2  # prefix cache reused


def test_max_tokens_gives_length(engine):
    g = engine.generate(
        [{"role": "user", "content": "Write a long essay about the ocean."}],
        temperature=0,
        max_tokens=5,
    )
    assert g.finish_reason == "length"
    assert g.completion_tokens == 5
    assert g.prompt_token_ids is None and g.generation_token_ids is None
    assert g.generation_log_probs is None


def test_token_ids_and_logprobs(engine):
    g = engine.generate(
        HELLO,
        temperature=0.8,
        max_tokens=24,
        seed=1,
        return_token_ids=True,
        return_logprobs=True,
    )
    ids, lps = g.generation_token_ids, g.generation_log_probs
    assert ids is not None and lps is not None
    assert len(ids) == len(lps) == g.completion_tokens > 0
    assert all(lp <= 0.0 for lp in lps)
    assert engine.llm.detokenize(ids).decode("utf-8", errors="replace") == g.text
    prompt = engine.render_prompt(HELLO)
    assert g.prompt_token_ids == engine.llm.tokenize(prompt.encode(), add_bos=False, special=True)
    assert g.prompt_tokens == len(g.prompt_token_ids)
    if g.finish_reason == "stop":
        assert ids[-1] in engine.eog_token_ids  # the sampled <|im_end|> is included


def test_seed_reproducible(engine):
    kw = dict(temperature=1.0, top_p=0.9, max_tokens=12, seed=1234, return_token_ids=True)
    a = engine.generate(HELLO, **kw)
    engine.generate([{"role": "user", "content": "Count to three."}], temperature=1.0, max_tokens=3)
    b = engine.generate(HELLO, **kw)
    assert a.generation_token_ids == b.generation_token_ids


def test_stop_string(engine):
    ref = engine.generate(HELLO, temperature=0, max_tokens=16)
    words = ref.text.split()
    assert len(words) >= 3
    stop = " " + words[2]
    g = engine.generate(HELLO, temperature=0, max_tokens=16, stop=[stop], return_token_ids=True)
    assert g.finish_reason == "stop"
    assert g.text == ref.text[: ref.text.index(stop)]
    assert stop in engine.llm.detokenize(g.generation_token_ids).decode()


def test_prompt_too_long(engine):
    with pytest.raises(PromptTooLongError):
        engine.generate([{"role": "user", "content": "word " * 3000}], max_tokens=4)


def test_bad_arguments(engine):
    with pytest.raises(ValueError):
        engine.generate(HELLO, temperature=-1)
    with pytest.raises(ValueError):
        engine.generate(HELLO, max_tokens=0)
    with pytest.raises(ValueError):
        engine.generate([{"role": "wizard", "content": "hi"}])


def test_generate_with_tools_smoke(engine):
    g = engine.generate(
        [{"role": "user", "content": "What is the weather in Paris?"}],
        tools=[WEATHER_TOOL],
        temperature=0,
        max_tokens=12,
    )
    assert g.finish_reason in ("stop", "length", "tool_calls")
    for call in g.tool_calls:
        assert isinstance(json.loads(call.arguments), dict)


# --------------------------------------------------------------------------- concurrency


class GenerateSpy:
    """Wraps an engine's ``generate`` (the real one runs) to see, from the event loop, whether a
    generation is running right now and how each call ended."""

    def __init__(self, engine: LlamaEngine):
        self.generate = engine.generate
        self.running = 0
        self.started = threading.Event()
        self.outcomes: list[str] = []  # "returned" or the exception's name, per call
        self._lock = threading.Lock()

    def __call__(self, *args, **kwargs):
        with self._lock:
            self.running += 1
        self.started.set()
        try:
            result = self.generate(*args, **kwargs)
        except BaseException as exc:
            self.outcomes.append(type(exc).__name__)
            raise
        finally:
            with self._lock:
                self.running -= 1
        self.outcomes.append("returned")
        return result


async def test_concurrent_agenerate_does_not_block_loop(engine, monkeypatch):
    spy = GenerateSpy(engine)
    monkeypatch.setattr(engine, "generate", spy)
    ticks_during_generation = 0
    done = asyncio.Event()

    async def heartbeat():
        nonlocal ticks_during_generation
        while not done.is_set():
            if spy.running:
                ticks_during_generation += 1
            await asyncio.sleep(0.001)

    hb = asyncio.create_task(heartbeat())
    prompts = [[{"role": "user", "content": f"Name a color. ({i})"}] for i in range(8)]
    results = await asyncio.gather(
        *(engine.agenerate(p, temperature=0.7, max_tokens=6, seed=i) for i, p in enumerate(prompts))
    )
    done.set()
    await hb
    assert len(results) == 8
    assert all(r.completion_tokens >= 1 for r in results)
    assert spy.outcomes == ["returned"] * 8
    # The loop kept turning while the model generated: a generation that blocked the loop could
    # never be seen running by the heartbeat.
    assert ticks_during_generation >= 3


async def test_agenerate_cancellation(engine, monkeypatch):
    spy = GenerateSpy(engine)
    monkeypatch.setattr(engine, "generate", spy)
    task = asyncio.create_task(
        engine.agenerate(
            [{"role": "user", "content": "Write a very long story."}],
            temperature=1.0,
            max_tokens=2000,
            seed=5,
        )
    )
    # Cancel once the generation is running (not while it is still queued).
    for _ in range(3000):
        if spy.started.is_set():
            break
        await asyncio.sleep(0.01)
    assert spy.started.is_set()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    g = await engine.agenerate(HELLO, temperature=0, max_tokens=4)
    assert g.completion_tokens >= 1
    # The cancelled run stopped before finishing its 2000 tokens; the next one ran normally.
    assert spy.outcomes == [GenerationCancelled.__name__, "returned"]


def test_generate_from_threads_is_serialized(engine):
    out: list = []

    def work(i):
        out.append(engine.generate(HELLO, temperature=0, max_tokens=4, return_token_ids=True))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(out) == 3
    assert len({tuple(g.generation_token_ids) for g in out}) == 1


def test_close_is_idempotent():
    eng = LlamaEngine(n_ctx=256, n_threads=1)
    eng.close()
    eng.close()
    with pytest.raises(EngineClosedError):
        eng.generate(HELLO, max_tokens=2)


async def test_aclose_fails_queued_requests():
    eng = LlamaEngine(n_ctx=256, n_threads=1)
    tasks = [asyncio.create_task(eng.agenerate(HELLO, temperature=0, max_tokens=20)) for _ in range(3)]
    await asyncio.sleep(0.05)
    await eng.aclose()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert all(isinstance(r, (Generation, EngineClosedError)) for r in results), results
    assert isinstance(results[-1], EngineClosedError)
    with pytest.raises(EngineClosedError):
        await eng.agenerate(HELLO, max_tokens=2)


# --------------------------------------------------------------------------- tool-call parsing


def test_parse_single_call():
    text = 'Let me check.\n<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
    rest, calls = parse_tool_calls(text)
    assert rest == "Let me check."
    assert calls == [GeneratedToolCall("get_weather", '{"city":"Paris"}')]


def test_parse_multiple_calls():
    text = (
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
        '<tool_call>{"name": "get_time", "arguments": {}}</tool_call>'
    )
    rest, calls = parse_tool_calls(text)
    assert rest == ""
    assert [c.name for c in calls] == ["get_weather", "get_time"]
    assert [json.loads(c.arguments) for c in calls] == [{"city": "Paris"}, {}]


def test_parse_malformed_stays_text():
    bad = [
        '<tool_call>{"name": "get_weather", "arguments": {"city": </tool_call>',
        "<tool_call>not json</tool_call>",
        '<tool_call>{"arguments": {"city": "Paris"}}</tool_call>',
        '<tool_call>{"name": "get_weather", "arguments": [1, 2]}</tool_call>',
    ]
    for text in bad:
        rest, calls = parse_tool_calls(text, [WEATHER_TOOL])
        assert calls == [] and rest == text
    mixed = 'x <tool_call>{oops}</tool_call> <tool_call>{"name": "get_time"}</tool_call>'
    rest, calls = parse_tool_calls(mixed)
    assert calls == [GeneratedToolCall("get_time", "{}")]
    assert rest == "x <tool_call>{oops}</tool_call>"


def test_parse_parameters_key_and_string_arguments():
    rest, calls = parse_tool_calls('<tool_call>{"name": "get_weather", "parameters": {"city": "Oslo"}}</tool_call>')
    assert calls == [GeneratedToolCall("get_weather", '{"city":"Oslo"}')]
    _, calls = parse_tool_calls(
        '<tool_call>{"name": "get_weather", "arguments": "{\\"city\\": \\"Rome\\"}"}</tool_call>'
    )
    assert calls == [GeneratedToolCall("get_weather", '{"city":"Rome"}')]


def test_parse_unclosed_trailing_call_and_list():
    _, calls = parse_tool_calls('<tool_call>{"name": "get_time", "arguments": {}}')
    assert calls == [GeneratedToolCall("get_time", "{}")]
    _, calls = parse_tool_calls(
        '<tool_call>[{"name": "get_time", "arguments": {}}, '
        '{"name": "get_weather", "arguments": {"city": "Lima"}}]</tool_call>'
    )
    assert [c.name for c in calls] == ["get_time", "get_weather"]


def test_parse_bare_json_only_with_tools():
    text = '{"name": "get_weather", "arguments": {"city": "Paris"}}'
    assert parse_tool_calls(text) == (text, [])
    rest, calls = parse_tool_calls(text, [WEATHER_TOOL])
    assert rest == "" and calls == [GeneratedToolCall("get_weather", '{"city":"Paris"}')]
    fenced = '```json\n{"name": "get_weather", "parameters": {"city": "Kyiv"}}\n```'
    assert parse_tool_calls(fenced, [WEATHER_TOOL])[1] == [GeneratedToolCall("get_weather", '{"city":"Kyiv"}')]
    unknown = '{"name": "launch_rocket", "arguments": {}}'
    assert parse_tool_calls(unknown, [WEATHER_TOOL]) == (unknown, [])


def test_parse_plain_text_untouched():
    text = "  Hello there!\n"
    assert parse_tool_calls(text, [WEATHER_TOOL]) == (text, [])


# --------------------------------------------------------------------------- prompt rendering


def test_render_plain_prompt_uses_default_system():
    prompt = render_prompt([{"role": "user", "content": "hi"}])
    assert prompt == (
        f"<|im_start|>system\n{DEFAULT_SYSTEM_PROMPT}<|im_end|>\n"
        "<|im_start|>user\nhi<|im_end|>\n"
        "<|im_start|>assistant\n"
    )


def test_render_prompt_with_tools_and_tool_results():
    messages = [
        {"role": "developer", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "Weather in Paris and the time?"}]},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                },
                {
                    "id": "call_2",
                    "type": "function",
                    "function": {"name": "get_time", "arguments": "{}"},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "18C, sunny"},
        {"role": "tool", "tool_call_id": "call_2", "content": "12:00"},
    ]
    prompt = render_prompt(messages, [WEATHER_TOOL, TIME_TOOL])
    assert prompt.startswith("<|im_start|>system\nBe brief.\n\n# Tools\n")
    assert DEFAULT_SYSTEM_PROMPT not in prompt
    assert json.dumps(WEATHER_TOOL["function"]) in prompt
    assert '"name": "get_time"' in prompt
    assert '<tool_call>{"name": "tool_name", "arguments": {"argument_name": "value"}}</tool_call>' in prompt
    assert "<|im_start|>user\nWeather in Paris and the time?<|im_end|>\n" in prompt
    assert (
        "<|im_start|>assistant\n"
        '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>\n'
        '<tool_call>{"name": "get_time", "arguments": {}}</tool_call><|im_end|>\n'
    ) in prompt
    assert (
        "<|im_start|>user\n<tool_response>\n18C, sunny\n</tool_response>\n"
        "<tool_response>\n12:00\n</tool_response><|im_end|>\n"
    ) in prompt
    assert prompt.endswith("<|im_start|>assistant\n")


def test_rendered_tool_call_round_trips():
    call = GeneratedToolCall("get_weather", '{"city":"Paris"}')
    prompt = render_prompt(
        [
            {"role": "user", "content": "q"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "id": "c",
                        "type": "function",
                        "function": {"name": call.name, "arguments": call.arguments},
                    }
                ],
            },
        ]
    )
    turn = prompt.split("<|im_start|>assistant\n")[1].split("<|im_end|>")[0]
    assert parse_tool_calls(turn) == ("", [call])


def test_multi_turn_reuses_prefix(engine):
    first = engine.generate(HELLO, temperature=0, max_tokens=8)
    follow = HELLO + [
        {"role": "assistant", "content": first.text},
        {"role": "user", "content": "Again, please."},
    ]
    kw = dict(temperature=0.9, seed=7, max_tokens=12, return_token_ids=True, return_logprobs=True)
    second = engine.generate(follow, **kw)
    assert second.cached_prompt_tokens == first.prompt_tokens
    # The cache state never changes the result: same tokens and logprobs as a cold engine.
    with LlamaEngine(n_ctx=2048, n_threads=1, prefix_cache=False) as cold:
        ref = cold.generate(follow, **kw)
    assert ref.cached_prompt_tokens == 0
    assert ref.generation_token_ids == second.generation_token_ids
    assert ref.generation_log_probs == second.generation_log_probs
