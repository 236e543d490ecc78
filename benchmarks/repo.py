"""The ``repo`` environment: a sandboxed command's round trip, a verification, task generation.

- **command round trip**: the path of ``run_command`` without HTTP (``RepoServer._command``): the
  workspace of a generated task copied into the sandbox, ``true`` run there under ``sh``, the
  workspace's new state read back. Three ways in alternating rounds: a bare ``sh -c true``
  subprocess (asyncio, streams piped), the server with ``sandbox_pool`` (the default: a fork in a
  long-lived sandboxed worker) and without (a bwrap sandbox per command). The overhead is the
  difference of the p50 latencies over the bare subprocess (issue 27's goal: under 25 ms).
- **verify**: ``RepoServer.run_tests`` over a generated task's repository with its hidden tests
  placed, every test of ``tests_to_fix`` and ``tests_to_keep`` (what ``/verify`` runs).
- **generation**: ``gym repo-tasks generate``'s generator (concurrency 2), tasks per minute.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from typing import Any

from benchmarks._common import percentile

# command round trips per way per round, rounds, verifications, tasks generated
SIZES = {"tiny": (5, 1, 1, 2), "small": (20, 3, 5, 10), "full": (60, 5, 10, 50)}


async def _server(pool: bool):
    from gym_repo.config import RepoConfig
    from gym_repo.server import RepoServer

    server = RepoServer(RepoConfig(sandbox_pool=pool, max_concurrency=2), name=f"repo-{'pool' if pool else 'run'}")
    await server.startup()
    return server


async def _measure(n: int, rounds: int, verifications: int, generated: int) -> dict[str, Any]:
    from gym_repo.generate import generate_tasks
    from gym_repo.workspace import load_repository

    [task] = await generate_tasks(1, seed=0)
    servers = {"pool": await _server(True), "sandbox": await _server(False)}
    try:
        states = {
            way: {
                "workspace": load_repository(task["repository"], max_bytes=s.max_bytes),
                "command_time_s": 0.0,
                "commands": 0,
            }
            for way, s in servers.items()
        }

        async def bare() -> None:
            proc = await asyncio.create_subprocess_exec(
                "/bin/sh",
                "-c",
                "true",
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
            await proc.communicate(b"")
            assert proc.returncode == 0

        def command(way: str):
            async def one() -> None:
                states[way]["command_time_s"] = 0.0
                snap, _ = await servers[way]._command(states[way], "true")
                assert snap.exit_code == 0

            return one

        ways = {"bare": bare, "pool": command("pool"), "sandbox": command("sandbox")}
        for one in ways.values():  # warm up: the pool's worker starts, the interpreter's caches fill
            await one()
        latencies: dict[str, list[float]] = {way: [] for way in ways}
        for _ in range(rounds):  # alternate, so that load on the shared machine hits every way alike
            for way, one in ways.items():
                for _ in range(n):
                    start = time.perf_counter()
                    await one()
                    latencies[way].append(time.perf_counter() - start)
        trip = {
            way: {
                "p50_ms": round((percentile(lat, 50) or 0.0) * 1000, 1),
                "p99_ms": round((percentile(lat, 99) or 0.0) * 1000, 1),
            }
            for way, lat in latencies.items()
        }
        bare_p50 = trip["bare"]["p50_ms"]
        out: dict[str, Any] = {
            "round_trips": n,
            "rounds": rounds,
            "files": len(task["repository"]),
            "round_trip": trip,
            "pool_overhead_ms": round(trip["pool"]["p50_ms"] - bare_p50, 1),
            "sandbox_overhead_ms": round(trip["sandbox"]["p50_ms"] - bare_p50, 1),
            "goal_overhead_ms": 25,
        }

        server = servers["pool"]
        final = load_repository({**task["repository"], **task["hidden_tests"]}, max_bytes=server.max_bytes)
        ids = [*task["tests_to_fix"], *task["tests_to_keep"]]
        verify_s: list[float] = []
        for _ in range(verifications):
            start = time.perf_counter()
            results = await server.run_tests(final.copy(), ids)
            verify_s.append(time.perf_counter() - start)
            assert sum(r.passed for r in results.values()) == len(task["tests_to_keep"]), results
        out["verify"] = {
            "tests": len(ids),
            "runs": verifications,
            "median_s": round(statistics.median(verify_s), 3),
            "max_s": round(max(verify_s), 3),
        }
    finally:
        for s in servers.values():
            await s.shutdown()

    start = time.perf_counter()
    tasks = await generate_tasks(generated, seed=1, concurrency=2)
    seconds = time.perf_counter() - start
    out["generate"] = {
        "tasks": len(tasks),
        "seconds": round(seconds, 1),
        "per_min": round(len(tasks) / seconds * 60, 1),
    }
    return out


def run(size: str) -> dict[str, Any]:
    return asyncio.run(_measure(*SIZES[size]))


if __name__ == "__main__":
    import json
    import sys

    print(json.dumps(run(sys.argv[1] if len(sys.argv) > 1 else "small"), indent=2))
