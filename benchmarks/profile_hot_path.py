"""Profile the orchestration hot path: py-spy on every server process and on the collector.

``python -m benchmarks.profile_hot_path [scripted|proxy] [--concurrency 64] [--seconds 15] [--output DIR]``

Needs py-spy (not a dependency of gym: ``uv pip install py-spy``). Runs the orchestration
benchmark's servers and collector at one concurrency for a while, records each process with
``py-spy record --format raw`` (collapsed stacks), and prints for each process the functions with
the most samples on top of the stack ("self") and the libraries holding the most samples anywhere
on the stack ("incl."). The raw files stay in the output directory (flame graphs: any
collapsed-stack viewer, e.g. speedscope).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from gym_core import ClientConfig, ServerClient
from gym_core.config import free_port

from benchmarks._common import COUNTER_TASKS, gym_servers, spawn, wait_http
from benchmarks.orchestration import gym_config
from gym_cli.rollouts import CollectOptions, CollectSummary, collect_rollouts, read_tasks, run_async

LIBRARIES = (
    "litestar",
    "aiohttp",
    "uvicorn",
    "msgspec",
    "multidict",
    "yarl",
    "asyncio",
    "uvloop",
    "logging",
    "gym_core",
    "gym_cli",
    "gym_simple_agent",
    "gym_scripted",
    "gym_openai_model",
    "gym_counter",
)


async def _load(head_url: str, concurrency: int, seconds: float) -> int:
    tasks = read_tasks(COUNTER_TASKS)
    client = await ServerClient.from_head(head_url, config=ClientConfig(timeout_s=600, max_attempts=1))
    done = 0
    with tempfile.TemporaryDirectory() as tmp:
        options = CollectOptions(Path(tmp) / "out.jsonl", Path(tmp) / "failures.jsonl", "agent", 1, concurrency)
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            pairs = [(i % len(tasks), 0) for i in range(4 * concurrency)]
            summary = await collect_rollouts(client, tasks, pairs, options, CollectSummary())
            done += summary.done
    await client.close()
    return done


def _library(frame: str) -> str | None:
    for lib in LIBRARIES:
        if f"/{lib}/" in frame or f"{lib}/" in frame.split(" (")[-1]:
            return lib
    return None


def summarize(raw: Path, top: int = 15) -> str:
    self_counts: collections.Counter[str] = collections.Counter()
    incl: collections.Counter[str] = collections.Counter()
    by_lib: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack:
            continue
        count = int(count_text)
        frames = stack.split(";")
        total += count
        self_counts[frames[-1]] += count
        libs = [_library(f) for f in frames]
        for lib in set(libs) - {None}:
            incl[lib] += count
        by_lib[next((lib for lib in reversed(libs) if lib), "other")] += count
    if not total:
        return f"{raw.name}: no samples"
    lines = [f"== {raw.stem}: {total} samples", "  self:"]
    lines += [f"    {100 * n / total:5.1f} %  {frame}" for frame, n in self_counts.most_common(top)]
    lines.append("  self by library: " + ", ".join(f"{lib} {100 * n / total:.0f} %" for lib, n in by_lib.most_common()))
    lines.append("  incl. by library: " + ", ".join(f"{lib} {100 * n / total:.0f} %" for lib, n in incl.most_common()))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.profile_hot_path", description=__doc__.splitlines()[0])
    parser.add_argument("variant", nargs="?", choices=("scripted", "proxy"), default="scripted")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=15)
    parser.add_argument("--output", type=Path, default=Path(tempfile.gettempdir()) / "gym-profile")
    args = parser.parse_args(argv)
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(py_spy).exists():
        print("py-spy is not installed: uv pip install py-spy", file=sys.stderr)
        return 2
    args.output.mkdir(parents=True, exist_ok=True)
    stub_port = free_port()
    stub_url = f"http://127.0.0.1:{stub_port}"
    with contextlib.ExitStack() as stack:
        if args.variant == "proxy":
            stack.enter_context(spawn("benchmarks._openai_stub", str(stub_port)))
            wait_http(stub_url + "/v1/chat/completions")
        state = stack.enter_context(gym_servers(gym_config(args.variant, stub_url)))
        run_async(_load(state.config.head_url, args.concurrency, 1.0))  # warm up: connections, caches
        pids: dict[str, Any] = {**state.supervisor.pids(), "collector": os.getpid()}
        recorders = [
            subprocess.Popen(
                [
                    py_spy,
                    "record",
                    "--pid",
                    str(pid),
                    "--duration",
                    str(int(args.seconds)),
                    "--rate",
                    "250",
                    "--format",
                    "raw",
                    "--nonblocking",
                    "--output",
                    str(args.output / f"{name}.txt"),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            for name, pid in pids.items()
        ]
        time.sleep(0.5)
        start = time.perf_counter()
        done = run_async(_load(state.config.head_url, args.concurrency, args.seconds))
        elapsed = time.perf_counter() - start
        for recorder in recorders:
            recorder.wait()
    print(
        f"{args.variant}, concurrency {args.concurrency}: {done} rollouts in {elapsed:.1f} s "
        f"({done / elapsed:.0f}/s, slowed by sampling); raw stacks in {args.output}"
    )
    for name in pids:
        path = args.output / f"{name}.txt"
        print(summarize(path) if path.exists() else f"{name}: no profile")
    return 0


if __name__ == "__main__":
    sys.exit(main())
