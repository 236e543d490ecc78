"""Orchestration overhead: gym's rollouts/s against the raw HTTP floor, same round trips.

gym path (scripted variant), 6 round trips per rollout:
  collector → agent /run; agent → resources /seed_session; agent → model /v1/responses (tool call);
  agent → resources /increment_counter; agent → model /v1/responses (text); agent → resources /verify.
Proxy variant: the model is ``openai_model`` in front of an instant OpenAI-compatible stub, which adds
model → stub /v1/chat/completions twice: 8 round trips.

Floor: a bare aiohttp client (in the driver) makes the same number of sequential round trips per
rollout against bare ASGI apps on uvicorn (one process per role, as in the gym layout).
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

from gym_cli._collector import run_async

from benchmarks._common import COUNTER_TASKS, free_port, gym_servers, percentile, spawn, wait_http

SCRIPTED_HOPS = ["agent", "resources", "model", "resources", "model", "resources"]
PROXY_HOPS = SCRIPTED_HOPS + ["stub", "stub"]
TURNS = [{"tool_calls": [{"name": "increment_counter", "arguments": {"count": 3}}]}, {"text": "added 3"}]
SIZES = {"tiny": ([1, 8], 40), "small": ([1, 64], 300), "full": ([1, 64, 1024], 400)}


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


class _TimedClient(ServerClient):
    """Records the latency of every /run: one rollout each."""

    latencies: list[float]

    async def request(self, method: str, server: str, path: str, **kwargs: Any) -> bytes:
        start = time.perf_counter()
        try:
            return await super().request(method, server, path, **kwargs)
        finally:
            if path == "/run":
                self.latencies.append(time.perf_counter() - start)


async def _gym_run(head_url: str, n: int, concurrency: int) -> dict[str, Any]:
    from gym_cli._collector import CollectOptions, CollectSummary, collect_rollouts, read_tasks

    tasks = read_tasks(COUNTER_TASKS)
    repeats = -(-n // len(tasks))
    pairs = [(t, r) for r in range(repeats) for t in range(len(tasks))][:n]
    base = await ServerClient.from_head(head_url)
    client = _TimedClient(base.global_config, config=ClientConfig(timeout_s=600, max_attempts=1))
    client.latencies = []
    with tempfile.TemporaryDirectory() as tmp:
        options = CollectOptions(Path(tmp) / "out.jsonl", Path(tmp) / "failures.jsonl", "agent", repeats, concurrency)
        await collect_rollouts(client, tasks, pairs[: min(20, n)], options, CollectSummary())  # warm connections
        client.latencies.clear()
        summary = CollectSummary(total=n)
        start = time.perf_counter()
        await collect_rollouts(client, tasks, pairs, options, summary)
        elapsed = time.perf_counter() - start
    await client.close()
    return _figures(n, elapsed, client.latencies, summary.failed)


async def _floor_run(urls: dict[str, str], hops: list[str], n: int, concurrency: int) -> dict[str, Any]:
    connector = aiohttp.TCPConnector(limit=100_000, limit_per_host=1_000)
    latencies: list[float] = []
    errors = 0
    body = b'{"task": 1}'
    headers = {"content-type": "application/json"}
    async with aiohttp.ClientSession(connector=connector) as session:

        async def rollout() -> None:
            nonlocal errors
            start = time.perf_counter()
            for role in hops:
                async with session.post(urls[role] + "/x", data=body, headers=headers) as resp:
                    await resp.read()
                    if resp.status != 200:
                        errors += 1
            latencies.append(time.perf_counter() - start)

        async def worker(count: int) -> None:
            for _ in range(count):
                await rollout()

        await asyncio.gather(*(worker(1) for _ in range(min(20, n))))  # warm connections
        latencies.clear()
        per_worker = [n // concurrency + (1 if i < n % concurrency else 0) for i in range(concurrency)]
        start = time.perf_counter()
        await asyncio.gather(*(worker(c) for c in per_worker if c))
        elapsed = time.perf_counter() - start
    return _figures(n, elapsed, latencies, errors)


def _figures(n: int, elapsed: float, latencies: list[float], errors: int) -> dict[str, Any]:
    return {
        "rollouts": n,
        "seconds": round(elapsed, 3),
        "rollouts_per_s": round(n / elapsed, 1),
        "p50_ms": round(1000 * (percentile(latencies, 50) or 0), 2),
        "p99_ms": round(1000 * (percentile(latencies, 99) or 0), 2),
        "errors": errors,
    }


def run(size: str) -> dict[str, Any]:
    concurrencies, base_n = SIZES[size]
    results: dict[str, Any] = {"round_trips": {"scripted": len(SCRIPTED_HOPS), "proxy": len(PROXY_HOPS)}, "variants": {}}
    ports = {role: free_port() for role in ("agent", "resources", "model", "stub")}
    urls = {role: f"http://127.0.0.1:{port}" for role, port in ports.items()}
    stub_port = free_port()
    stub_url = f"http://127.0.0.1:{stub_port}"
    with spawn("benchmarks._openai_stub", str(stub_port)):
        wait_http(stub_url + "/v1/chat/completions")
        for variant, hops in (("scripted", SCRIPTED_HOPS), ("proxy", PROXY_HOPS)):
            rows = []
            with gym_servers(gym_config(variant, stub_url)) as state:
                for c in concurrencies:
                    n = max(base_n, 4 * c)
                    rows.append({"concurrency": c, "gym": run_async(_gym_run(state.config.head_url, n, c))})
            floor_roles = sorted(set(hops))
            with contextlib.ExitStack() as stack:
                for role in floor_roles:
                    stack.enter_context(spawn("benchmarks._floor_server", str(ports[role])))
                for role in floor_roles:
                    wait_http(urls[role] + "/x")
                for row in rows:
                    n = row["gym"]["rollouts"]
                    row["floor"] = run_async(_floor_run(urls, hops, n, row["concurrency"]))
                    row["ratio"] = round(row["gym"]["rollouts_per_s"] / row["floor"]["rollouts_per_s"], 3)
            results["variants"][variant] = rows
    return results
