"""The benchmark harness at its tiny size, one measurement per test module (no timing assertions)."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
# The harness (benchmarks/) is a package of the checkout, not installed: tests of its pure helpers import it from here.
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


@dataclass
class Run:
    results: dict[str, Any]  # results.json
    markdown: str  # results.md


@pytest.fixture
def run_benchmark(tmp_path):
    """``run_benchmark(NAME)``: ``python -m benchmarks --size tiny --only NAME`` as a user runs it."""

    def run(name: str) -> Run:
        proc = subprocess.run(
            [sys.executable, "-m", "benchmarks", "--size", "tiny", "--only", name, "--output", str(tmp_path)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=280,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        results = json.loads((tmp_path / "results.json").read_text())
        # Every run records the machine and its load beside its one measurement.
        assert set(results) == {"size", "load_before", "load_after", "machine", name}
        return Run(results, (tmp_path / "results.md").read_text())

    return run
