"""Reliability under faults: every rollout exactly once, every failure typed, memory flat.

Each scenario runs the real ``gym collect`` (``--serve``, ``--isolation none``) on the counter
environment with the scripted model, injects its fault, and counts what the output holds:

- ``kill -9 <kind> server``: one server of the run killed mid-collection (the launcher restarts it,
  the collector retries the rollouts that failed meanwhile), in one run of the command;
- ``kill -9 collector, resume``: the collector (and with it its servers) killed mid-collection,
  then the same command run again;
- ``hung upstream``: the policy is ``openai_model`` in front of an upstream that accepts
  connections and never answers: every rollout must end as a typed failure, within its bounds;
- ``sessions``: many rollouts through one counter server: its resident memory before and after
  (agents close their sessions; the store is capped), which must stay flat.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import yaml

from benchmarks._common import COUNTER_TASKS, ROOT

SIZES = {"tiny": (80, 400), "small": (2_000, 20_000), "full": (2_000, 100_000)}  # (rollouts per fault, sessions)
N_TASKS = len(COUNTER_TASKS.read_text().splitlines())


def _config(tmp: Path, policy: dict[str, Any]) -> Path:
    path = tmp / "servers.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "head_server": {"port": 0},
                "counter": {"plugin": "counter"},
                "policy": policy,
                "agent": {"plugin": "simple_agent", "model_server": "policy", "resources_server": "counter"},
            }
        )
    )
    return path


def _scripted(delay_s: float) -> dict[str, Any]:
    turns = [{"tool_calls": [{"name": "increment_counter", "arguments": {"count": 3}}]}, {"text": "added 3"}]
    return {"plugin": "scripted", "turns": turns, "delay_s": delay_s}


def _collect(config: Path, out: Path, repeats: int, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gym_cli",
            "collect",
            "--serve",
            str(config),
            "--isolation",
            "none",
            "--input",
            str(COUNTER_TASKS),
            "--output",
            str(out),
            "--agent",
            "agent",
            "--repeats",
            str(repeats),
            "--no-profile",
            *extra,
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "GYM_LOG_LEVEL": "WARNING"},
    )


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def _wait_rows(proc: subprocess.Popen, out: Path, n: int, timeout_s: float = 300) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None:
        if out.exists() and len(out.read_bytes().splitlines()) >= n:
            return
        time.sleep(0.05)
    raise RuntimeError(f"fewer than {n} rows within {timeout_s} s (exit {proc.poll()})")


def _server_pid(proc: subprocess.Popen, instance: str) -> int:
    children = [
        int(p) for task in Path(f"/proc/{proc.pid}/task").iterdir() for p in (task / "children").read_text().split()
    ]
    marker = f"GYM_INSTANCE={instance}\0".encode()
    return next(pid for pid in children if marker in Path(f"/proc/{pid}/environ").read_bytes())


def _count(out: Path, expected: int, seconds: float, scenario: str) -> dict[str, Any]:
    keys = [(r["task_index"], r["rollout_index"]) for r in _lines(out)]
    failures = _lines(out.with_suffix(".failures.jsonl"))
    failed = {(r.get("task_index"), r.get("rollout_index")) for r in failures}
    done = set(keys)
    return {
        "scenario": scenario,
        "expected": expected,
        "rows": len(keys),
        "duplicates": len(keys) - len(done),
        "lost": expected - len(done | failed),
        "failures": len(failures),
        "failure_reasons": sorted({str(r.get("reason")) for r in failures}),
        "seconds": round(seconds, 1),
    }


def kill_server(n: int, victim: str) -> dict[str, Any]:
    repeats = -(-n // N_TASKS)
    with tempfile.TemporaryDirectory() as tmp:
        config, out = _config(Path(tmp), _scripted(0.02)), Path(tmp) / "out.jsonl"
        start = time.perf_counter()
        proc = _collect(config, out, repeats, "--parallel", "16", "--retry-backoff", "1", "--retries", "6")
        try:
            _wait_rows(proc, out, max(4, N_TASKS * repeats // 4))
            os.kill(_server_pid(proc, victim), signal.SIGKILL)
            proc.communicate(timeout=900)
        finally:
            if proc.poll() is None:
                proc.kill()
        return _count(out, N_TASKS * repeats, time.perf_counter() - start, f"kill -9 {victim} server")


def kill_collector(n: int) -> dict[str, Any]:
    repeats = -(-n // N_TASKS)
    with tempfile.TemporaryDirectory() as tmp:
        config, out = _config(Path(tmp), _scripted(0.02)), Path(tmp) / "out.jsonl"
        start = time.perf_counter()
        proc = _collect(config, out, repeats, "--parallel", "16")
        _wait_rows(proc, out, max(4, N_TASKS * repeats // 3))
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        again = _collect(config, out, repeats, "--parallel", "16")
        again.communicate(timeout=900)
        return _count(out, N_TASKS * repeats, time.perf_counter() - start, "kill -9 collector, resume")


def hung_upstream(n: int = 24) -> dict[str, Any]:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1024)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:  # accept and never answer
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except OSError:
                pass

    threading.Thread(target=accept, daemon=True).start()
    policy = {
        "plugin": "openai_model",
        "base_url": f"http://127.0.0.1:{listener.getsockname()[1]}/v1",
        "model": "m",
        "api_key": "unused",
        "timeout_s": 3.0,
    }
    repeats = -(-n // N_TASKS)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            config, out = _config(Path(tmp), policy), Path(tmp) / "out.jsonl"
            start = time.perf_counter()
            proc = _collect(
                config,
                out,
                repeats,
                "--parallel",
                "16",
                "--retries",
                "1",
                "--retry-backoff",
                "0.5",
                "--rollout-timeout",
                "20",
            )
            proc.communicate(timeout=600)
            return _count(out, N_TASKS * repeats, time.perf_counter() - start, "hung upstream (model timeout 3 s)")
    finally:
        stop.set()
        for conn in held:
            conn.close()
        listener.close()


def sessions(n: int) -> dict[str, Any]:
    """Rollouts through one counter server: its resident memory before and after."""
    from benchmarks._common import gym_servers, rss_mb
    from benchmarks.scale import collect_counter_rollouts
    from gym_cli.rollouts import run_async

    config = {
        "counter": {"plugin": "counter"},
        "policy_model": _scripted(0.0),
        "agent": {"plugin": "simple_agent", "model_server": "policy_model", "resources_server": "counter"},
    }

    with gym_servers(config) as state:
        pid = state.supervisor.pids()["counter"]
        run_async(
            collect_counter_rollouts(state.config.head_url, min(n, 1_000), parallel=64)
        )  # warm: allocator pools, caches
        before = round(rss_mb(pid) or 0, 1)
        start = time.perf_counter()
        result = run_async(collect_counter_rollouts(state.config.head_url, n, parallel=64))
        seconds = time.perf_counter() - start
        after = round(rss_mb(pid) or 0, 1)
    return {
        "scenario": f"{n:,} rollouts through counter",
        "expected": n,
        "rows": result["written"],
        "duplicates": 0,
        "lost": n - result["written"] - result["errors"],
        "failures": result["errors"],
        "failure_reasons": [],
        "seconds": round(seconds, 1),
        "rss_before_mb": before,
        "rss_after_mb": after,
    }


def run(size: str) -> dict[str, Any]:
    per_fault, n_sessions = SIZES[size]
    rows = [kill_server(per_fault, victim) for victim in ("agent", "counter", "policy")]
    rows.append(kill_collector(per_fault))
    rows.append(hung_upstream())
    rows.append(sessions(n_sessions))
    return {"scenarios": rows}
