"""Model-server overhead: local_llama's tokens/s through the framework against the engine in-process.

Same prompt, greedy decoding, same token budget: both paths generate the same tokens. Through the
framework: a client calls the model server's /v1/chat/completions over HTTP (a real server
process). Direct: ``LlamaEngine.generate`` in this process, before the server starts. Medians.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from typing import Any

from gym_core import ServerClient

from benchmarks._common import gym_servers

MESSAGES = [{"role": "user", "content": "Write a long story about a lighthouse keeper and the sea."}]
SIZES = {"tiny": (32, 1), "small": (128, 3), "full": (256, 5)}


def run(size: str) -> dict[str, Any]:
    from gym_local_llama.engine import LlamaEngine

    max_tokens, repeats = SIZES[size]
    body = {"messages": MESSAGES, "temperature": 0, "max_tokens": max_tokens}
    served: list[float] = []
    direct: list[float] = []
    tokens: set[int] = set()
    # Direct first, then through the framework, never both at once: llama.cpp's worker threads keep
    # spinning for a while after a run and would slow whichever runs next to them.
    engine = LlamaEngine()
    engine.generate(MESSAGES, temperature=0, max_tokens=4)  # warm
    for _ in range(repeats):
        start = time.perf_counter()
        generation = engine.generate(MESSAGES, temperature=0, max_tokens=max_tokens)
        direct.append(generation.completion_tokens / (time.perf_counter() - start))
        tokens.add(generation.completion_tokens)
    engine.close()
    del engine
    with gym_servers({"policy_model": {"plugin": "local_llama"}}) as state:

        async def through_framework() -> None:
            async with ServerClient(state.config) as client:
                await client.post("policy_model", "/v1/chat/completions", {**body, "max_tokens": 4})  # warm
                for _ in range(repeats):
                    start = time.perf_counter()
                    answer = await client.post("policy_model", "/v1/chat/completions", body)
                    n = answer["usage"]["completion_tokens"]
                    served.append(n / (time.perf_counter() - start))
                    tokens.add(n)

        asyncio.run(through_framework())
    served_tps, direct_tps = statistics.median(served), statistics.median(direct)
    return {
        "completion_tokens": sorted(tokens),
        "framework_tokens_per_s": round(served_tps, 1),
        "direct_tokens_per_s": round(direct_tps, 1),
        "overhead_pct": round(100 * (1 - served_tps / direct_tps), 2),
    }
