"""Throughput with replicas: the counter environment behind 1, 2 and 4 replicas, and what routing costs.

One launch holds every level side by side: ``counter1`` (1 replica), ``counter2`` (2), ``counter4`` (4),
each with a ``simple_agent`` of its own (``agent1``...) and one shared scripted model that answers at
once. For small and full the launch is on a local Ray cluster (``ray: {num_cpus: <replicas>}``), each
counter replica in a Ray actor reserving one CPU. Tiny (the harness test) starts no Ray and runs the
2-replica level only, its replicas local processes: a wrong route fails rollouts (a replica refuses
another's sessions), and the microbenchmark below runs in full.

Per level, ``gym collect``'s own collector runs the rollouts at a fixed concurrency (the same for every
level; levels alternate within each round, the round with the median throughput is kept): rollouts/s
and the p50/p99 of the agent's ``/run`` (one rollout each). How evenly sessions spread: each replica's
open sessions (``GET /ready``) sampled through the round, and each replica's CPU seconds.

Routing: ``ServerClient.route`` (what every call of a rollout to a replicated server goes through:
``gym_core.routing``'s rendezvous hash of the rollout key) per call, for 1, 2, 4 and 16 replicas,
against one loopback round trip (``GET /health`` through the same client); and the spread of many
fresh rollout keys over those replicas.
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from gym_core import ClientConfig, ServerCallError, ServerClient
from gym_core.config import GlobalConfig
from gym_core.routing import ROLLOUT_COOKIE, new_rollout_key

from benchmarks._common import COUNTER_TASKS, TimedClient, cpu_seconds, gym_servers, median_round, percentile
from gym_cli.rollouts import run_async

TURNS = [{"tool_calls": [{"name": "increment_counter", "arguments": {"count": 3}}]}, {"text": "added 3"}]
ROUTE_REPLICAS = (1, 2, 4, 16)
SAMPLE_EVERY_S = 0.05  # each replica's open sessions, read through a round


@dataclass(frozen=True)
class Size:
    ray: bool
    levels: tuple[int, ...]  # replicas of the counter
    rollouts: int  # per level and round
    concurrency: int
    rounds: int
    route_calls: int  # timed calls of the router, per replica count
    spread_keys: int  # fresh rollout keys routed to measure the spread
    round_trips: int  # timed loopback requests


SIZES = {
    "tiny": Size(
        ray=False,
        levels=(2,),
        rollouts=60,
        concurrency=4,
        rounds=1,
        route_calls=2_000,
        spread_keys=4_000,
        round_trips=50,
    ),
    "small": Size(
        ray=True,
        levels=(1, 2, 4),
        rollouts=400,
        concurrency=32,
        rounds=1,
        route_calls=50_000,
        spread_keys=100_000,
        round_trips=500,
    ),
    "full": Size(
        ray=True,
        levels=(1, 2, 4),
        rollouts=2_000,
        concurrency=32,
        rounds=3,
        route_calls=200_000,
        spread_keys=400_000,
        round_trips=2_000,
    ),
}


def servers_config(size: Size) -> dict[str, Any]:
    """Every level's counter and agent, and the shared scripted model (instant answers)."""
    config: dict[str, Any] = {"policy_model": {"plugin": "scripted", "turns": TURNS}}
    for n in size.levels:
        counter: dict[str, Any] = {"plugin": "counter", "replicas": n}
        if size.ray:
            counter["resources"] = {"num_cpus": 1}  # one logical CPU per replica: placement as on a real cluster
        config[f"counter{n}"] = counter
        config[f"agent{n}"] = {
            "plugin": "simple_agent",
            "model_server": "policy_model",
            "resources_server": f"counter{n}",
        }
    if size.ray:
        config["ray"] = {"num_cpus": sum(size.levels), "placement_timeout_s": 300}
    return config


def _replica_pids(pids: dict[str, int], instance: str) -> list[int]:
    """The pids of ``instance``'s processes in replica order (``counter2#0``, ``counter2#1``...)."""
    named = {name: pid for name, pid in pids.items() if name == instance or name.startswith(instance + "#")}
    return [named[name] for name in sorted(named, key=lambda name: int(name.partition("#")[2] or 0))]


async def _round(client: TimedClient, tasks: list[Any], n: int, size: Size, pids: list[int]) -> dict[str, Any]:
    """``size.rollouts`` rollouts through ``agent{n}`` at ``size.concurrency``, with each replica's
    sampled open sessions and CPU seconds."""
    from gym_cli.rollouts import CollectOptions, CollectSummary, collect_rollouts

    urls = client.replica_urls(f"counter{n}")
    held = [0] * len(urls)
    samples = 0

    async def sample() -> None:
        nonlocal samples
        while True:
            await asyncio.sleep(SAMPLE_EVERY_S)
            try:
                counts = await asyncio.gather(*(client.get(url, "/ready", timeout_s=10) for url in urls))
            except ServerCallError:  # a sample lost under load is not an error of the run
                continue
            for i, body in enumerate(counts):
                held[i] += body["sessions"]
            samples += 1

    client.latencies = []
    pairs = [(i % len(tasks), i // len(tasks)) for i in range(size.rollouts)]
    with tempfile.TemporaryDirectory() as tmp:
        options = CollectOptions(
            Path(tmp) / "out.jsonl", Path(tmp) / "failures.jsonl", f"agent{n}", 1, size.concurrency
        )
        summary = CollectSummary(total=size.rollouts)
        own = time.process_time()
        cpu_before = [cpu_seconds([pid]) - own for pid in pids]
        sampler = asyncio.create_task(sample())
        start = time.perf_counter()
        try:
            await collect_rollouts(client, tasks, pairs, options, summary)
        finally:
            elapsed = time.perf_counter() - start
            sampler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sampler
        own = time.process_time()
        cpu = [round(cpu_seconds([pid]) - own - before, 2) for pid, before in zip(pids, cpu_before)]
        written = len((Path(tmp) / "out.jsonl").read_bytes().splitlines())
    total_held = sum(held)
    return {
        "replicas": n,
        "rollouts": size.rollouts,
        "written": written,
        "errors": summary.failed,
        "seconds": round(elapsed, 3),
        "rollouts_per_s": round(summary.done / elapsed, 1),
        "p50_ms": round(1000 * (percentile(client.latencies, 50) or 0), 2),
        "p99_ms": round(1000 * (percentile(client.latencies, 99) or 0), 2),
        # The share of the sampled open sessions each replica held: how the rollouts spread over them.
        "session_share": [round(h / total_held, 3) if total_held else None for h in held],
        "session_samples": samples,
        "replica_cpu_s": cpu,
    }


async def _loopback_us(client: ServerClient, server: str, calls: int) -> float:
    """The median of ``calls`` sequential ``GET /health`` round trips to ``server``, in µs."""
    times = []
    for _ in range(calls):
        start = time.perf_counter_ns()
        await client.get(server, "/health")
        times.append((time.perf_counter_ns() - start) / 1000)
    return round(percentile(times, 50) or 0, 1)


async def _measure(head_url: str, size: Size, pids: dict[str, int]) -> dict[str, Any]:
    from gym_core.auth import token_for_head

    from gym_cli.rollouts import read_tasks

    tasks = read_tasks(COUNTER_TASKS)
    base = await ServerClient.from_head(head_url)
    await base.close()
    client = TimedClient(
        base.global_config, config=ClientConfig(timeout_s=600, max_attempts=1), auth_token=token_for_head(head_url)
    )
    try:
        where = {n: _replica_pids(pids, f"counter{n}") for n in size.levels}
        warm_up = replace(size, rollouts=size.concurrency)
        for n in size.levels:  # connections opened, code paths run
            await _round(client, tasks, n, warm_up, where[n])
        rounds: dict[int, list[dict[str, Any]]] = {n: [] for n in size.levels}
        for _ in range(size.rounds):
            for n in size.levels:  # alternating, so that every level sees the same drift of the machine
                rounds[n].append(await _round(client, tasks, n, size, where[n]))
        loopback = await _loopback_us(client, f"counter{size.levels[0]}", size.round_trips)
    finally:
        await client.close()
    levels = [median_round(done) for done in rounds.values()]
    return {"levels": levels, "loopback_us": loopback}


def routing(size: Size) -> dict[str, Any]:
    """``ServerClient.route`` per call for each replica count (a rollout's cookie dict holding its
    key, as on every call after its first), and how evenly fresh rollout keys spread."""
    rows = {}
    for n in ROUTE_REPLICAS:
        config = GlobalConfig(
            {
                "c": {
                    "plugin": "counter",
                    "replicas": n,
                    "host": "127.0.0.1",
                    "port": 20_000,
                    "replica_ports": [20_000 + i for i in range(n)],
                }
            }
        )
        client = ServerClient(config)
        cookies = [{ROLLOUT_COOKIE: new_rollout_key()} for _ in range(1000)]
        client.route("c", cookies[0])  # resolves the instance once, as the first call of a run does
        calls = size.route_calls
        start = time.perf_counter_ns()
        for i in range(calls):
            client.route("c", cookies[i % 1000])
        per_call_us = (time.perf_counter_ns() - start) / calls / 1000
        urls = client.replica_urls("c")
        counts = dict.fromkeys(urls, 0)
        for _ in range(size.spread_keys):
            counts[client.route("c", {})[0]] += 1  # an empty cookie dict: a fresh key, as a new rollout gets
        even = size.spread_keys / n
        rows[str(n)] = {
            "route_us": round(per_call_us, 3),
            "keys": size.spread_keys,
            "min_share_of_even": round(min(counts.values()) / even, 4),
            "max_share_of_even": round(max(counts.values()) / even, 4),
        }
    return rows


def run(size_name: str) -> dict[str, Any]:
    size = SIZES[size_name]
    route = routing(size)
    start = time.perf_counter()
    with gym_servers(servers_config(size)) as state:
        launch_s = round(time.perf_counter() - start, 1)
        measured = run_async(_measure(state.config.head_url, size, state.supervisor.pids()))
    loopback = measured["loopback_us"]
    for row in route.values():
        row["pct_of_round_trip"] = round(100 * row["route_us"] / loopback, 3) if loopback else None
    return {
        "ray": size.ray,
        "concurrency": size.concurrency,
        "rounds": size.rounds,
        "launch_s": launch_s,
        "levels": measured["levels"],
        "loopback_us": loopback,
        "routing": route,
    }
