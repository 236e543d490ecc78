"""Start-up: seconds from launching ``gym run`` to "All servers ready", cold and warm, isolated or not.

Cold: an empty ``GYM_HOME``, so every plugin's environment is built (uv's package cache stays warm);
warm: the same ``GYM_HOME`` again, environments reused; then ``--isolation none``. The ``gym``
command of this environment is run as a subprocess and gets SIGINT once ready.
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

from benchmarks._common import ROOT

CONFIG = ROOT / "plugins/resources/counter/configs/counter_scripted.yaml"


def time_to_ready(isolation: str, home: str, timeout_s: float = 600) -> float:
    start = time.perf_counter()
    gym = Path(sys.executable).with_name("gym")
    command = [str(gym)] if gym.exists() else [sys.executable, "-m", "gym_cli"]
    proc = subprocess.Popen(
        [*command, "run", str(CONFIG), "--isolation", isolation, "head_server.port=0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
        env={**os.environ, "GYM_HOME": home},
        start_new_session=True,
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
    result: dict[str, Any] = {"config": str(CONFIG.relative_to(ROOT)), "uv_cold_s": None, "uv_warm_s": None}
    with tempfile.TemporaryDirectory() as home:
        if size != "tiny":  # the tiny run (the harness's test) builds no environments
            result["uv_cold_s"] = time_to_ready("venv", home)
            result["uv_warm_s"] = time_to_ready("venv", home)
        result["none_s"] = time_to_ready("none", home)
    return result
