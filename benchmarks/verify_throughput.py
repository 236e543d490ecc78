"""Verify throughput per environment: ``POST /verify`` against each environment's real server process.

Every resources server type of the workspace whose plugin ships example rows (``data/example.jsonl``,
or ``data/<type>_example.jsonl``) is started alone, as ``gym run --isolation none`` starts it, or
with the servers its ``configs/<type>_bench.yaml`` adds (a judged environment's scripted judge). Each
row gets a session first, as the conformance kit plays it: ``/seed_session``, then the row's
``conformance.tool_calls``. The timed part then sends the rows, cycled, to ``/verify`` with their
session cookie and the response the conformance kit sends (``conformance.response``: the row's
real example answer, right or wrong), at concurrency 1 and 64.

Reported per environment and concurrency: verifications/s, p50/p99 latency, non-2xx answers
(``errors``), and ``correct``: the fraction of the verifications of rows with a
``conformance.reward`` (``checked`` of them) that got that reward (``matched``); None when no row
has one. A ``correct`` below 1 means the figure is not that of the path the example answers take
(a refusal, a broken row, a verifier wrong under load), and says so. A row without
``conformance.response`` gets the kit's fallback (its ``expected_answer`` boxed, else an empty
assistant message), which a row may refuse with a 4xx: ``errors`` shows it.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
import tomllib
from pathlib import Path
from typing import Any

import aiohttp

from benchmarks._common import ROOT, gym_servers, percentile
from gym_cli.rollouts import run_async

SIZES: dict[str, tuple[dict[int, int], tuple[str, ...] | None]] = {
    "tiny": ({1: 20, 8: 40}, ("counter", "math", "text_to_sql")),
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


def bench_config(name: str, data: Path) -> tuple[dict[str, Any], str]:
    """The servers to start for server type ``name``, and the instance under test: the type alone,
    or the plugin's ``configs/<type>_bench.yaml`` when it has one (an environment that needs other
    servers, such as a scripted judge whose verdicts match the example rows' conformance rewards)."""
    import yaml

    bench = data.parent.parent / "configs" / f"{name}_bench.yaml"
    if not bench.is_file():
        return {"env": {"plugin": name}}, "env"
    config = yaml.safe_load(bench.read_text())
    under_test = [key for key, value in config.items() if isinstance(value, dict) and value.get("plugin") == name]
    if len(under_test) != 1:
        raise ValueError(f"{bench}: needs exactly one instance of {name}, found {under_test}")
    return config, under_test[0]


def example_rows(data: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in data.read_text().splitlines() if line.strip()]


def verify_bodies(rows: list[dict[str, Any]]) -> list[bytes]:
    """Each row with the response the conformance kit verifies it with."""
    from gym_core.testing import ResourcesServerTests

    kit = ResourcesServerTests()
    return [json.dumps({**row, "response": kit.response_for(row)}).encode() for row in rows]


async def open_sessions(base_url: str, rows: list[dict[str, Any]], token: str | None) -> list[dict[str, str]]:
    """Seed a session for each row and make its conformance tool calls, as the conformance kit does;
    the headers that send each row's session cookie (and the run's ``token``) with its verifications."""
    from gym_core.testing import conformance_tool_calls

    headers = []
    auth = {"authorization": f"Bearer {token}"} if token else {}
    async with aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar(), headers=auth) as client:
        for row in rows:
            # A failing seed or tool call is not fatal: the row's verifications then show it in `correct`.
            async with client.post(base_url + "/seed_session", json=row) as resp:
                await resp.read()
                cookie = "; ".join(f"{name}={morsel.value}" for name, morsel in resp.cookies.items())
            session = {"content-type": "application/json", **auth, **({"cookie": cookie} if cookie else {})}
            for name, arguments in conformance_tool_calls(row):
                async with client.post(f"{base_url}/{name}", json=arguments, headers=session) as resp:
                    await resp.read()
            headers.append(session)
    return headers


async def _drive(
    url: str,
    bodies: list[bytes],
    headers: list[dict[str, str]],
    rewards: list[float | None],
    total: int,
    concurrency: int,
) -> dict[str, Any]:
    latencies: list[float] = []
    errors = checked = correct = 0
    counter = iter(range(total))
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector, cookie_jar=aiohttp.DummyCookieJar()) as session:

        async def worker() -> None:
            nonlocal errors, checked, correct
            for i in counter:
                row = i % len(bodies)
                start = time.perf_counter()
                async with session.post(url, data=bodies[row], headers=headers[row]) as resp:
                    data = await resp.read()
                    status = resp.status
                latencies.append(time.perf_counter() - start)
                errors += status >= 300
                expected = rewards[row]
                if expected is not None:
                    checked += 1
                    reward = json.loads(data).get("reward") if status < 300 else None
                    correct += isinstance(reward, (int, float)) and math.isclose(reward, expected, abs_tol=1e-12)

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - start
    return {
        "verifications": total,
        "per_s": round(total / elapsed, 1),
        "p50_ms": round((percentile(latencies, 50) or 0) * 1000, 2),
        "p99_ms": round((percentile(latencies, 99) or 0) * 1000, 2),
        "errors": errors,
        "checked": checked,
        "matched": correct,
        "correct": round(correct / checked, 3) if checked else None,
    }


def run(size: str, only: tuple[str, ...] | None = None) -> dict[str, Any]:
    """The figures at ``size`` for each environment (``only`` these server types, if given)."""
    from gym_core.testing import conformance_reward

    rounds, default = SIZES[size]
    results: dict[str, Any] = {}
    for name, data in environments(only if only is not None else default).items():
        rows = example_rows(data)
        bodies, rewards = verify_bodies(rows), [conformance_reward(row) for row in rows]
        config, instance = bench_config(name, data)
        with gym_servers(config) as state:
            base = state.config.instances[instance].url
            headers = run_async(open_sessions(base, rows, getattr(state.config, "auth_token", None)))
            drive = (base + "/verify", bodies, headers, rewards)
            run_async(_drive(*drive, min(20, len(bodies)), 1))  # warm-up
            results[name] = {str(c): run_async(_drive(*drive, n, c)) for c, n in rounds.items()}
    return results


if __name__ == "__main__":
    import sys

    # python -m benchmarks.verify_throughput [SIZE [SERVER_TYPE...]]
    size, names = (sys.argv[1] if len(sys.argv) > 1 else "small"), tuple(sys.argv[2:]) or None
    print(json.dumps(run(size, names), indent=2))
