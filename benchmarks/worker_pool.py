"""Worker-pool overhead: what a call through ``gym_core.workers.WorkerPool`` costs on top of the work.

Three figures, medians of repeated batches on warm workers: an async call of a trivial function
(``operator.add``: the round trip alone), a blocking call of the same, and ``gym_math``'s
``verify_answer`` on an answer that needs a worker (``3.0`` against ``3``); plus how long replacing a
killed worker takes (a call past its time limit, minus the limit).
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import operator
import statistics
import time
from typing import Any

from gym_core.workers import WorkerPool, WorkerTimeout

SIZES = {"tiny": (50, 3), "small": (200, 5), "full": (1000, 9)}
TIME_LIMIT_S = 0.2


def run(size: str) -> dict[str, Any]:
    calls, repeats = SIZES[size]
    result: dict[str, Any] = {"calls_per_batch": calls}
    with WorkerPool(1, time_limit_s=10.0, memory_limit_mb=None) as pool:
        pool.start_blocking()

        async def async_batch() -> float:
            start = time.perf_counter()
            for _ in range(calls):
                await pool.run(operator.add, 1, 2)
            return (time.perf_counter() - start) / calls

        def blocking_batch() -> float:
            start = time.perf_counter()
            for _ in range(calls):
                pool.run_blocking(operator.add, 1, 2)
            return (time.perf_counter() - start) / calls

        result["async_call_ms"] = _ms(statistics.median(asyncio.run(async_batch()) for _ in range(repeats)))
        result["blocking_call_ms"] = _ms(statistics.median(blocking_batch() for _ in range(repeats)))

        replace: list[float] = []
        for _ in range(repeats):
            start = time.perf_counter()
            try:
                pool.run_blocking(collections.deque, itertools.count(), 0, time_limit_s=TIME_LIMIT_S)
            except WorkerTimeout:
                pass
            pool.run_blocking(operator.add, 1, 2)  # served by the replacement
            replace.append(time.perf_counter() - start - TIME_LIMIT_S)
        result["kill_and_replace_ms"] = _ms(statistics.median(replace))

    try:
        from gym_math.verify import make_verifier_pool, verify_answer
    except ImportError:  # gym-math not installed
        return result
    with make_verifier_pool(1) as pool:
        pool.start_blocking()

        def verify_batch() -> float:
            start = time.perf_counter()
            for _ in range(calls):
                verify_answer(r"\boxed{3.0}", "3", pool=pool)
            return (time.perf_counter() - start) / calls

        result["math_verify_call_ms"] = _ms(statistics.median(verify_batch() for _ in range(repeats)))
    return result


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 3)


if __name__ == "__main__":
    import json
    import sys

    print(json.dumps(run(sys.argv[1] if len(sys.argv) > 1 else "small"), indent=2))
