"""Scale: 100,000 rollouts in flight at once through real servers; all complete, peak memory of each
process, and the resources server's session store back where it started.

The collector starts every rollout at once (``parallel`` = n); the scripted model answers each call
after 1 s, so they overlap. Each ``/run`` the agent holds is one connection, a file descriptor in the
collector and in the agent, so the collector's pool to the agent is as large as the open-files limit
and the agent's listen queue allow (:func:`connections_to_agent`): the agent holds that many
rollouts, the others wait in the collector's pool. The agent reaches the model and the environment
through its own pools (gym's default: 1,000 connections per server), where its rollouts queue for
their model calls.

Evidence of what was in flight: the collector's peak count of started, unfinished rollouts, the
agent's peak open file descriptors, and the peak number of sessions the resources server held
(``GET /ready`` reports it). After a warm-up at the same concurrency in the agent, the session counts
and the resources server's resident memory are read before and after the run.
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from gym_core import ClientConfig, ServerCallError, ServerClient
from gym_core.process_tuning import raise_open_files_limit

from benchmarks._common import COUNTER_TASKS, cpu_seconds, gym_servers, peak_rss_mb, rss_mb
from gym_cli.rollouts import run_async

SIZES = {"tiny": 200, "small": 2_000, "full": 100_000}
TURNS = [{"tool_calls": [{"name": "increment_counter", "arguments": {"count": 3}}]}, {"text": "added 3"}]
# Descriptors kept for everything but the collector's connections to the agent: the agent's pools to
# the model and the environment (1,000 each), the harness's and the servers' own files and sockets.
FD_RESERVE = 4_000
# gym servers listen with a backlog of 4,096 (gym_core.serving.uvicorn_config), capped by the kernel.
BACKLOG = 4_096
SERVERS = ("agent", "counter", "policy_model")


def connections_to_agent(n: int) -> int:
    """How many of ``n`` rollouts the agent holds at once: one connection each, so one descriptor in
    the collector and in the agent (both have the soft limit this process raises to its hard limit),
    and no more than the agent's listen queue holds: the collector opens them all at once, and a
    connection the queue has no room for is dropped until the agent accepts (a busy agent may take
    longer than the 10 s connect timeout)."""
    try:
        backlog = min(BACKLOG, int(Path("/proc/sys/net/core/somaxconn").read_text()))
    except (OSError, ValueError):
        backlog = BACKLOG
    return max(1, min(n, backlog, raise_open_files_limit() - FD_RESERVE))


async def _sessions(client: ServerClient) -> dict[str, int]:
    """The sessions each server holds now (``GET /ready``)."""
    return {name: (await client.get(name, "/ready"))["sessions"] for name in SERVERS}


async def collect_counter_rollouts(
    head_url: str,
    n: int,
    parallel: int | None = None,
    *,
    connections: int | None = None,
    rollout_timeout_s: float | None = None,
    watch: bool = False,
) -> dict[str, Any]:
    """``n`` counter rollouts through the agent of the run at ``head_url``, ``parallel`` (default: all)
    in flight at once, by ``gym collect``'s own collector, with its client settings (one attempt per
    request; whole rollouts retried, within ``rollout_timeout_s``, default ``gym collect``'s) and at
    most ``connections`` (default: ``n``) to the agent. With ``watch``, also the peak rollouts in
    flight and sessions held, and the sessions before and after."""
    from gym_cli.rollouts import CollectOptions, CollectSummary, collect_rollouts, read_tasks

    tasks = read_tasks(COUNTER_TASKS)
    repeats = -(-n // len(tasks))
    pairs = [(t, r) for r in range(repeats) for t in range(len(tasks))][:n]
    peaks = {"in_flight": 0, "counter_sessions": 0}
    result: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out.jsonl"
        options = CollectOptions(out, Path(tmp) / "failures.jsonl", "agent", repeats, parallel=parallel or n)
        if rollout_timeout_s:
            options.rollout_timeout_s = rollout_timeout_s
        summary = CollectSummary(total=n)
        timeout = options.rollout_timeout_s  # as `gym collect` sets its client
        config = ClientConfig(
            timeout_s=timeout, max_attempts=1, deadline_s=timeout, pool_limit_per_host=connections or n
        )
        client = await ServerClient.from_head(head_url, config=config)

        async def sample() -> None:
            while True:
                peaks["in_flight"] = max(peaks["in_flight"], summary.in_flight)
                if summary.in_flight:  # a request in the queue would not say how many are held right now
                    try:
                        held = (await client.get("counter", "/ready", timeout_s=30))["sessions"]
                        peaks["counter_sessions"] = max(peaks["counter_sessions"], held)
                    except ServerCallError:  # a sample lost under load is not an error of the run
                        pass
                await asyncio.sleep(0.2)

        if watch:
            result["sessions_before"] = await _sessions(client)
            sampler = asyncio.create_task(sample())
        start = time.perf_counter()
        try:
            await collect_rollouts(client, tasks, pairs, options, summary)
        finally:
            elapsed = time.perf_counter() - start
            if watch:
                sampler.cancel()
        written = len(out.read_bytes().splitlines())
        failures = [json.loads(line) for line in options.failures.read_bytes().splitlines()[:1000]]
        if watch:
            result["sessions_after"] = await _sessions(client)
        await client.close()
    result.update(
        {
            "completed": summary.done,
            "written": written,
            "errors": summary.failed,
            "retried": summary.retried,
            "failure_reasons": summary.failure_reasons,
            "failure_examples": sorted({f["message"][:300] for f in failures})[:5],
            "seconds": round(elapsed, 2),
            "rollouts_per_s": round(summary.done / elapsed, 1) if elapsed else None,
        }
    )
    if watch:
        result["peak_in_flight"] = peaks["in_flight"]
        result["peak_counter_sessions"] = peaks["counter_sessions"]
    return result


def run(size: str) -> dict[str, Any]:
    n = SIZES[size]
    connections = connections_to_agent(n)  # raises this process's limit: the servers inherit it
    config = {
        "counter": {"plugin": "counter"},
        # Each model call waits 1 s, so all n rollouts are in flight together.
        "policy_model": {"plugin": "scripted", "turns": TURNS, "delay_s": 1.0},
        "agent": {"plugin": "simple_agent", "model_server": "policy_model", "resources_server": "counter"},
    }
    with gym_servers(config) as state:
        pids = state.supervisor.pids()
        peak_fds = {"agent": 0}
        done = threading.Event()

        def sample() -> None:
            while not done.wait(1.0):  # listing 10,000s of descriptors is not free
                try:
                    peak_fds["agent"] = max(peak_fds["agent"], len(os.listdir(f"/proc/{pids['agent']}/fd")))
                except OSError:
                    pass

        # Warm-up at the run's concurrency in the agent: connection pools, allocator arenas and the
        # session store grow to their working size, so that "before" and "after" compare like with like.
        run_async(collect_counter_rollouts(state.config.head_url, connections, connections=connections))
        counter_rss_before = rss_mb(pids["counter"]) or 0
        cpu_before = {name: cpu_seconds([pid]) - time.process_time() for name, pid in pids.items()}
        cpu_before["collector"] = time.process_time()
        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        try:
            result = run_async(
                collect_counter_rollouts(
                    # gym collect's default deadline: it counts from a rollout's first request, not
                    # from its wait for one of the connections (the last ones wait most of the run).
                    state.config.head_url,
                    n,
                    connections=connections,
                    watch=True,
                )
            )
        finally:
            done.set()
            sampler.join()
        counter_rss_after = rss_mb(pids["counter"]) or 0
        cpu_s = {
            name: round(cpu_seconds([pid]) - time.process_time() - cpu_before[name], 1) for name, pid in pids.items()
        }
        memory = {name: round(peak_rss_mb(pid) or 0, 1) for name, pid in pids.items()}
    memory["collector"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    cpu_s["collector"] = round(time.process_time() - cpu_before["collector"], 1)  # the run's, as the servers'
    return {
        "in_flight": n,
        **result,
        "connections_to_agent": connections,
        "agent_peak_open_fds": peak_fds["agent"],
        "counter_rss_mb": {
            "before": round(counter_rss_before, 1),
            "peak": memory["counter"],
            "after": round(counter_rss_after, 1),
        },
        "peak_rss_mb": memory,
        "cpu_s": cpu_s,
    }
