"""Verify throughput per environment: ``POST /verify`` against each environment's real server process.

Every resources server type of the workspace whose plugin ships ``data/example.jsonl`` is started
alone, as ``gym run --isolation none`` starts it, and sent its own example rows, cycled, each with
the response the conformance kit sends by default (the row's ``expected_answer`` boxed, else an
empty assistant message), at concurrency 1 and 64. Reported per environment: verifications/s,
p50/p99 latency, and non-2xx answers (a row the default response does not fit may get a 4xx; the
figure is then the cost of refusing it, and says so in ``errors``).
"""

from __future__ import annotations

import asyncio
import json
import time
import tomllib
from pathlib import Path
from typing import Any

import aiohttp

from gym_cli.rollouts import run_async

from benchmarks._common import ROOT, gym_servers, percentile

SIZES: dict[str, tuple[dict[int, int], tuple[str, ...] | None]] = {
    "tiny": ({1: 20, 8: 40}, ("counter", "math")),
    "small": ({1: 100, 64: 1_000}, None),
    "full": ({1: 300, 64: 3_000}, None),
}


def environments(only: tuple[str, ...] | None = None) -> dict[str, Path]:
    """Resources server types of the workspace's plugins with example data: type -> its example rows
    (``data/<type>_example.jsonl`` when the plugin has several types with their own rows, else
    ``data/example.jsonl``)."""
    from gym_core.plugins import PluginManager

    catalog = tomllib.loads((ROOT / "workspace.toml").read_text())
    found = {}
    for name, server_type in sorted(PluginManager().servers().items()):
        entry = catalog.get("plugins", {}).get(server_type.provider, {})
        if server_type.kind != "resources" or "path" not in entry or (only is not None and name not in only):
            continue
        data = ROOT / entry["path"] / "data"
        for candidate in (data / f"{name}_example.jsonl", data / "example.jsonl"):
            if candidate.is_file():
                found[name] = candidate
                break
    return found


def verify_bodies(data: Path) -> list[bytes]:
    from gym_core.testing import ResourcesServerTests

    kit = ResourcesServerTests()
    rows = [json.loads(line) for line in data.read_text().splitlines() if line.strip()]
    return [json.dumps({**row, "response": kit.response_for(row)}).encode() for row in rows]


async def _drive(url: str, bodies: list[bytes], total: int, concurrency: int) -> dict[str, Any]:
    latencies: list[float] = []
    errors = 0
    counter = iter(range(total))
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector, cookie_jar=aiohttp.DummyCookieJar()) as session:

        async def worker() -> None:
            nonlocal errors
            for i in counter:
                start = time.perf_counter()
                async with session.post(url, data=bodies[i % len(bodies)],
                                        headers={"content-type": "application/json"}) as resp:
                    await resp.read()
                    errors += resp.status >= 300
                latencies.append(time.perf_counter() - start)

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - start
    return {
        "verifications": total,
        "per_s": round(total / elapsed, 1),
        "p50_ms": round((percentile(latencies, 50) or 0) * 1000, 2),
        "p99_ms": round((percentile(latencies, 99) or 0) * 1000, 2),
        "errors": errors,
    }


def run(size: str) -> dict[str, Any]:
    rounds, only = SIZES[size]
    results: dict[str, Any] = {}
    for name, data in environments(only).items():
        bodies = verify_bodies(data)
        with gym_servers({"env": {"plugin": name}}) as state:
            url = state.config.instances["env"].url + "/verify"
            run_async(_drive(url, bodies, min(20, len(bodies)), 1))  # warm-up
            results[name] = {str(c): run_async(_drive(url, bodies, n, c)) for c, n in rounds.items()}
    return results


if __name__ == "__main__":
    import sys

    print(json.dumps(run(sys.argv[1] if len(sys.argv) > 1 else "small"), indent=2))
