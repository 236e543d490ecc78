"""What gym's commands leave for people and machines when not on a terminal: tables whole in a pipe or
a log, no empty failures file, and --progress json's clock that starts with the rollouts."""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
COUNTER_SCRIPTED = ROOT / "plugins/resources/counter/configs/counter_scripted.yaml"
COUNTER_TASKS = ROOT / "plugins/resources/counter/data/example.jsonl"


def test_a_table_is_not_cut_to_80_columns_when_piped(gym):
    listed = gym.run("plugin", "list", "--json", env={"COLUMNS": None})
    plugins = {row["name"]: row for row in json.loads(listed.stdout)}
    table = gym.run("plugin", "list", env={"COLUMNS": None})  # stdout is a pipe, and COLUMNS unset
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    # Each server type is one line, with its source folder and the start of its description.
    for name in ("local_llama", "counter", "simple_agent"):
        [line] = [line for line in lines if line.split(" ", 1)[0] == name]
        assert plugins[name]["description"][:30] in line, line


def test_collect_json_progress_clock_starts_with_the_rollouts_and_no_empty_failures_file(tmp_path, gym):
    """With --serve the servers take seconds to start: that is not collection time, in the first event
    as in the last, so elapsed_s never goes back. Nothing failed: no failures file."""
    out = tmp_path / "rollouts.jsonl"
    proc = gym.run(
        "collect",
        "--serve",
        str(COUNTER_SCRIPTED),
        "--isolation",
        "none",
        "--set",
        "policy_model.delay_s=0.2",
        "--input",
        str(COUNTER_TASKS),
        "--output",
        str(out),
        "--repeats",
        "2",
        "--parallel",
        "4",
        "--progress",
        "json",
        "--progress-interval",
        "0.1",
        "--no-profile",
        env={"GYM_HOME": str(tmp_path / "home")},
    )
    assert proc.returncode == 0, proc.stderr
    # The start-up's own events (test_collect_startup.py) come first; the clock is the rollouts'.
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    events = [event for event in events if event["event"] != "startup"]
    assert events[0]["event"] == "progress" and events[-1]["event"] == "done"
    elapsed = [event["elapsed_s"] for event in events]
    assert elapsed == sorted(elapsed), elapsed
    done = events[-1]
    assert done["done"] == 12 and done["rollouts_per_s"] == done["done"] / done["elapsed_s"]
    assert f"in {done['elapsed_s']:.1f} s" in proc.stderr  # the summary line says the same
    assert len(out.read_text().splitlines()) == 12
    assert not (tmp_path / "rollouts.failures.jsonl").exists()
