"""Streaming collection: the collector's peak memory over large inputs, and how soon a large run resumes.

For each input size (generated counter tasks: 10k, 100k, 1M rows), ``gym collect --repeats 16`` runs as
its own process against one set of servers (counter, the scripted model answering at once,
simple_agent) and is interrupted (SIGINT, as Ctrl+C) once it has written ``ROWS`` rollouts: the
input is whole, only the run is short. Its peak resident memory over its whole life is the kernel's
``ru_maxrss`` of the reaped process. Goal: under 300 MB at 1M rows (16M pairs).

Resume: an output that holds a whole round of the largest input (one rollout of every task, copies of
a real row with their indices set) and a collection started over it: the seconds from starting the
process to its first new row (goal: under 10 s at 1M rows), and its peak memory.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import msgspec

from benchmarks._common import COUNTER_TASKS, ROOT, gym_servers

SIZES = {"tiny": (10_000,), "small": (10_000, 100_000), "full": (10_000, 100_000, 1_000_000)}
ROWS = {"tiny": 50, "small": 500, "full": 1_000}  # rollouts written before the run is interrupted
REPEATS = 16
TIMEOUT_S = 600.0
STOP_TIMEOUT_S = 60.0  # from SIGINT to the collector's exit
TURNS = [{"tool_calls": [{"name": "increment_counter", "arguments": {"count": 3}}]}, {"text": "added 3"}]


def _write_tasks(path: Path, n: int) -> None:
    """``n`` counter tasks: the example rows, cycled."""
    examples = [line + b"\n" for line in COUNTER_TASKS.read_bytes().splitlines() if line.strip()]
    block = b"".join(examples[i % len(examples)] for i in range(10_000))
    with path.open("wb") as f:
        for start in range(0, n, 10_000):
            f.write(block if n - start >= 10_000 else b"".join(block.splitlines(keepends=True)[: n - start]))


def _write_round(path: Path, template: bytes, n: int) -> None:
    """Rows ``(t, 0)`` for every task ``t < n``: ``template`` (a real row) with its indices set."""
    row = msgspec.json.decode(template)
    rest = msgspec.json.encode({k: v for k, v in row.items() if k not in ("task_index", "rollout_index")})[1:]
    with path.open("wb") as f:
        for start in range(0, n, 10_000):
            f.write(
                b"".join(
                    b'{"task_index":%d,"rollout_index":0,%s\n' % (t, rest) for t in range(start, min(n, start + 10_000))
                )
            )


def _new_rows(path: Path, offset: int) -> int:
    """How many whole lines ``path`` has past byte ``offset``."""
    try:
        with path.open("rb") as f:
            f.seek(offset)
            return f.read().count(b"\n")
    except FileNotFoundError:
        return 0


def _collect_until(head: str, tasks: Path, out: Path, rows: int, log: Path) -> dict[str, Any]:
    """``gym collect`` as its own process, interrupted once ``rows`` new rows are in ``out``: its peak
    RSS, the seconds to its first new row, and the rows it wrote."""
    offset = out.stat().st_size if out.exists() else 0
    argv = [
        sys.executable,
        "-m",
        "gym_cli",
        "collect",
        "--input",
        str(tasks),
        "--output",
        str(out),
        "--agent",
        "agent",
        "--repeats",
        str(REPEATS),
        "--head",
        head,
        "--no-profile",
        "--progress",
        "plain",
        "--progress-interval",
        "60",
    ]
    start = time.monotonic()
    with log.open("wb") as err:
        proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=err)
    first_row_s = None
    try:
        while proc.poll() is None and time.monotonic() - start < TIMEOUT_S:
            written = _new_rows(out, offset)
            if written and first_row_s is None:
                first_row_s = round(time.monotonic() - start, 2)
            if written >= rows:
                break
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        # wait4: the rusage of the reaped child, its peak RSS over its whole life included; bounded
        # (a collector that ignores the interrupt is an error, not a hang).
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while (reaped := os.wait4(proc.pid, os.WNOHANG))[0] == 0:
            if time.monotonic() > deadline:
                raise RuntimeError(f"gym collect did not stop within {STOP_TIMEOUT_S:g} s of SIGINT")
            time.sleep(0.05)
        _, status, usage = reaped
        proc.returncode = os.waitstatus_to_exitcode(status)
    finally:
        if proc.returncode is None:
            proc.kill()
            proc.wait()
    if first_row_s is None:
        raise RuntimeError(f"gym collect wrote no row within {TIMEOUT_S:g} s: {log.read_text()[-2000:]}")
    return {
        "peak_rss_mb": round(usage.ru_maxrss / 1024, 1),
        "first_row_s": first_row_s,
        "rows_written": _new_rows(out, offset),
        "exit_code": proc.returncode,
    }


def run(size: str) -> dict[str, Any]:
    config = {
        "counter": {"plugin": "counter"},
        "policy_model": {"plugin": "scripted", "turns": TURNS},
        "agent": {"plugin": "simple_agent", "model_server": "policy_model", "resources_server": "counter"},
    }
    inputs = []
    with tempfile.TemporaryDirectory() as tmp, gym_servers(config) as state:
        head = state.config.head_url
        for n in SIZES[size]:
            tasks, out = Path(tmp) / f"tasks_{n}.jsonl", Path(tmp) / f"out_{n}.jsonl"
            _write_tasks(tasks, n)
            measured = _collect_until(head, tasks, out, ROWS[size], Path(tmp) / "collect.log")
            inputs.append({"tasks": n, "input_mb": round(tasks.stat().st_size / 2**20, 1), **measured})
        # Resume the largest: a whole round done, rows as the run above wrote them.
        template = out.read_bytes().split(b"\n", 1)[0]
        resumed = Path(tmp) / "resumed.jsonl"
        _write_round(resumed, template, n)
        output_mb = round(resumed.stat().st_size / 2**20, 1)
        measured = _collect_until(head, tasks, resumed, 1, Path(tmp) / "resume.log")
        resume = {
            "tasks": n,
            "done_rows": n,
            "output_mb": output_mb,
            "first_new_row_s": measured["first_row_s"],
            "peak_rss_mb": measured["peak_rss_mb"],
        }
    return {"repeats": REPEATS, "stop_after_rows": ROWS[size], "inputs": inputs, "resume": resume}
