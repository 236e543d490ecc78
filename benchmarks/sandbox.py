"""Sandbox throughput: executions per second of a trivial program, and the overhead over a bare subprocess.

The same trivial Python program (``pass``; the same interpreter, ``-I -B``, start-up included) runs
``n`` times at concurrency 1 and 8, two ways in alternating rounds: as a bare subprocess (asyncio,
stdin/stdout/stderr piped, as the sandbox pipes them) and through ``gym_core.sandbox.Sandbox``
(bwrap namespaces, rlimits, the program's file placed in its scratch directory). Reported per
concurrency: executions/s and p50/p99 latency of each way, and the overhead per execution (the
difference of the p50 latencies at concurrency 1).
"""

from __future__ import annotations

import asyncio
import statistics
import time
from typing import Any

from gym_core.sandbox import Sandbox, SandboxLimits

from benchmarks._common import percentile

SIZES = {"tiny": (20, 1), "small": (100, 3), "full": (300, 5)}
CONCURRENCY = (1, 8)


async def _batch(n: int, concurrency: int, one) -> tuple[float, list[float]]:
    latencies: list[float] = []
    left = n

    async def worker() -> None:
        nonlocal left
        while left > 0:
            left -= 1
            start = time.perf_counter()
            await one()
            latencies.append(time.perf_counter() - start)

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return time.perf_counter() - start, latencies


async def _measure(n: int, rounds: int) -> dict[str, Any]:
    box = Sandbox(max_concurrency=max(CONCURRENCY))
    await box.start()
    limits = SandboxLimits(wall_time_s=30)

    async def sandboxed() -> None:
        result = await box.run_python("pass", limits=limits)
        assert result.ok, result

    async def bare() -> None:
        proc = await asyncio.create_subprocess_exec(
            box.interpreter,
            "-I",
            "-B",
            "-c",
            "pass",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        await proc.communicate(b"")
        assert proc.returncode == 0

    out: dict[str, Any] = {"executions": n, "rounds": rounds}
    for concurrency in CONCURRENCY:
        figures: dict[str, dict[str, list[float]]] = {
            "bare": {"rate": [], "lat": []},
            "sandbox": {"rate": [], "lat": []},
        }
        for _ in range(rounds):  # alternate, so that load on the shared machine hits both alike
            for name, one in (("bare", bare), ("sandbox", sandboxed)):
                seconds, latencies = await _batch(n, concurrency, one)
                figures[name]["rate"].append(n / seconds)
                figures[name]["lat"] += latencies
        out[str(concurrency)] = {
            name: {
                "per_s": round(statistics.median(f["rate"]), 1),
                "p50_ms": round(percentile(f["lat"], 50) * 1000, 1),
                "p99_ms": round(percentile(f["lat"], 99) * 1000, 1),
            }
            for name, f in figures.items()
        }
    one = out["1"]
    out["overhead_ms"] = round(one["sandbox"]["p50_ms"] - one["bare"]["p50_ms"], 1)
    return out


def run(size: str) -> dict[str, Any]:
    n, rounds = SIZES[size]
    return asyncio.run(_measure(n, rounds))


if __name__ == "__main__":
    import json
    import sys

    print(json.dumps(run(sys.argv[1] if len(sys.argv) > 1 else "small"), indent=2))
