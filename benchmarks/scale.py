"""Scale: 10,000 rollouts in flight at once through real servers; all complete, peak memory of each process."""

from __future__ import annotations

import asyncio
import resource
import tempfile
import time
from pathlib import Path
from typing import Any

from gym_core import ClientConfig, ServerClient

from gym_cli._collector import run_async

from benchmarks._common import COUNTER_TASKS, gym_servers, peak_rss_mb

SIZES = {"tiny": 200, "small": 2_000, "full": 10_000}
TURNS = [{"tool_calls": [{"name": "increment_counter", "arguments": {"count": 3}}]}, {"text": "added 3"}]


async def _collect(head_url: str, n: int) -> dict[str, Any]:
    from gym_cli._collector import CollectOptions, CollectSummary, collect_rollouts, read_tasks

    tasks = read_tasks(COUNTER_TASKS)
    repeats = -(-n // len(tasks))
    pairs = [(t, r) for r in range(repeats) for t in range(len(tasks))][:n]
    client = await ServerClient.from_head(head_url, config=ClientConfig(timeout_s=600, max_attempts=3))
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out.jsonl"
        options = CollectOptions(out, Path(tmp) / "failures.jsonl", "agent", repeats, parallel=n)
        summary = CollectSummary(total=n)
        start = time.perf_counter()
        await collect_rollouts(client, tasks, pairs, options, summary)
        elapsed = time.perf_counter() - start
        written = len(out.read_bytes().splitlines())
    await client.close()
    return {"completed": summary.done, "written": written, "errors": summary.failed, "seconds": round(elapsed, 2)}


def run(size: str) -> dict[str, Any]:
    n = SIZES[size]
    config = {
        "counter": {"plugin": "counter"},
        # Each model call waits 1 s, so all n rollouts are in flight together.
        "policy_model": {"plugin": "scripted", "turns": TURNS, "delay_s": 1.0},
        "agent": {"plugin": "simple_agent", "model_server": "policy_model", "resources_server": "counter"},
    }
    with gym_servers(config) as state:
        result = run_async(_collect(state.config.head_url, n))
        memory = {name: round(peak_rss_mb(pid) or 0, 1) for name, pid in state.supervisor.pids().items()}
    memory["collector"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    return {"in_flight": n, **result, "peak_rss_mb": memory}
