"""100,000 rollouts in flight in one collector: its peak memory, and every rollout scored within
its deadline however long it waited for its turn.

The collector is ``gym collect``'s own (:mod:`benchmarks._scale_collector`, a process of its own so
that its peak resident memory, VmHWM, is its alone): one rollout of each of ``n`` generated counter
tasks (the example rows, cycled, in a JSONL file it reads as ``gym collect`` does), all ``n`` in
flight (``--parallel n``), against a minimal agent on loopback (:mod:`benchmarks._delay_agent`) that
answers each ``/run`` after ``DELAY_S``. The client has ``gym collect``'s pool, 1,000 connections per
server: that many rollouts send at once, one connection and one descriptor each; the others are in
flight waiting their turn (100,000 connections would not fit the open-files limit or the agent's
listen queue). KiB per rollout: (peak − memory before the run) / ``n``. The rollout deadline
(``--rollout-timeout``) is ``DEADLINE_S``, shorter than the run: each rollout takes ``DELAY_S`` once
sent, but the last ones wait most of the run for their turn, and a deadline that counted the wait
would fail them.

Before and after: with ``GYM_BENCH_BASELINE=DIR``, a checkout of an earlier commit (``git worktree
add DIR COMMIT``), the same run is measured with that checkout's gym-cli and gym-core first on
PYTHONPATH, against the same agent. Goal: under 300 MB at 100,000 in flight.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from gym_core.config import free_port

from benchmarks._common import ROOT, peak_rss_mb, spawn, wait_http
from benchmarks.collect_memory import _write_tasks

SIZES = {"tiny": 2_000, "small": 100_000, "full": 100_000}
DELAY_S = 0.2  # each /run's answer
CONNECTIONS = 1_000  # gym collect's pool per server (ClientConfig.pool_limit_per_host)
GOAL_MB = 300
DEADLINE_S = 20.0  # each rollout's, --rollout-timeout: a 100,000-rollout run takes about a minute here
TIMEOUT_S = 1_800  # one collector run, at most


def _commit(checkout: Path) -> str:
    try:
        head = subprocess.run(
            ["git", "-C", str(checkout), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            [
                "git",
                "-C",
                str(checkout),
                "status",
                "--porcelain",
                "--untracked-files=no",
                "--",
                "packages/gym-cli",
                "packages/gym-core",
            ],
            capture_output=True,
            text=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "?"
    return head + (" (uncommitted changes)" if dirty else "")


def _collect(tasks: Path, out: Path, url: str, n: int, checkout: Path | None) -> dict[str, Any]:
    env = dict(os.environ)
    if checkout is not None:
        if not (checkout / "packages/gym-cli/src/gym_cli/rollouts.py").is_file():
            raise RuntimeError(f"GYM_BENCH_BASELINE={checkout}: not a checkout of gym (no packages/gym-cli/src)")
        source = f"{checkout}/packages/gym-cli/src{os.pathsep}{checkout}/packages/gym-core/src"
        env["PYTHONPATH"] = source + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks._scale_collector", str(tasks), str(out), url, str(n), str(DEADLINE_S)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"the collector failed ({proc.returncode}): {proc.stderr[-3000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result["commit"] = _commit(checkout or ROOT)
    if not result["collector_source"].startswith(str(checkout or ROOT)):
        raise RuntimeError(f"the collector ran {result['collector_source']}, not the checkout at {checkout or ROOT}")
    result["kib_per_rollout"] = round(1024 * (result["peak_rss_mb"] - result["rss_before_mb"]) / n, 2)
    return result


def run(size: str) -> dict[str, Any]:
    n = SIZES[size]
    baseline = os.environ.get("GYM_BENCH_BASELINE")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    runs: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp, spawn("benchmarks._delay_agent", str(port), str(DELAY_S)) as agent:
        tasks = Path(tmp) / "tasks.jsonl"
        _write_tasks(tasks, n)
        input_mb = round(tasks.stat().st_size / 2**20, 1)
        wait_http(url + "/")
        if baseline:
            runs["before"] = _collect(tasks, Path(tmp) / "before.jsonl", url, n, Path(baseline))
        runs["after"] = _collect(tasks, Path(tmp) / "after.jsonl", url, n, None)
        agent_mb = round(peak_rss_mb(agent.pid) or 0, 1)
    return {
        "in_flight": n,
        "connections": CONNECTIONS,
        "delay_s": DELAY_S,
        "deadline_s": DEADLINE_S,
        "goal_mb": GOAL_MB,
        "input_mb": input_mb,
        "agent_peak_rss_mb": agent_mb,
        "runs": runs,
    }
