"""The collector of ``scale_100k`` as its own process, so that its peak memory is its own.

``python -m benchmarks._scale_collector TASKS OUT AGENT_URL PARALLEL DEADLINE_S``: ``gym collect``'s collector
(:func:`gym_cli.rollouts.collect_rollouts` over :func:`gym_cli.rollouts.scan_tasks`, the client
settings ``gym collect`` uses, ``--rollout-timeout DEADLINE_S``) runs one rollout of every task with
``PARALLEL`` in flight, then
prints one JSON object: its peak resident memory (VmHWM), its memory before the run, the peak
rollouts in flight and waiting, the counts and the seconds. Run with another checkout's
``gym-cli/src`` and ``gym-core/src`` first on PYTHONPATH, it measures that checkout's collector."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any


def _status_mb(key: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


async def _collect(tasks_path: Path, out: Path, url: str, parallel: int, deadline_s: float) -> dict[str, Any]:
    from gym_core import ClientConfig, ServerClient

    from gym_cli import rollouts
    from gym_cli.rollouts import CollectOptions, CollectSummary, collect_rollouts, scan_tasks

    options = CollectOptions(
        out, out.with_name(out.stem + ".failures.jsonl"), "agent", parallel=parallel, rollout_timeout_s=deadline_s
    )
    timeout = options.rollout_timeout_s
    config = ClientConfig(timeout_s=timeout, max_attempts=1, deadline_s=timeout)  # gym collect's (head.connect)
    peaks = {"in_flight": 0, "queued": 0}
    with scan_tasks(tasks_path) as tasks:
        n = len(tasks)
        summary = CollectSummary(total=n)
        rss_before = _status_mb("VmRSS")

        async def sample() -> None:
            while True:
                peaks["in_flight"] = max(peaks["in_flight"], summary.in_flight)
                peaks["queued"] = max(peaks["queued"], getattr(summary, "queued", 0))
                await asyncio.sleep(0.1)

        sampler = asyncio.create_task(sample())
        start = time.perf_counter()
        async with ServerClient(urls={"agent": url}, config=config) as client:
            await collect_rollouts(client, tasks, ((t, 0) for t in range(n)), options, summary)
        elapsed = time.perf_counter() - start
        sampler.cancel()
    queue = getattr(summary, "queue", None)
    return {
        "rollouts": n,
        "parallel": parallel,
        "done": summary.done,
        "failed": summary.failed,
        "failure_reasons": summary.failure_reasons,
        "seconds": round(elapsed, 1),
        "rollouts_per_s": round(summary.done / elapsed, 1),
        "rss_before_mb": rss_before,
        "peak_rss_mb": _status_mb("VmHWM"),
        "peak_in_flight": peaks["in_flight"],
        "peak_queued": peaks["queued"] if hasattr(summary, "queued") else None,
        "latency_p50_s": summary.latency.quantile(0.5),
        "latency_p99_s": summary.latency.quantile(0.99),
        "queue_p50_s": queue.quantile(0.5) if queue is not None else None,
        "queue_p99_s": queue.quantile(0.99) if queue is not None else None,
        "written": sum(1 for _ in out.open("rb")),
        "collector_source": rollouts.__file__,  # which checkout's collector ran
    }


def main() -> None:
    from gym_cli.rollouts import run_async  # uvloop, the collector's GC tuning and open-files limit

    tasks, out, url, parallel, deadline_s = sys.argv[1:6]
    print(json.dumps(run_async(_collect(Path(tasks), Path(out), url, int(parallel), float(deadline_s)))))


if __name__ == "__main__":
    main()
