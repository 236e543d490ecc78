"""What ``gym collect`` shows while it runs: ``--progress json`` events that add up and end with the
run's summary, readable ``--progress plain`` lines, the rich live panel with its figures, and the
bounded-memory latency quantiles behind them."""

from __future__ import annotations

import io
import json
import math
import random
from collections import Counter
from pathlib import Path

import msgspec
import pytest
from rich.console import Console
from rich.text import Text

from gym_core.testing import running_servers

from gym_cli.live import (
    JsonReporter,
    LatencySketch,
    PlainReporter,
    ProgressEvent,
    RichReporter,
    describe_progress,
    make_reporter,
    progress_event,
)
from gym_cli.rollouts import CollectSummary

COUNTER_TURNS = [{"tool_calls": [{"name": "increment_counter", "arguments": {"count": 3}}]}, {"text": "added 3"}]


def two_environments(delay_s: float = 0.0) -> dict:
    """counter and string_match, each through its own agent, both played by scripted models."""
    return {
        "counter": {"plugin": "counter"},
        "policy": {"plugin": "scripted", "turns": COUNTER_TURNS, "delay_s": delay_s},
        "agent": {"plugin": "simple_agent", "model_server": "policy", "resources_server": "counter"},
        "words": {"plugin": "string_match"},
        "answerer": {"plugin": "scripted", "turns": [{"text": "It is \\boxed{Paris}."}], "delay_s": delay_s},
        "word_agent": {
            "plugin": "simple_agent",
            "model_server": "answerer",
            "resources_server": "words",
            "max_steps": 1,
        },
    }


def counter_task(initial, expected=3) -> dict:
    return {
        "responses_create_params": {"input": "add 3"},
        "initial_count": initial,
        "expected_count": expected,
        "agent_ref": {"name": "agent"},
    }


def words_task(expected: str) -> dict:
    return {
        "responses_create_params": {"input": "capital of France?"},
        "expected_answer": expected,
        "extraction_mode": "boxed",
        "agent_ref": {"name": "word_agent"},
    }


# counter: rewards 1, 0 and a task the environment refuses (a failure); string_match: rewards 1, 0, 0.
TASKS = [
    counter_task(0),
    counter_task(1),
    counter_task("not a number"),
    words_task("Paris"),
    words_task("Rome"),
    words_task("Berlin"),
]
REPEATS = 3


@pytest.fixture(scope="module")
def servers():
    with running_servers(two_environments(delay_s=0.005)) as config:
        yield config


def collect(gym, tmp_path: Path, head: str, *args: str, env: dict[str, str] | None = None):
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps(t) + "\n" for t in TASKS))
    out = tmp_path / "out.jsonl"
    result = gym(
        "collect",
        "--input",
        str(tasks),
        "--output",
        str(out),
        "--head",
        head,
        "--repeats",
        str(REPEATS),
        "--parallel",
        "3",
        *args,
        env=env,
    )
    return result, out


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_json_progress_events_add_up_and_end_with_the_summary(tmp_path, servers, gym):
    result, out = collect(gym, tmp_path, servers.head_url, "--progress", "json", "--progress-interval", "0.01")
    assert result.exit_code == 1, result.stderr  # the refused counter task failed
    # stdout is nothing but events: every line decodes strictly as one.
    events = [msgspec.json.decode(line, type=ProgressEvent) for line in result.stdout.splitlines()]
    assert [e.event for e in events][0] == "progress" and [e.event for e in events].count("done") == 1
    assert events[-1].event == "done"
    for before, after in zip(events, events[1:]):
        assert after.done >= before.done and after.failed >= before.failed
    for event in events:
        assert event.total == len(TASKS) * REPEATS and event.skipped == 0
        assert event.done + event.failed <= event.total
        assert 0 <= event.in_flight <= 3
        assert event.done == sum(e.rollouts for e in event.environments.values())
        assert event.failed == sum(event.failures.values())

    final = events[-1]
    rows, failures = lines(out), lines(tmp_path / "out.failures.jsonl")
    assert (final.done, final.failed, final.in_flight, final.interrupted) == (len(rows), len(failures), 0, False)
    assert final.done == 5 * REPEATS and final.failed == REPEATS
    assert final.failures == dict(Counter(f["reason"] for f in failures)) == {"validation_error": REPEATS}
    assert final.mean_reward == pytest.approx(sum(r["reward"] for r in rows) / len(rows))
    assert set(final.environments) == {"counter", "string_match"}
    for name, block in final.environments.items():
        rewards = [r["reward"] for r in rows if r["environment"] == name]
        assert block.rollouts == len(rewards) and block.mean_reward == pytest.approx(sum(rewards) / len(rewards))
    assert final.environments["counter"].mean_reward == pytest.approx(0.5)
    assert final.environments["string_match"].mean_reward == pytest.approx(1 / 3)
    assert final.latency_p50_s <= final.latency_p99_s
    # The same figures as the summary line the command prints on stderr.
    assert (
        f"{final.done} rollouts collected, {final.failed} failed, 0 already done in {final.elapsed_s:.1f} s "
        f"({final.rollouts_per_s:.2f} rollouts/s)"
    ) in result.stderr
    # The profile went to stderr (and to its file), not among the events.
    assert "reward profile" in result.stderr and (tmp_path / "out.profile.json").exists()


def test_json_progress_of_a_finished_collection_is_one_done_event(tmp_path, servers, gym):
    first, _ = collect(gym, tmp_path, servers.head_url, "--progress", "json", "--no-profile")
    again, _ = collect(gym, tmp_path, servers.head_url, "--progress", "json", "--no-profile")
    assert first.exit_code == again.exit_code == 1  # the refused task fails each time
    events = [msgspec.json.decode(line, type=ProgressEvent) for line in again.stdout.splitlines()]
    assert events[-1].event == "done"
    assert (events[-1].skipped, events[-1].done, events[-1].failed) == (5 * REPEATS, 0, REPEATS)


def test_plain_progress_prints_readable_lines_and_a_final_line(tmp_path, servers, gym):
    result, out = collect(
        gym, tmp_path, servers.head_url, "--progress", "plain", "--progress-interval", "0.01", "--no-profile"
    )
    assert result.exit_code == 1, result.stderr
    progress = [line for line in result.stderr.splitlines() if line.startswith("collecting ")]
    assert progress and progress[0].startswith(f"collecting 0/{len(TASKS) * REPEATS} (0%)")
    final = [line for line in result.stderr.splitlines() if line.startswith("done ")]
    assert len(final) == 1
    total = len(TASKS) * REPEATS
    assert final[0].startswith(f"done {total}/{total} (100%) | ")
    assert f"failed {REPEATS} (validation_error {REPEATS})" in final[0]
    assert "by environment: string_match 0.333 (9), counter 0.500 (6)" in final[0]  # the largest first
    assert "latency p50 " in final[0] and " p99 " in final[0]
    # Plain text for CI logs: no escape sequences, no carriage returns redrawing a bar.
    assert "\x1b" not in result.stderr and "\r" not in result.stderr
    assert result.stdout == ""  # nothing to stdout without --profile


def test_auto_progress_on_a_terminal_is_the_live_panel(tmp_path, servers, gym):
    """FORCE_COLOR makes rich treat stderr as a terminal, as a person's shell is."""
    result, _ = collect(gym, tmp_path, servers.head_url, "--no-profile", env={"FORCE_COLOR": "1", "COLUMNS": "160"})
    assert result.exit_code == 1, result.stderr
    text = Text.from_ansi(result.stderr).plain  # without the colour and cursor codes
    last_panel = text[text.rindex("gym collect") :]
    total = len(TASKS) * REPEATS
    assert f"{total}/{total}" in text and "collecting" in text
    assert "string_match 0.333 (9), counter 0.500 (6)" in last_panel
    assert f"{REPEATS}  (validation_error {REPEATS})" in last_panel
    assert "mean reward" in last_panel and "0.400" in last_panel and "p99" in last_panel
    assert not any(line.startswith("done ") for line in text.splitlines())  # not the plain lines


def test_auto_progress_without_a_terminal_is_plain():
    console = Console(file=io.StringIO(), force_terminal=False)
    assert isinstance(make_reporter("auto", console), PlainReporter)
    terminal = Console(file=io.StringIO(), force_terminal=True)
    assert isinstance(make_reporter("auto", terminal), RichReporter)
    assert isinstance(make_reporter("json", console), JsonReporter)
    with pytest.raises(ValueError, match="choose one of auto, rich, plain, json"):
        make_reporter("fancy", console)


def test_progress_interval_must_be_positive(tmp_path, gym):
    result = gym("collect", "--input", "x.jsonl", "--output", str(tmp_path / "o.jsonl"), "--progress-interval", "0")
    assert result.exit_code == 2 and "--progress-interval" in result.output
    result = gym("collect", "--input", "x.jsonl", "--output", str(tmp_path / "o.jsonl"), "--progress", "fancy")
    assert result.exit_code == 2 and "--progress" in result.output and "plain" in result.output


def filled_summary() -> CollectSummary:
    summary = CollectSummary(total=20, skipped=2, done=10, failed=3, retried=4, in_flight=5, reward_sum=7.0)
    summary.environment_done.update({"counter": 6, "[bold]math": 4})
    summary.environment_reward_sum.update({"counter": 3.0, "[bold]math": 4.0})
    summary.failure_reasons.update({"validation_error": 2, "ServerTimeoutError": 1})
    for ms in range(1, 101):  # 1 ms ... 100 ms
        summary.latency.add(ms / 1000)
    return summary


def test_the_rich_panel_renders_the_figures():
    console = Console(record=True, force_terminal=True, width=160, file=io.StringIO())
    reporter = RichReporter(console)
    summary = filled_summary()
    reporter.start(summary)
    reporter.update(summary)
    reporter.stop(summary)
    text = console.export_text()
    assert "collecting" in text and "15/20" in text  # the bar: skipped + done + failed
    assert "in flight 5" in text and "rollouts/s" in text
    assert "mean reward" in text and "0.700" in text
    # Names are text, not markup: "[bold]math" is shown as written.
    assert "counter 0.500 (6)" in text and "[bold]math 1.000 (4)" in text
    assert "validation_error 2, ServerTimeoutError 1" in text and "retried 4" in text
    assert "p50 50 ms" in text and "p99 99 ms" in text


def test_progress_event_of_a_summary():
    event = progress_event(filled_summary(), "done")
    assert event.event == "done" and (event.total, event.skipped, event.done, event.failed) == (20, 2, 10, 3)
    assert event.mean_reward == pytest.approx(0.7)
    assert event.environments["counter"].mean_reward == pytest.approx(0.5)
    assert list(event.failures) == ["validation_error", "ServerTimeoutError"]  # most frequent first
    assert event.latency_p50_s == pytest.approx(0.0505, rel=0.01)  # the median of 0.001 .. 0.100
    assert event.latency_p99_s == pytest.approx(0.099, rel=0.01)
    line = describe_progress(event)
    assert (
        line.startswith("done 15/20 (75%) | ")
        and "failed 3 (validation_error 2, ServerTimeoutError 1), retried 4" in line
    )
    empty = progress_event(CollectSummary(total=4))
    assert (empty.mean_reward, empty.latency_p50_s, empty.environments) == (None, None, {})
    assert "mean reward - " in describe_progress(empty) and "latency p50 - p99 -" in describe_progress(empty)


def nearest_rank(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(1, math.ceil(q * len(ordered))) - 1]


@pytest.mark.parametrize("q", [0.0, 0.01, 0.5, 0.9, 0.99, 1.0])
def test_latency_quantiles_are_within_the_relative_error(q):
    rng = random.Random(16)
    # Spread over six orders of magnitude, as rollouts from instant to an hour are.
    values = [10 ** rng.uniform(-3, 3) for _ in range(20_000)]
    sketch = LatencySketch(relative_error=0.01)
    for value in values:
        sketch.add(value)
    exact = nearest_rank(values, q)
    assert sketch.quantile(q) == pytest.approx(exact, rel=0.01)
    assert sketch.count == len(values) and sketch.min == min(values) and sketch.max == max(values)


def test_latency_sketch_memory_is_bounded_and_edges_are_exact():
    sketch = LatencySketch()
    assert sketch.quantile(0.5) is None
    sketch.add(0.25)
    assert sketch.quantile(0.0) == sketch.quantile(0.5) == sketch.quantile(1.0) == 0.25  # clamped to min and max
    for value in (0.0, -1.0, 1e-12, 1e12, float("inf"), float("nan")):  # clock oddities are clamped, never an error
        sketch.add(value)
    assert sketch.min == LatencySketch.MIN_S and sketch.max == LatencySketch.MAX_S
    value = 1e-8
    while value < 1e9:  # 0.1% steps across and beyond the whole range: far more values than buckets
        sketch.add(value)
        value *= 1.001
    assert sketch.count > 30_000
    assert len(sketch.buckets) <= 1500  # the whole clamped range at 1%, whatever the count
    with pytest.raises(ValueError):
        sketch.quantile(1.5)
    with pytest.raises(ValueError):
        LatencySketch(relative_error=0)


def test_json_reporter_writes_one_object_per_line():
    sink = io.StringIO()
    reporter = JsonReporter(sink, interval_s=5)
    summary = filled_summary()
    reporter.start(summary)
    reporter.finish(summary, interrupted=True)
    first, last = (json.loads(line) for line in sink.getvalue().splitlines())
    assert first["event"] == "progress" and last["event"] == "done" and last["interrupted"] is True
    assert last["environments"]["counter"] == {"rollouts": 6, "mean_reward": 0.5}
    assert reporter.period_s == 5
