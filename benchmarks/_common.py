"""Helpers shared by the measurements: processes, ports, percentiles, memory."""

from __future__ import annotations

import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from gym_core import ServerClient

ROOT = Path(__file__).resolve().parents[1]
COUNTER_TASKS = ROOT / "plugins/resources/counter/data/example.jsonl"


class TimedClient(ServerClient):
    """A ServerClient that records the latency of every ``/run``: one rollout each."""

    latencies: list[float]

    async def request(self, method: str, server: str, path: str, **kwargs: Any) -> bytes:
        start = time.perf_counter()
        try:
            return await super().request(method, server, path, **kwargs)
        finally:
            if path == "/run":
                self.latencies.append(time.perf_counter() - start)


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def spread(values: list[float], digits: int = 3) -> dict[str, float]:
    """The true median of ``values`` (of two, their mean), with their min and max, rounded."""
    return {
        "median": round(statistics.median(values), digits),
        "min": round(min(values), digits),
        "max": round(max(values), digits),
    }


def median_round(rounds: list[dict[str, Any]], rate: str = "rollouts_per_s") -> dict[str, Any]:
    """Rounds of one measurement as one: each numeric field the true median over the rounds
    (:func:`spread`; of two rounds, their mean, not the larger), ``errors`` summed, the rate's
    ``min`` and ``max`` (``<rate>_min``, ``<rate>_max``) and every round's rate (``rounds_per_s``);
    fields that are not numbers (lists...) from the round whose rate is the lower middle one."""
    ordered = sorted(rounds, key=lambda r: r[rate])
    merged = dict(ordered[(len(ordered) - 1) // 2])
    for key, value in merged.items():
        values = [r[key] for r in rounds]
        if (
            isinstance(value, (int, float))
            and not isinstance(value, bool)
            and all(isinstance(v, (int, float)) for v in values)
        ):
            merged[key] = spread(values)["median"]
    figures = spread([r[rate] for r in rounds])
    merged.update(
        {
            f"{rate}_min": figures["min"],
            f"{rate}_max": figures["max"],
            "rounds_per_s": [r[rate] for r in rounds],
            "errors": sum(r.get("errors", 0) for r in rounds),
        }
    )
    return merged


def _status_mb(pid: int, key: str) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def peak_rss_mb(pid: int) -> float | None:
    """Peak resident memory of a process (VmHWM), in MiB."""
    return _status_mb(pid, "VmHWM")


def rss_mb(pid: int) -> float | None:
    """Resident memory of a process now (VmRSS), in MiB."""
    return _status_mb(pid, "VmRSS")


_TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pids: list[int]) -> float:
    """CPU time (user + system) used so far by this process and by ``pids``."""
    total = time.process_time()
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / _TICK  # utime, stime
    return total


def wait_http(url: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=1):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"{url} did not answer within {timeout_s} s")


@contextlib.contextmanager
def spawn(module: str, *args: str) -> Iterator[subprocess.Popen]:
    """``python -m module args`` as a child process, killed on exit."""
    proc = subprocess.Popen([sys.executable, "-m", module, *args], cwd=ROOT)
    try:
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


@contextlib.contextmanager
def gym_servers(config: dict[str, Any]) -> Iterator[Any]:
    """The servers of ``config`` as ``gym run --isolation none`` starts them: one process each."""
    from rich.console import Console

    from gym_cli.launch import launch

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "config.yaml"
        path.write_text(yaml.safe_dump({"head_server": {"port": 0}, **config}))
        quiet = Console(quiet=True)
        os.environ.setdefault("GYM_LOG_LEVEL", "WARNING")
        with launch([str(path)], isolation="none", console=quiet, env_file=None) as state:
            yield state


async def lifespan(receive: Any, send: Any) -> None:
    """The ASGI lifespan protocol for the harness's bare apps: nothing to start or stop."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]
