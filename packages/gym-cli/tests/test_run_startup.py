"""gym run from its first second: the start-up's steps (servers started, each waited for and ready,
all ready) in the --progress mode chosen, before the table of servers; json lines that parse; a server
that dies while starting named with its exit status; piped output free of terminal escape codes."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import msgspec
import pytest

from gym_cli.live import RunningEvent, StartupEvent, describe_startup

ROOT = Path(__file__).resolve().parents[3]
COUNTER_SCRIPTED = ROOT / "plugins/resources/counter/configs/counter_scripted.yaml"


def first_told(events: list[StartupEvent]) -> list[StartupEvent]:
    """``events`` less a server's waiting step told again (every 10 s while it is not ready: a loaded
    machine may take that long)."""
    seen: set[str | None] = set()
    kept = []
    for event in events:
        if event.state == "waiting" and event.name in seen:
            continue
        if event.state == "waiting":
            seen.add(event.name)
        kept.append(event)
    return kept


def exiting_counter(tmp_path: Path, then: str = "os._exit(3)") -> dict[str, str]:
    """The environment of a run whose counter server process, as it starts, prints a line on stderr
    and then does ``then`` (exits with status 3): a sitecustomize module only that process acts on."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        "import os, sys, time\n"
        "if os.environ.get('GYM_INSTANCE') == 'counter':\n"
        "    print('counter: no tasks file, giving up', file=sys.stderr, flush=True)\n"
        f"    {then}\n"
    )
    pythonpath = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH")) if p)
    return {"PYTHONPATH": pythonpath, "GYM_HOME": str(tmp_path / "home")}


def test_json_startup_events_in_order_then_one_running_event_and_the_table_on_stderr(tmp_path, gym):
    """Two counter replicas: each is a server of its own, waited for and listed apart. (--isolation
    none: no venv step; test_run.py's venv test, in the slow tier, checks that they come first.)"""
    stderr = (tmp_path / "stderr.txt").open("w")
    proc = gym.start(
        "run",
        str(COUNTER_SCRIPTED),
        "--isolation",
        "none",
        "head_server.port=0",
        "counter.replicas=2",
        "--progress",
        "json",
        env={"GYM_HOME": str(tmp_path / "home")},
        stderr=stderr,
    )
    try:
        lines = proc.read_until('"event":"running"', 120)
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        stderr.close()
    assert proc.returncode == 0
    assert rest == ""  # stdout carries the events only, to the end
    events = [json.loads(line) for line in lines]
    assert {e["event"] for e in events[:-1]} == {"startup"} and events[-1]["event"] == "running"
    startup = first_told([msgspec.convert(e, StartupEvent) for e in events[:-1]])
    servers = {"counter#0": "resources", "counter#1": "resources", "policy_model": "model", "counter_agent": "agent"}
    assert [(e.phase, e.state) for e in startup] == [
        ("servers", "starting"),
        *[("ready", "waiting")] * 4,
        *[("ready", "ready")] * 4,
        ("ready", "all"),
    ]
    assert {e.name: e.kind for e in startup if e.state == "waiting"} == servers
    assert [e.done for e in startup if e.state == "ready"] == [1, 2, 3, 4] and {e.total for e in startup} == {4}
    running = msgspec.convert(events[-1], RunningEvent)
    assert {s.name: (s.instance, s.kind) for s in running.servers} == {
        name: (name.partition("#")[0], kind) for name, kind in servers.items()
    }
    assert len({s.url for s in running.servers}) == 4
    assert all(s.venv == "none (gym's)" and s.url.startswith("http://127.0.0.1:") for s in running.servers)
    # What a person reads goes to stderr: the table with the head URL the event gave, then the stop.
    err = (tmp_path / "stderr.txt").read_text()
    table = err.index("gym servers")
    assert running.head_url in err[table:] and err.index("All servers ready") > table
    assert "all servers stopped" in err and "\x1b" not in err


@pytest.mark.parametrize("mode", ["auto", "rich"])
def test_piped_output_shows_each_step_before_the_table_without_escape_codes(tmp_path, gym, mode):
    proc = gym.start(
        "run",
        str(COUNTER_SCRIPTED),
        "--isolation",
        "none",
        "head_server.port=0",
        "--progress",
        mode,
        env={"GYM_HOME": str(tmp_path / "home")},
    )
    try:
        text = "".join(proc.read_until("All servers ready", 120))
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, text + rest
    assert "\x1b" not in text + rest  # no colours, no cursor moves: rich draws nothing live into a pipe
    order = [
        "start-up: starting 3 servers",
        "start-up: waiting for policy_model (model: ready once its model is loaded) to be ready (0/3)",
        "ready (1/3)",
        "ready (2/3)",
        "ready (3/3)",
        "start-up: all 3 servers ready",
        "gym servers",
        "All servers ready",
    ]
    at = [text.index(step) for step in order]
    assert at == sorted(at), text


def test_a_server_that_exits_while_starting_is_named_with_its_status_and_last_line(tmp_path, gym):
    env = exiting_counter(tmp_path)
    args = ["run", str(COUNTER_SCRIPTED), "--isolation", "none", "head_server.port=0"]
    plain = gym.run(*args, env=env)
    assert plain.returncode == 1, plain.stderr
    assert "server 'counter' exited with exit code 3 while starting" in plain.stderr
    assert "[counter] counter: no tasks file, giving up" in plain.stderr
    assert "start-up: counter (resources) exited before it was ready" in plain.stderr
    assert "\x1b" not in plain.stderr and "All servers ready" not in plain.stderr

    json_run = gym.run(*args, "--progress", "json", env=env)
    assert json_run.returncode == 1, json_run.stderr
    events = [msgspec.json.decode(line, type=StartupEvent) for line in json_run.stdout.splitlines()]
    assert (events[0].phase, events[0].state) == ("servers", "starting")
    last = events[-1]
    assert (last.phase, last.state, last.name, last.kind) == ("ready", "exited", "counter", "resources")
    assert "exit code 3" in json_run.stderr and "[counter] counter: no tasks file" in json_run.stderr


def test_servers_still_not_ready_at_the_timeout_are_each_a_last_step(tmp_path, gym):
    env = exiting_counter(tmp_path, then="time.sleep(120)")  # a model that takes too long to load, say
    args = ["run", str(COUNTER_SCRIPTED), "--isolation", "none", "head_server.port=0", "--ready-timeout", "3"]
    proc = gym.run(*args, "--progress", "json", env=env)
    assert proc.returncode == 1, proc.stderr
    events = [msgspec.json.decode(line, type=StartupEvent) for line in proc.stdout.splitlines()]
    first = next(i for i, e in enumerate(events) if e.state == "timeout")
    # Every server not ready then (counter at least: the others may be slow on a loaded machine).
    assert all(e.state == "timeout" for e in events[first:])
    assert "counter" in {e.name for e in events[first:]} and "all" not in {e.state for e in events}
    assert "server(s) not ready after 3 s: " in proc.stderr and "counter" in proc.stderr.split("not ready after")[1]
    assert "[counter] counter: no tasks file, giving up" in proc.stderr


def test_each_end_of_a_start_up_reads_as_a_line():
    def line(state: str, name: str | None = "counter", total: int = 3) -> str:
        phase = "servers" if state == "starting" else "ready"
        return describe_startup(
            StartupEvent(phase=phase, state=state, name=name, kind="resources", done=1, total=total, elapsed_s=2.0)
        )

    assert line("exited") == "start-up: counter (resources) exited before it was ready (1/3), 2.0 s"
    assert line("timeout") == "start-up: counter (resources) still not ready, no more waiting (1/3), 2.0 s"
    assert line("starting", None, 1) == "start-up: starting 1 server, 2.0 s"
    assert line("starting", None, 3) == "start-up: starting 3 servers, 2.0 s"


def test_usage_error_shows_no_startup_step(gym):
    proc = gym.run("run", "nope.yaml", "--isolation", "none", "--progress", "json")
    assert proc.returncode == 2 and proc.stdout == ""
    assert "config file not found: nope.yaml" in proc.stderr


def test_unknown_progress_mode_is_a_usage_error(gym):
    result = gym("run", str(COUNTER_SCRIPTED), "--progress", "fancy")
    assert result.exit_code == 2 and "'fancy' is not one of 'auto', 'rich', 'plain', 'json'" in result.output
