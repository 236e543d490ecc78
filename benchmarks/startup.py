"""Start-up: seconds from launching ``gym run`` to "All servers ready", cold and warm, isolated or not."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any

from benchmarks._common import ROOT

CONFIG = ROOT / "plugins/resources/counter/configs/counter_scripted.yaml"


def time_to_ready(isolation: str, home: str, timeout_s: float = 600) -> float:
    start = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "gym_cli", "run", str(CONFIG), "--isolation", isolation, "head_server.port=0"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
        env={**os.environ, "GYM_HOME": home}, start_new_session=True,
    )
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if "All servers ready" in line:
                return round(time.perf_counter() - start, 2)
            if time.perf_counter() - start > timeout_s:
                break
        raise RuntimeError(f"gym run --isolation {isolation} did not get ready (exit {proc.poll()})")
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)


def run(size: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as home:
        return {
            "config": str(CONFIG.relative_to(ROOT)),
            "uv_cold_s": time_to_ready("uv", home),
            "uv_warm_s": time_to_ready("uv", home),
            "none_s": time_to_ready("none", home),
        }
