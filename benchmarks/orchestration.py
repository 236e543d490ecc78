"""Orchestration overhead: gym's rollouts/s against the raw HTTP floor, same round trips.

gym path (scripted variant), 6 round trips per rollout:
  collector → agent /run; agent → resources /seed_session; agent → model /v1/responses (tool call);
  agent → resources /increment_counter; agent → model /v1/responses (text); agent → resources /verify.
Proxy variant: the model is ``openai_model`` in front of an instant OpenAI-compatible stub, which adds
model → stub /v1/chat/completions twice: 8 round trips.

Floor: a bare client (in the driver) makes the same number of sequential round trips per rollout
against bare ASGI apps on uvicorn (one process per role, as in the gym layout). Two floors, measured
in the same alternating rounds: the aiohttp client (the floor since the first harness) and gym's own
transport (``gym_core.http1``, what gym's servers call each other with), the stricter of the two.
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

from gym_core import ClientConfig, ServerClient
from gym_core.config import free_port
from gym_core.http1 import Pool, origin_of

from benchmarks._common import (
    COUNTER_TASKS,
    TimedClient,
    cpu_seconds,
    gym_servers,
    median_round,
    percentile,
    spawn,
    spread,
    wait_http,
)
from gym_cli.rollouts import run_async

SCRIPTED_HOPS = ["agent", "resources", "model", "resources", "model", "resources"]
PROXY_HOPS = SCRIPTED_HOPS + ["stub", "stub"]
TURNS = [{"tool_calls": [{"name": "increment_counter", "arguments": {"count": 3}}]}, {"text": "added 3"}]
# Per size: rollouts per round at each concurrency, and rounds (gym and floor alternate; medians).
SIZES: dict[str, tuple[dict[int, int], int]] = {
    "tiny": ({1: 20, 8: 40}, 1),
    "small": ({1: 200, 64: 1_000}, 2),
    "full": ({1: 1_000, 64: 3_000, 1024: 8_192}, 3),
}


def gym_config(variant: str, stub_url: str | None) -> dict[str, Any]:
    model = (
        {"plugin": "scripted", "turns": TURNS}
        if variant == "scripted"
        else {"plugin": "openai_model", "base_url": f"{stub_url}/v1", "model": "stub", "max_concurrency": 4096}
    )
    return {
        "counter": {"plugin": "counter"},
        "policy_model": model,
        "agent": {"plugin": "simple_agent", "model_server": "policy_model", "resources_server": "counter"},
    }


def _pairs(tasks: list[Any], n: int) -> list[tuple[int, int]]:
    return [(i % len(tasks), i // len(tasks)) for i in range(n)]


async def _gym_round(
    client: TimedClient, tasks: list[Any], n: int, concurrency: int, pids: list[int]
) -> dict[str, Any]:
    from gym_cli.rollouts import CollectOptions, CollectSummary, collect_rollouts

    client.latencies = []
    with tempfile.TemporaryDirectory() as tmp:
        options = CollectOptions(Path(tmp) / "out.jsonl", Path(tmp) / "failures.jsonl", "agent", 1, concurrency)
        summary = CollectSummary(total=n)
        cpu, start = cpu_seconds(pids), time.perf_counter()
        await collect_rollouts(client, tasks, _pairs(tasks, n), options, summary)
        elapsed, cpu = time.perf_counter() - start, cpu_seconds(pids) - cpu
    return _figures(n, elapsed, cpu, client.latencies, summary.failed)


async def _floor_round(
    client: aiohttp.ClientSession | Pool,
    urls: dict[str, str],
    hops: list[str],
    n: int,
    concurrency: int,
    pids: list[int],
) -> dict[str, Any]:
    latencies: list[float] = []
    errors = 0
    body = b'{"task": 1}'
    headers = {"content-type": "application/json"}
    origins = {role: origin_of(url) for role, url in urls.items()}

    async def rollout() -> None:
        nonlocal errors
        start = time.perf_counter()
        for role in hops:
            if isinstance(client, Pool):
                resp = await client.request("POST", origins[role], "/x", headers, body, 10)
                if resp.status != 200:
                    errors += 1
                continue
            async with client.post(urls[role] + "/x", data=body, headers=headers) as aio_resp:
                await aio_resp.read()
                if aio_resp.status != 200:
                    errors += 1
        latencies.append(time.perf_counter() - start)

    async def worker(count: int) -> None:
        for _ in range(count):
            await rollout()

    per_worker = [n // concurrency + (1 if i < n % concurrency else 0) for i in range(concurrency)]
    cpu, start = cpu_seconds(pids), time.perf_counter()
    await asyncio.gather(*(worker(c) for c in per_worker if c))
    elapsed, cpu = time.perf_counter() - start, cpu_seconds(pids) - cpu
    return _figures(n, elapsed, cpu, latencies, errors)


async def _measure(
    head_url: str,
    floor_urls: dict[str, str],
    hops: list[str],
    n: int,
    concurrency: int,
    rounds: int,
    gym_pids: list[int],
    floor_pids: list[int],
) -> dict[str, Any]:
    """Gym and floor at one concurrency: a warm-up pass each (connections opened), then rounds that
    alternate between the two so that both see the same drift of the machine."""
    from gym_cli.rollouts import read_tasks

    tasks = read_tasks(COUNTER_TASKS)
    base = await ServerClient.from_head(head_url)
    from gym_core.auth import token_for_head

    client = TimedClient(
        base.global_config, config=ClientConfig(timeout_s=600, max_attempts=1), auth_token=token_for_head(head_url)
    )
    await base.close()
    connector = aiohttp.TCPConnector(limit=100_000, limit_per_host=1_000)
    pool = Pool(limit=100_000, limit_per_host=1_000)
    gym_rounds, floor_rounds, lean_rounds = [], [], []
    async with aiohttp.ClientSession(connector=connector) as session:
        await _gym_round(client, tasks, concurrency, concurrency, gym_pids)
        await _floor_round(session, floor_urls, hops, concurrency, concurrency, floor_pids)
        await _floor_round(pool, floor_urls, hops, concurrency, concurrency, floor_pids)
        for _ in range(rounds):
            gym_rounds.append(await _gym_round(client, tasks, n, concurrency, gym_pids))
            floor_rounds.append(await _floor_round(session, floor_urls, hops, n, concurrency, floor_pids))
            lean_rounds.append(await _floor_round(pool, floor_urls, hops, n, concurrency, floor_pids))
    await pool.close()
    await client.close()
    gym, floor, lean = median_round(gym_rounds), median_round(floor_rounds), median_round(lean_rounds)
    ratio, ratio_lean = _ratio_spread(gym_rounds, floor_rounds), _ratio_spread(gym_rounds, lean_rounds)
    # The ratio is the median of each round's ratio, gym's round over the floor rounds beside it:
    # the machine's drift (it is shared) moves both sides of a round together, not the separate medians.
    return {
        "concurrency": concurrency,
        "gym": gym,
        "floor": floor,
        "floor_gym_transport": lean,
        "ratio": ratio["median"],
        "ratio_min": ratio["min"],
        "ratio_max": ratio["max"],
        "ratio_gym_transport": ratio_lean["median"],
        "ratio_gym_transport_min": ratio_lean["min"],
        "ratio_gym_transport_max": ratio_lean["max"],
    }


def _ratio_spread(gym_rounds: list[dict[str, Any]], floor_rounds: list[dict[str, Any]]) -> dict[str, float]:
    """Each round's ratio, gym over the floor beside it: their true median, min and max."""
    return spread([g["rollouts_per_s"] / f["rollouts_per_s"] for g, f in zip(gym_rounds, floor_rounds)])


def _figures(n: int, elapsed: float, cpu: float, latencies: list[float], errors: int) -> dict[str, Any]:
    return {
        "rollouts": n,
        "seconds": round(elapsed, 3),
        "rollouts_per_s": round(n / elapsed, 1),
        # CPU of every process of the path (servers and the driver) per rollout: steadier than
        # throughput on a shared machine, and what throughput is bound by once the cores are busy.
        "cpu_ms_per_rollout": round(1000 * cpu / n, 3),
        "p50_ms": round(1000 * (percentile(latencies, 50) or 0), 2),
        "p99_ms": round(1000 * (percentile(latencies, 99) or 0), 2),
        "errors": errors,
    }


def run(size: str) -> dict[str, Any]:
    sizes, rounds = SIZES[size]
    results: dict[str, Any] = {
        "round_trips": {"scripted": len(SCRIPTED_HOPS), "proxy": len(PROXY_HOPS)},
        "rounds": rounds,
        "variants": {},
    }
    floor_urls = {role: f"http://127.0.0.1:{free_port()}" for role in ("agent", "resources", "model", "stub")}
    stub_port = free_port()
    stub_url = f"http://127.0.0.1:{stub_port}"
    with spawn("benchmarks._openai_stub", str(stub_port)) as stub:
        wait_http(stub_url + "/v1/chat/completions")
        for variant, hops in (("scripted", SCRIPTED_HOPS), ("proxy", PROXY_HOPS)):
            with contextlib.ExitStack() as stack:
                state = stack.enter_context(gym_servers(gym_config(variant, stub_url)))
                gym_pids = [*state.supervisor.pids().values(), *([stub.pid] if variant == "proxy" else [])]
                floor_pids = [
                    stack.enter_context(spawn("benchmarks._floor_server", floor_urls[role].rsplit(":", 1)[1])).pid
                    for role in sorted(set(hops))
                ]
                for role in sorted(set(hops)):
                    wait_http(floor_urls[role] + "/x")
                results["variants"][variant] = [
                    run_async(_measure(state.config.head_url, floor_urls, hops, n, c, rounds, gym_pids, floor_pids))
                    for c, n in sizes.items()
                ]
    return results
