"""The strict floor: gym's rollout against the same rollout on minimal servers, CPU per rollout.

Both sides run the scripted rollout's shape with the same processes: a collector in the driver
(gym: ``gym collect``'s collector) → agent ``/run`` → resources (seed), model, resources (tool),
model, resources (verify), resources (close the session, as ``Rollout`` does on exit); seven round
trips, four processes. Gym's side is ``simple_agent``, the
``scripted`` model and the ``counter`` environment, started as ``gym run --isolation none`` starts
them. The floor's side is bare ASGI apps on uvicorn with gym's uvicorn settings and no gym logic
(``_floor_agent``, ``_floor_server``), every call made with gym's own transport
(``gym_core.http1``) from the same places: the driver calls the agent, the agent calls the others.

Measured for both sides in the same run, rounds alternating: rollouts/s, and CPU seconds (user +
system, from ``/proc``) of every process of the side, the driver's included, per rollout; per
process too, so that gym's extra cost is located. The ratios are taken round by round (gym over
the floor beside it), then their median: the shared machine drifts, both sides of a round together.
The goal (issue 27): gym's CPU per rollout within 1.5× of the floor's at concurrency 64.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from gym_core import ClientConfig, ServerClient
from gym_core.config import free_port
from gym_core.http1 import Pool, origin_of

from benchmarks._common import (
    _TICK,
    COUNTER_TASKS,
    ROOT,
    TimedClient,
    gym_servers,
    median_round,
    percentile,
    spawn,
    spread,
    wait_http,
)
from benchmarks.orchestration import gym_config
from gym_cli.rollouts import run_async

GOAL = 1.5
ROLES = ("collector", "agent", "model", "resources")
GYM_ROLES = {"agent": "agent", "policy_model": "model", "counter": "resources"}
# Per size: rollouts per round at each concurrency, and rounds (gym and floor alternate).
SIZES: dict[str, tuple[dict[int, int], int]] = {
    "tiny": ({8: 40}, 1),
    "small": ({64: 1_000}, 3),
    "full": ({1: 500, 64: 3_000}, 5),
}


def _tree(pid: int) -> list[int]:
    """``pid`` and its descendants (a server started through a wrapper counts whole)."""
    pids, todo = [], [pid]
    while todo:
        current = todo.pop()
        pids.append(current)
        with contextlib.suppress(OSError):
            for task in Path(f"/proc/{current}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
    return pids


def _cpu(pid: int) -> float:
    """CPU seconds (user + system) used so far by ``pid`` and its descendants; this process's own
    through ``time.process_time``."""
    total = 0.0
    for member in _tree(pid):
        try:
            fields = Path(f"/proc/{member}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / _TICK
    return total


def _cpu_by_role(pids: dict[str, int]) -> dict[str, float]:
    return {"collector": time.process_time(), **{role: _cpu(pid) for role, pid in pids.items()}}


def _figures(
    n: int, elapsed: float, before: dict[str, float], after: dict[str, float], latencies: list[float], errors: int
) -> dict[str, Any]:
    by_role = {role: round(1000 * (after[role] - before[role]) / n, 3) for role in ROLES}
    return {
        "rollouts": n,
        "seconds": round(elapsed, 3),
        "rollouts_per_s": round(n / elapsed, 1),
        "cpu_ms_per_rollout": round(sum(by_role.values()), 3),
        "cpu_ms_per_rollout_by_process": by_role,
        "p50_ms": round(1000 * (percentile(latencies, 50) or 0), 2),
        "p99_ms": round(1000 * (percentile(latencies, 99) or 0), 2),
        "errors": errors,
    }


async def _gym_round(client: TimedClient, tasks: list[Any], n: int, concurrency: int, pids: dict[str, int]):
    from gym_cli.rollouts import CollectOptions, CollectSummary, collect_rollouts

    client.latencies = []
    pairs = [(i % len(tasks), i // len(tasks)) for i in range(n)]
    with tempfile.TemporaryDirectory() as tmp:
        options = CollectOptions(Path(tmp) / "out.jsonl", Path(tmp) / "failures.jsonl", "agent", 1, concurrency)
        summary = CollectSummary(total=n)
        before, start = _cpu_by_role(pids), time.perf_counter()
        await collect_rollouts(client, tasks, pairs, options, summary)
        elapsed, after = time.perf_counter() - start, _cpu_by_role(pids)
    return _figures(n, elapsed, before, after, client.latencies, summary.failed)


async def _floor_round(pool: Pool, agent_url: str, n: int, concurrency: int, pids: dict[str, int]):
    """The floor's collector: ``concurrency`` workers, each posting one task after another to the
    floor agent with gym's transport (one call per rollout, as gym's collector makes)."""
    latencies: list[float] = []
    errors = 0
    agent = origin_of(agent_url)
    headers = {"content-type": "application/json"}
    body = b'{"responses_create_params": {"input": "add 3"}, "task": 1}'

    async def worker(count: int) -> None:
        nonlocal errors
        for _ in range(count):
            start = time.perf_counter()
            resp = await pool.request("POST", agent, "/run", headers, body, 30)
            errors += resp.status != 200
            latencies.append(time.perf_counter() - start)

    counts = [n // concurrency + (1 if i < n % concurrency else 0) for i in range(concurrency)]
    before, start = _cpu_by_role(pids), time.perf_counter()
    await asyncio.gather(*(worker(c) for c in counts if c))
    elapsed, after = time.perf_counter() - start, _cpu_by_role(pids)
    return _figures(n, elapsed, before, after, latencies, errors)


async def _measure(
    head_url: str, agent_url: str, n: int, concurrency: int, rounds: int, gym: dict[str, int], floor: dict[str, int]
) -> dict[str, Any]:
    from gym_core.auth import token_for_head

    from gym_cli.rollouts import read_tasks

    tasks = read_tasks(COUNTER_TASKS)
    base = await ServerClient.from_head(head_url)
    client = TimedClient(
        base.global_config, config=ClientConfig(timeout_s=600, max_attempts=1), auth_token=token_for_head(head_url)
    )
    await base.close()
    pool = Pool(limit=100_000, limit_per_host=1_000)
    # A warm-up pass each (connections opened, caches filled), then alternating rounds.
    await _gym_round(client, tasks, concurrency, concurrency, gym)
    await _floor_round(pool, agent_url, concurrency, concurrency, floor)
    gym_rounds, floor_rounds = [], []
    for _ in range(rounds):
        gym_rounds.append(await _gym_round(client, tasks, n, concurrency, gym))
        floor_rounds.append(await _floor_round(pool, agent_url, n, concurrency, floor))
    await pool.close()
    await client.close()
    pairs = list(zip(gym_rounds, floor_rounds))
    return {
        "concurrency": concurrency,
        "gym": _merge(gym_rounds),
        "floor": _merge(floor_rounds),
        # gym over the floor: throughput (higher is better for gym) and CPU per rollout (lower is).
        "throughput_ratio": spread([g["rollouts_per_s"] / f["rollouts_per_s"] for g, f in pairs]),
        "cpu_ratio": spread([g["cpu_ms_per_rollout"] / f["cpu_ms_per_rollout"] for g, f in pairs]),
    }


def _merge(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    merged = median_round(rounds)
    merged["cpu_ms_per_rollout_by_process"] = {
        role: spread([r["cpu_ms_per_rollout_by_process"][role] for r in rounds])["median"] for role in ROLES
    }
    merged["cpu_ms_per_rollout_rounds"] = [r["cpu_ms_per_rollout"] for r in rounds]
    return merged


def _commit() -> str:
    proc = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return proc.stdout.strip() or "unknown"


def run(size: str) -> dict[str, Any]:
    from benchmarks._common import load

    sizes, rounds = SIZES[size]
    ports = {role: free_port() for role in ("agent", "model", "resources")}
    urls = {role: f"http://127.0.0.1:{port}" for role, port in ports.items()}
    result: dict[str, Any] = {"commit": _commit(), "load_before": load(), "rounds": rounds, "goal": GOAL}
    with contextlib.ExitStack() as stack:
        state = stack.enter_context(gym_servers(gym_config("scripted", None)))
        gym_pids = {GYM_ROLES[name]: pid for name, pid in state.supervisor.pids().items() if name in GYM_ROLES}
        floor_pids = {
            role: stack.enter_context(spawn("benchmarks._floor_server", str(ports[role]))).pid
            for role in ("model", "resources")
        }
        agent = spawn("benchmarks._floor_agent", str(ports["agent"]), urls["model"], urls["resources"])
        floor_pids["agent"] = stack.enter_context(agent).pid
        for role in ("model", "resources"):
            wait_http(urls[role] + "/x")
        wait_http(urls["agent"] + "/run")
        result["levels"] = [
            run_async(_measure(state.config.head_url, urls["agent"], n, c, rounds, gym_pids, floor_pids))
            for c, n in sizes.items()
        ]
    result["load_after"] = load()
    return result


def markdown(s: dict[str, Any]) -> list[str]:
    """The table of ``python -m benchmarks --only strict_floor``."""

    def cell(figure: dict[str, float]) -> str:
        return (
            str(figure["median"])
            if figure["min"] == figure["max"]
            else (f"{figure['median']} ({figure['min']}–{figure['max']})")
        )

    def rate(side: dict[str, Any]) -> str:
        return cell(
            {"median": side["rollouts_per_s"], "min": side["rollouts_per_s_min"], "max": side["rollouts_per_s_max"]}
        )

    def cpu(side: dict[str, Any]) -> str:
        values = side["cpu_ms_per_rollout_rounds"]
        return cell({"median": side["cpu_ms_per_rollout"], "min": min(values), "max": max(values)})

    lines = [
        "## gym against the strict floor (strict_floor)",
        "",
        "The same rollout (collector → agent; seed, model, tool, model, verify, close: 7 round trips) through gym's "
        "servers and through bare uvicorn apps calling each other with gym's transport, same processes. CPU: "
        "every process of the side (driver included), ms per rollout. Median (min–max) of "
        f"{s['rounds']} alternating round(s); ratios within each round. Commit {s['commit']}, load average "
        f"{s['load_before']} before, {s['load_after']} after.",
        "",
        "| concurrency | gym rollouts/s | floor rollouts/s | throughput ratio | gym CPU ms/rollout "
        "| floor CPU ms/rollout | CPU ratio (gym / floor) | errors |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in s["levels"]:
        g, f = row["gym"], row["floor"]
        lines.append(
            f"| {row['concurrency']} | {rate(g)} | {rate(f)} | {cell(row['throughput_ratio'])} | {cpu(g)} | {cpu(f)} "
            f"| **{cell(row['cpu_ratio'])}** | {g['errors'] + f['errors']} |"
        )
    lines += [
        "",
        "CPU ms per rollout by process (medians), gym / floor:",
        "",
        "| concurrency | " + " | ".join(ROLES) + " |",
        "| --- |" + " --- |" * len(ROLES),
    ]
    for row in s["levels"]:
        g, f = row["gym"]["cpu_ms_per_rollout_by_process"], row["floor"]["cpu_ms_per_rollout_by_process"]
        lines.append(f"| {row['concurrency']} | " + " | ".join(f"{g[r]} / {f[r]}" for r in ROLES) + " |")
    top = max(s["levels"], key=lambda row: row["concurrency"])
    met = "met" if top["cpu_ratio"]["median"] <= s["goal"] else "missed"
    lines += [
        "",
        f"Goal: gym's CPU per rollout within {s['goal']:g}× of the floor's at concurrency {top['concurrency']}: "
        f"{top['cpu_ratio']['median']}× ({met}).",
        "",
    ]
    return lines
