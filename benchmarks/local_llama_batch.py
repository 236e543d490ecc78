"""Batched decoding in local_llama: aggregate tokens/s at 1, 4, 8 and 16 concurrent requests.

For each weight format (``file``: SmolLM2's own Q4_1 GGUF; ``q4_0``: the copy converted once into
gym's cache), each level sends that many greedy requests of ``max_tokens`` at once to
``LlamaEngine.agenerate`` in this process (a different story prompt per request) on an engine that
decodes them together (``batch_size`` 16). Before each timed pass the same requests run once with
one token, so every level finds its prompts in the prefix cache: the figure is generation
throughput, not prompt reading (which batching does not share: prompts are decoded alone, see the
engine's docstring). tokens/s is all generated tokens over the wall time of the level, median of the
rounds; ``cpu_tokens_per_s`` divides by the process's CPU time instead (on a shared machine the wall
time also measures the other load). The unbatched engine (``batch_size`` 1) runs the top level too:
its tokens/s, and whether every request got the same tokens from both engines (it must).

``repeats`` (Q4_1 file only): the shape of ``gym collect --repeats 4`` and of a GRPO group. Fresh
prompts (new each round, so no cache helps across rounds), each sent four times at once, sampled at
temperature 0.7 with a seed per request, on as many llama.cpp threads as local_llama serves with by
default; requests/s of the batched engine (whose slots share a prompt's cells: the first repeat
reads it for the others) against the unbatched one (whose prefix cache serves repeats 2-4 as they
queue), and the prompt tokens the batched engine copied instead of decoding.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from typing import Any

# concurrency levels, generated tokens per request, rounds
SIZES = {"tiny": ((1, 2), 8, 1), "small": ((1, 4, 8), 64, 1), "full": ((1, 4, 8, 16), 128, 3)}
# repeats scenario: prompts per round (each sent REPEATS times at once), generated tokens per request, rounds
REPEAT_SIZES = {"tiny": (1, 8, 1), "small": (2, 24, 3), "full": (4, 24, 5)}
REPEATS = 4
INSTRUCTION = (
    "You are a careful math tutor. Read the problem, reason step by step in a few short sentences, "
    "check your arithmetic, and give the final answer alone on the last line as \\boxed{answer}."
)
FORMATS = ("file", "q4_0")
# One llama.cpp thread: its threads spin-wait on each other, so on a shared machine two threads make a
# single request many times slower while a batch hides it: the ratio would measure the load, not batching.
N_THREADS = 1
TOPICS = [
    "a lighthouse keeper",
    "a dragon",
    "a lost city",
    "a robot",
    "the sea",
    "a mountain village",
    "a clockmaker",
    "a comet",
    "a desert caravan",
    "a library",
    "a storm",
    "an old ship",
    "a fox",
    "a glass forest",
    "a train at night",
    "a tea house",
]


def _messages(index: int) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"Write a long story about {TOPICS[index % len(TOPICS)]}."}]


async def _level(engine: Any, concurrency: int, max_tokens: int) -> tuple[float, float, list[list[int]]]:
    """(wall tokens/s, CPU tokens/s, token ids per request) of ``concurrency`` requests sent at once."""
    await asyncio.gather(*(engine.agenerate(_messages(i), temperature=0, max_tokens=1) for i in range(concurrency)))
    await asyncio.sleep(0.5)  # llama.cpp's threads may spin for a while after a run
    wall, cpu = time.perf_counter(), time.process_time()
    generations = await asyncio.gather(
        *(
            engine.agenerate(_messages(i), temperature=0, max_tokens=max_tokens, return_token_ids=True)
            for i in range(concurrency)
        )
    )
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    tokens = sum(g.completion_tokens for g in generations)
    return tokens / wall, tokens / cpu, [g.generation_token_ids for g in generations]


def _problem(round_: int, index: int) -> list[dict[str, str]]:
    a, b = 17 + 31 * round_ + 7 * index, 23 + 13 * index
    return [
        {"role": "system", "content": INSTRUCTION},
        {
            "role": "user",
            "content": f"A shop sells {a} boxes with {b} pencils in each box. How many pencils "
            f"is that, and how many are left if {a + b} are given away?",
        },
    ]


def _repeats(size: str) -> dict[str, Any]:
    from gym_local_llama.engine import LlamaEngine

    prompts, max_tokens, rounds = REPEAT_SIZES[size]
    n = prompts * REPEATS
    # llama.cpp's own thread count, as local_llama serves by default (and the quickstart runs): with
    # two threads a lone sequence pays their per-layer synchronisation, which a batch shares.
    options = {"n_ctx": 512}
    with LlamaEngine(**options, batch_size=n) as batched, LlamaEngine(**options) as unbatched:

        async def one_round(engine: Any, round_: int) -> tuple[float, int]:
            started = time.perf_counter()
            generations = await asyncio.gather(
                *(
                    engine.agenerate(
                        _problem(round_, p), temperature=0.7, seed=1000 * round_ + i, max_tokens=max_tokens
                    )
                    for p in range(prompts)
                    for i in range(REPEATS)
                )
            )
            return n / (time.perf_counter() - started), sum(g.prompt_tokens for g in generations)

        async def measure() -> dict[str, Any]:
            rates: dict[str, list[float]] = {"batched": [], "unbatched": []}
            shared_before, prompt_tokens = batched.batch_stats.shared_prompt_tokens, 0
            for round_ in range(rounds):  # alternating engines, fresh prompts for each engine and round
                rate, tokens = await one_round(batched, 2 * round_)
                rates["batched"].append(rate)
                prompt_tokens += tokens
                rates["unbatched"].append((await one_round(unbatched, 2 * round_ + 1))[0])
            batched_rate, unbatched_rate = statistics.median(rates["batched"]), statistics.median(rates["unbatched"])
            return {
                "prompts": prompts,
                "repeats": REPEATS,
                "max_tokens": max_tokens,
                "rounds": rounds,
                "n_threads": batched.n_threads,
                "batched_requests_per_s": round(batched_rate, 2),
                "unbatched_requests_per_s": round(unbatched_rate, 2),
                "ratio": round(batched_rate / unbatched_rate, 2),
                "prompt_tokens": prompt_tokens,
                "shared_prompt_tokens": batched.batch_stats.shared_prompt_tokens - shared_before,
            }

        return asyncio.run(measure())


def _measure(weight_format: str, levels: tuple[int, ...], max_tokens: int, rounds: int) -> dict[str, Any]:
    from gym_local_llama.engine import LlamaEngine

    options = {"n_ctx": 256 + max_tokens, "n_threads": N_THREADS, "weight_format": weight_format}
    rows: dict[str, dict[str, Any]] = {}
    with LlamaEngine(**options, batch_size=max(levels)) as batched, LlamaEngine(**options) as unbatched:

        async def measure() -> dict[str, Any]:
            together: list[list[int]] = []
            for concurrency in levels:
                stats = batched.batch_stats
                steps, tokens = stats.steps, stats.tokens
                walls, cpus = [], []
                for _ in range(rounds):
                    wall, cpu, together = await _level(batched, concurrency, max_tokens)
                    walls.append(wall)
                    cpus.append(cpu)
                rows[str(concurrency)] = {
                    "batched_tokens_per_s": round(statistics.median(walls), 1),
                    "cpu_tokens_per_s": round(statistics.median(cpus), 1),
                    "mean_sequences_per_step": round((stats.tokens - tokens) / max(1, stats.steps - steps), 2),
                }
            rates = []
            for _ in range(rounds):
                wall, _cpu, alone = await _level(unbatched, levels[-1], max_tokens)
                rates.append(wall)
            return {"unbatched_tokens_per_s": round(statistics.median(rates), 1), "identical_tokens": together == alone}

        top = asyncio.run(measure())
        weights = batched.weights_path.name
    single = rows[str(levels[0])]
    for row in rows.values():
        row["vs_single"] = round(row["batched_tokens_per_s"] / single["batched_tokens_per_s"], 2)
        row["cpu_vs_single"] = round(row["cpu_tokens_per_s"] / single["cpu_tokens_per_s"], 2)
    return {"weights": weights, "levels": rows, **top}


def run(size: str) -> dict[str, Any]:
    levels, max_tokens, rounds = SIZES[size]
    return {
        "max_tokens": max_tokens,
        "rounds": rounds,
        "n_threads": N_THREADS,
        "top_level": levels[-1],
        "formats": {fmt: _measure(fmt, levels, max_tokens, rounds) for fmt in FORMATS},
        "repeats": _repeats(size),
    }
