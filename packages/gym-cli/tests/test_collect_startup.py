"""gym collect --serve from its first second: the start-up's steps (servers started, each waited for
and ready, all ready) come as events before the first rollout's, and the ETA comes only from the
throughput observed once rollouts finished, never before the first."""

from __future__ import annotations

import io
import json
import time
from pathlib import Path

import msgspec
from rich.console import Console

from gym_cli.live import (
    ETA_MIN_FINISHED,
    JsonReporter,
    PlainReporter,
    ProgressEvent,
    RichReporter,
    StartupEvent,
    describe_progress,
    eta_s,
    progress_event,
)
from gym_cli.rollouts import CollectSummary

ROOT = Path(__file__).resolve().parents[3]
COUNTER_SCRIPTED = ROOT / "plugins/resources/counter/configs/counter_scripted.yaml"
COUNTER_TASKS = ROOT / "plugins/resources/counter/data/example.jsonl"
SERVERS = {"counter": "resources", "policy_model": "model", "counter_agent": "agent"}


def test_json_startup_events_come_in_order_before_the_first_rollout_and_no_eta_before_one_finished(tmp_path, gym):
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
        "2",
        "--progress",
        "json",
        "--progress-interval",
        "0.05",
        "--no-profile",
        env={"GYM_HOME": str(tmp_path / "home")},
    )
    assert proc.returncode == 0, proc.stderr
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    kinds = [event["event"] for event in events]
    first_progress = kinds.index("progress")
    assert set(kinds[:first_progress]) == {"startup"} and "startup" not in kinds[first_progress:]
    startup = [msgspec.convert(event, StartupEvent) for event in events[:first_progress]]
    # --isolation none: no venv step. Then the servers started, each waited for, each ready, all.
    steps = [(e.phase, e.state) for e in startup]
    assert steps == [("servers", "starting")] + [("ready", "waiting")] * 3 + [("ready", "ready")] * 3 + [
        ("ready", "all")
    ]
    waiting = {e.name: e.kind for e in startup if e.state == "waiting"}
    assert waiting == SERVERS
    ready = [e for e in startup if e.state == "ready"]
    assert sorted(str(e.name) for e in ready) == sorted(SERVERS) and [e.done for e in ready] == [1, 2, 3]
    assert all(e.total == 3 for e in startup)
    elapsed = [e.elapsed_s for e in startup]
    assert elapsed == sorted(elapsed)
    plain = "start-up: waiting for policy_model (model: ready once its model is loaded) to be ready (0/3)"
    assert plain in describe_startup_lines(startup)

    progress = [msgspec.convert(event, ProgressEvent) for event in events[first_progress:]]
    for event in progress:
        finished = event.done + event.failed
        if finished < ETA_MIN_FINISHED or event.event == "done":
            assert event.eta_s is None, event
    assert progress[0].eta_s is None and progress[0].done == 0
    left = [e for e in progress if e.event == "progress" and ETA_MIN_FINISHED <= e.done + e.failed < e.total]
    assert left and all(e.eta_s is not None and e.eta_s >= 0 for e in left)
    assert progress[-1].event == "done" and progress[-1].done == 12


def describe_startup_lines(events: list[StartupEvent]) -> str:
    from gym_cli.live import describe_startup

    return "\n".join(describe_startup(e) for e in events)


def test_eta_is_from_the_throughput_since_the_first_finished():
    summary = CollectSummary(total=100, skipped=10)
    assert eta_s(summary) is None  # nothing finished
    summary.done, summary.first_finished = 1, 50.0
    assert eta_s(summary, now=60.0) is None  # one finished: no throughput to measure yet
    summary.done, summary.failed = 2, 1
    # 2 finished in the 10 s since the first: 0.2/s, 87 left.
    assert eta_s(summary, now=60.0) == 87 * 10 / 2
    summary.done, summary.failed = 90, 0
    assert eta_s(summary, now=60.0) is None  # none left
    assert describe_progress(progress_event(CollectSummary(total=5))).count("ETA") == 0


def test_reporters_show_the_startup_steps_before_the_rollouts():
    event = StartupEvent(phase="venv", state="built", name="gym-counter", done=1, total=2, elapsed_s=4.2)
    stream = io.StringIO()
    JsonReporter(stream).startup(event)
    assert json.loads(stream.getvalue()) == {
        "event": "startup",
        "phase": "venv",
        "state": "built",
        "name": "gym-counter",
        "kind": None,
        "done": 1,
        "total": 2,
        "elapsed_s": 4.2,
    }
    for reporter_of in (lambda c: PlainReporter(c), lambda c: RichReporter(c)):
        console = Console(file=io.StringIO(), width=200)
        reporter_of(console).startup(event)
        assert "start-up: venv of gym-counter built (1/2 ready), 4.2 s" in console.file.getvalue()  # type: ignore[attr-defined]


def test_rich_bar_says_measuring_until_the_eta_is_known():
    console = Console(file=io.StringIO(), width=200, force_terminal=True)
    summary = CollectSummary(total=10)
    reporter = RichReporter(console)
    reporter.start(summary)
    reporter.update(summary)
    summary.done, summary.first_finished = 4, time.monotonic() - 3.0
    reporter.update(summary)
    reporter.stop(summary)
    text = console.file.getvalue()  # type: ignore[attr-defined]
    assert "ETA measuring" in text
    # 3 finished in the 3 s since the first: 1/s, 6 left.
    assert "ETA 0:00:06" in text or "ETA 0:00:05" in text or "ETA 0:00:07" in text


def test_supervisor_tells_each_server_ready_and_those_still_waiting(tmp_path):
    """A server slow to answer /ready (as a model server loading its weights) is told as waiting
    until it is ready, after the quick one; each is told ready once."""
    import sys

    from gym_core.config import free_port

    from gym_cli.launch.supervisor import ChildSpec, Supervisor

    sys.path.insert(0, str(Path(__file__).parent))
    from test_processes import SERVER, Collector

    script = tmp_path / "server.py"
    script.write_text(SERVER)
    ready: list[str] = []
    waiting: list[list[str]] = []
    supervisor = Supervisor(output=Collector(), notice=Collector())
    try:
        for name, delay in (("quick", "0"), ("loading", "1.5")):
            port = free_port()
            supervisor.start(
                ChildSpec(
                    name, [sys.executable, str(script), str(port), delay], ready_url=f"http://127.0.0.1:{port}/ready"
                )
            )
        supervisor.wait_ready(30, on_ready=ready.append, on_waiting=lambda pending: waiting.append(sorted(pending)))
    finally:
        supervisor.shutdown()
    assert ready == ["quick", "loading"]
    assert ["loading"] in waiting and waiting[-1] == ["loading"]
    assert all(pending in (["loading"], ["loading", "quick"]) for pending in waiting)
