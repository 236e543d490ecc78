"""The test tiers of the root conftest.py: `uv run pytest` leaves the tiers out, --full runs them, -m one
tier, a named path all its tests; each tier's paths exist, so that a renamed file cannot slip into the
fast tier unnoticed."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FILE = "tests/test_signal_handlers.py"
FAST = {
    f"{FILE}::test_a_fixture_that_installs_handlers_leaves_none_for_the_test",
    f"{FILE}::test_handlers_a_test_installs_are_gone_after_it",
}
RAY = {f"{FILE}::test_a_ray_cluster_started_by_a_fixture_leaves_the_session_handlers"}


def test_every_path_of_a_tier_exists(tier_paths):
    for tier, entries in tier_paths.items():
        assert entries, tier
        for entry in entries:
            path, _, name = entry.partition("::")
            assert (ROOT / path).exists(), f"{tier}: {path} does not exist"
            if name:
                defined = name.split("[", 1)[0].rsplit("::", 1)[-1]  # a test or class, without its parameters
                assert re.search(rf"^\s*(async def|def|class) {defined}\b", (ROOT / path).read_text(), re.M), (
                    f"{tier}: {path} has no test {name}"
                )


@pytest.mark.parametrize(
    ("nodeid", "tiers"),
    [
        ("plugins/models/local_llama/tests/test_engine.py::test_generate", ["model"]),  # a folder
        ("plugins/models/local_llama_extra/tests/test_engine.py::test_generate", []),  # not that folder
        ("plugins/resources/code_gen/tests/test_ray_fanout.py::TestX::test_y[1]", ["ray", "sandbox"]),
        ("tests/test_signal_handlers.py::test_a_ray_cluster_started_by_a_fixture_leaves_the_session_handlers", ["ray"]),
        ("tests/test_signal_handlers.py::test_handlers_a_test_installs_are_gone_after_it", []),
        # every parameter set of a test named without them; one parameter set named with it
        ("packages/gym-cli/tests/test_run.py::test_run_ready_then_ctrl_c_leaves_nothing_behind[none]", ["slow"]),
        (
            "packages/gym-cli/tests/test_example_rollouts.py::test_the_example_rollouts_are_current[code_gen]",
            ["sandbox"],
        ),
        ("packages/gym-cli/tests/test_example_rollouts.py::test_the_example_rollouts_are_current[math]", []),
    ],
)
def test_tiers_of_a_test(tiers_of, nodeid, tiers):
    assert tiers_of(nodeid) == tiers


def test_every_tier_is_a_registered_marker(tier_paths, pytestconfig):
    registered = {line.split(":", 1)[0] for line in pytestconfig.getini("markers")}
    assert set(tier_paths) <= registered


def collect(*args: str) -> tuple[set[str], str]:
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return {line for line in proc.stdout.splitlines() if line.startswith(FILE + "::")}, proc.stdout


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ((), FAST),  # the default run: the configured testpaths, without the tiers
        (("--full",), FAST | RAY),
        (("-m", "ray"), RAY),
    ],
    ids=["default", "full", "one-tier"],
)
def test_which_tests_a_run_selects(args, expected):
    selected, output = collect("-o", f"testpaths={FILE}", *args)
    assert selected == expected
    assert ("fast tier: 1 test of the" in output) == (not args)


def test_a_named_path_runs_all_its_tests():
    assert collect(FILE)[0] == FAST | RAY


def test_a_run_of_the_whole_suite_is_the_fast_tier_on_two_workers():
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-o", f"testpaths={FILE}", "-p", "no:cacheprovider", "-rA", "-v"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    # Each worker was told the run is the fast tier: the Ray test ran on neither.
    assert {line.split()[1] for line in proc.stdout.splitlines() if line.startswith("PASSED ")} == FAST
    if len(os.sched_getaffinity(0)) >= 2:  # each test file on one worker
        assert "created: 2/2 workers" in proc.stdout and "scheduling tests via LoadFileScheduling" in proc.stdout
