"""What gym's verification adds to a TRL GRPO step (SmolLM2-135M on the CPU, 8 completions a step).

TRL and torch live only in gym-train's venv, never in the root one that runs the benchmarks, so this
measurement builds (or reuses) that venv the way ``tests/test_train_venv.py`` does and runs
``python -m gym_train.trl.overhead`` there as a subprocess: the same GRPO steps with rewards from
gym's math server and with the same grader called in the trainer's process (see that module).
Reported: each variant's mean step time and their ratio, the reward call's own time per step, and
``added_pct``, gym's extra reward time as a share of the step (the goal: under 5 %).
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from benchmarks._common import ROOT

SIZES = {"tiny": (1, 1), "small": (2, 1), "full": (3, 2)}  # steps per run, runs per variant
TIMEOUT_S = 3600


def _training_venv_module() -> Any:
    """tests/test_train_venv.py, which knows how the training venv is built (one way to build it)."""
    spec = importlib.util.spec_from_file_location("gym_test_train_venv", ROOT / "tests" / "test_train_venv.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run(size: str) -> dict[str, Any]:
    from gym_cli.venvs.layout import venv_python

    steps, repeats = SIZES[size]
    venv_tools = _training_venv_module()
    python = venv_python(venv_tools.training_venv())
    with tempfile.TemporaryDirectory(prefix="gym-trainer-overhead-") as work:
        out = Path(work) / "overhead.json"
        proc = subprocess.run(
            [
                str(python),
                "-m",
                "gym_train.trl.overhead",
                "--steps",
                str(steps),
                "--repeats",
                str(repeats),
                "--json",
                str(out),
            ],
            cwd=ROOT,
            env=venv_tools._environ(),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=TIMEOUT_S,
        )
        if proc.returncode != 0:
            raise RuntimeError(
                f"gym_train.trl.overhead failed ({proc.returncode}):\n{(proc.stdout + proc.stderr)[-4000:]}"
            )
        results = json.loads(out.read_text())
    return results
