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


def test_eta_is_from_the_observed_throughput_and_none_before_enough_finished():
    summary = CollectSummary(total=100, skipped=10, started=0.0)
    assert eta_s(summary, now=5.0) is None  # nothing finished
    summary.done, summary.failed = 1, 1
    assert eta_s(summary, now=5.0) is None  # fewer than ETA_MIN_FINISHED
    # 10 finished in 10 s, nothing running: 1/s, 80 left.
    summary.done, summary.failed = 8, 2
    assert eta_s(summary, now=10.0) == 80.0
    # 8 running at a median latency of 2 s deliver 4/s (Little's law), more than the average 1/s.
    for _ in range(8):
        summary.latency.add(2.0)
    summary.in_flight = 8
    assert eta_s(summary, now=10.0) == 20.0
    # Those waiting their turn are not running.
    summary.queued = 6
    assert eta_s(summary, now=10.0) == 80.0
    summary.done = 88
    assert eta_s(summary, now=10.0) is None  # none left
    assert "ETA" not in describe_progress(progress_event(CollectSummary(total=5)))


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
    summary = CollectSummary(total=10, started=time.monotonic() - 100.0)
    reporter = RichReporter(console)
    reporter.start(summary)
    reporter.update(summary)
    # 4 finished; 2 running at a median latency of 0.5 s: 4/s (above 4 in the 100 s since the start),
    # 6 left.
    summary.done, summary.in_flight = 4, 2
    for _ in range(4):
        summary.latency.add(0.5)
    reporter.update(summary)
    reporter.stop(summary)
    text = console.file.getvalue()  # type: ignore[attr-defined]
    assert "ETA measuring" in text
    assert "ETA 0:00:02" in text  # 1.5 s


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


def test_each_venv_state_reads_as_a_line():
    from gym_cli.live import describe_startup

    def line(state: str, done: int) -> str:
        return describe_startup(StartupEvent(phase="venv", state=state, name="math", done=done, total=2, elapsed_s=1.0))

    assert line("preparing", 0) == "start-up: venv of math: checking, built if missing (0/2 ready), 1.0 s"
    assert line("building", 0) == "start-up: building the venv of math (0/2 ready), 1.0 s"
    assert line("built", 1) == "start-up: venv of math built (1/2 ready), 1.0 s"
    assert line("reused", 2) == "start-up: venv of math reused (2/2 ready), 1.0 s"
