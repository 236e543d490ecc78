"""Model-server overhead: local_llama's tokens/s through the framework against the engine in-process.

Same prompt, greedy decoding, same token budget: both paths generate the same tokens. Through the
framework: a client calls the model server's ``/v1/responses`` over HTTP (a real server process),
the endpoint agents call: Responses → chat conversion, the engine, and back; generated tokens from
``usage.output_tokens``. Direct: ``LlamaEngine.generate`` in this process. Runs alternate, one second
apart; medians.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from typing import Any

from gym_core import ServerClient

from benchmarks._common import gym_servers

MESSAGES = [{"role": "user", "content": "Write a long story about a lighthouse keeper and the sea."}]
SIZES = {"tiny": (32, 1), "small": (128, 3), "full": (256, 9)}


def run(size: str) -> dict[str, Any]:
    from gym_local_llama.engine import LlamaEngine

    max_tokens, repeats = SIZES[size]
    body = {"input": MESSAGES, "temperature": 0, "max_output_tokens": max_tokens}
    served: list[float] = []
    direct: list[float] = []
    tokens: set[int] = set()
    engine = LlamaEngine()
    with gym_servers({"policy_model": {"plugin": "local_llama"}}) as state:

        async def through_framework(client: ServerClient) -> None:
            start = time.perf_counter()
            answer = await client.post("policy_model", "/v1/responses", body)
            n = answer["usage"]["output_tokens"]
            served.append(n / (time.perf_counter() - start))
            tokens.add(n)

        def in_process() -> None:
            start = time.perf_counter()
            generation = engine.generate(MESSAGES, temperature=0, max_tokens=max_tokens)
            direct.append(generation.completion_tokens / (time.perf_counter() - start))
            tokens.add(generation.completion_tokens)

        async def alternate() -> None:
            # Alternating runs share the machine's drift; the pauses let llama.cpp's worker threads,
            # which spin for a while after each run, go idle before the other side runs.
            async with ServerClient(state.config) as client:
                await client.post("policy_model", "/v1/responses", {**body, "max_output_tokens": 4})  # warm
                engine.generate(MESSAGES, temperature=0, max_tokens=4)
                for _ in range(repeats):
                    await asyncio.sleep(1)
                    in_process()
                    await asyncio.sleep(1)
                    await through_framework(client)

        asyncio.run(alternate())
    engine.close()
    served_tps, direct_tps = statistics.median(served), statistics.median(direct)
    return {
        "completion_tokens": sorted(tokens),
        "framework_tokens_per_s": round(served_tps, 1),
        "direct_tokens_per_s": round(direct_tps, 1),
        "overhead_pct": round(100 * (1 - served_tps / direct_tps), 2),
    }
