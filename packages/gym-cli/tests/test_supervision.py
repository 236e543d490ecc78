"""Supervision with real processes: a child that dies after start-up is restarted on its
port within a budget; children die with the process that supervises them, even by kill -9; stale state
left by a killed launcher is cleaned up, and a recycled pid is never killed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from gym_core.config import free_port
from gym_core.testing import wait_until

from gym_cli.launch.runstate import RunStateFile, clean_stale_runs, process_identity
from gym_cli.launch.supervisor import ChildSpec, RestartPolicy, Supervisor

PY = sys.executable
TESTS = Path(__file__).parent

sys.path.insert(0, str(TESTS))
from test_processes import SERVER, Collector, answers_ready, pid_alive  # noqa: E402


@pytest.fixture
def server_script(tmp_path: Path) -> Path:
    path = tmp_path / "server.py"
    path.write_text(SERVER)
    return path


def test_a_child_dying_after_start_up_is_restarted_on_its_port_until_the_budget_is_spent(server_script: Path) -> None:
    port = free_port()
    notices = Collector()
    spawned = []
    supervisor = Supervisor(
        output=Collector(),
        notice=notices,
        restart=RestartPolicy(attempts=2, window_s=600, backoff_s=0, ready_timeout_s=30),
        on_spawn=lambda: spawned.append(dict(supervisor.pids())),
    )
    try:
        supervisor.start(
            ChildSpec("env", [PY, str(server_script), str(port)], ready_url=f"http://127.0.0.1:{port}/ready")
        )
        supervisor.wait_ready(30)
        assert supervisor.states() == {"env": {"state": "running", "restarts": 0}}
        for restart in (1, 2):
            old = supervisor.pid("env")
            os.kill(old, signal.SIGKILL)
            # Called within this iteration: `old` is the value the lambda means.
            wait_until(
                lambda: supervisor.pid("env") != old and supervisor.states()["env"]["state"] == "running",  # noqa: B023
                what=f"restart {restart}",
            )
            assert supervisor.states()["env"] == {"state": "running", "restarts": restart}
            assert answers_ready(port)  # the same port
            assert supervisor.exited() == []  # a restarted child is not reported as exited
            assert supervisor.returncodes() == {"env": None}
        assert len(spawned) == 3 and spawned[-1] == supervisor.pids()  # recorded at every (re)start
        assert any("its sessions are lost" in line and "'env'" in line for line in notices.lines), notices.lines
        # The budget (2 within the window) is spent: the third death is reported like any exit.
        os.kill(supervisor.pid("env"), signal.SIGKILL)
        exited = supervisor.watch(timeout_s=30)
        assert [(e.name, e.returncode, e.restarts) for e in exited] == [("env", -signal.SIGKILL, 2)]
        assert supervisor.states()["env"]["state"] == "exited"
        assert any("stays down" in line for line in notices.lines), notices.lines
    finally:
        supervisor.shutdown(timeout_s=2)


def test_without_a_restart_policy_a_dead_child_is_reported_at_once(server_script: Path) -> None:
    port = free_port()
    with Supervisor(output=Collector()) as supervisor:
        supervisor.start(
            ChildSpec("env", [PY, str(server_script), str(port)], ready_url=f"http://127.0.0.1:{port}/ready")
        )
        supervisor.wait_ready(30)
        os.kill(supervisor.pid("env"), signal.SIGKILL)
        exited = supervisor.watch(timeout_s=30)
        assert [(e.name, e.returncode, e.restarts) for e in exited] == [("env", -signal.SIGKILL, 0)]


PARENT = textwrap.dedent(
    """
    import sys, threading, time
    from gym_cli.launch.supervisor import ChildSpec, Supervisor

    supervisor = Supervisor(output=lambda line: None)
    port = sys.argv[2]

    def launch():  # from a thread that ends at once: PR_SET_PDEATHSIG must not fire when it does
        supervisor.start(ChildSpec("env", [sys.executable, sys.argv[1], port],
                                   ready_url=f"http://127.0.0.1:{port}/ready"))
        supervisor.wait_ready(30)

    thread = threading.Thread(target=launch)
    thread.start()
    thread.join()
    print(supervisor.pid("env"), flush=True)
    time.sleep(300)
    """
)


def test_children_die_with_their_parent_even_by_kill_9(tmp_path: Path, server_script: Path) -> None:
    parent_script = tmp_path / "parent.py"
    parent_script.write_text(PARENT)
    port = free_port()
    parent = subprocess.Popen(
        [PY, str(parent_script), str(server_script), str(port)],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        time.sleep(0.5)  # the launching thread is gone by now
        assert pid_alive(child) and answers_ready(port)
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(timeout=10)
        wait_until(
            lambda: not answers_ready(port) and process_identity(child) is None,
            what="the child of the killed parent to be gone",
        )
    finally:
        if parent.poll() is None:
            os.killpg(parent.pid, signal.SIGKILL)


def sleeper() -> subprocess.Popen:
    """A process in a session of its own, reaped as soon as it dies (as init reaps orphans); returned
    once its Python runs (it says so), so its command line is the final one: under CI's load a read
    of /proc/PID/cmdline right after Popen once found it empty."""
    code = "import time; print('ready', flush=True); time.sleep(120)"
    proc = subprocess.Popen([PY, "-c", code], stdout=subprocess.PIPE, text=True, start_new_session=True)
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    threading.Thread(target=proc.wait, daemon=True).start()
    return proc


def dead_pid() -> int:
    proc = subprocess.Popen([PY, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_stale_state_of_a_killed_launcher_is_cleaned_and_a_recycled_pid_is_never_killed(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    ours, stranger, live_launcher = sleeper(), sleeper(), sleeper()
    try:
        wait_until(lambda: all(process_identity(p.pid) for p in (ours, stranger, live_launcher)), what="processes up")
        started, cmdline = process_identity(ours.pid)
        stale = {
            "pid": dead_pid(),
            "started": 0,
            "head_url": "http://127.0.0.1:1",
            "servers": {
                "ours": {"pid": ours.pid, "started": started, "cmdline": cmdline},
                # Same pid number as a server once had, but started at another time: someone else's.
                "recycled": {
                    "pid": stranger.pid,
                    "started": process_identity(stranger.pid)[0] - 1,
                    "cmdline": process_identity(stranger.pid)[1],
                },
            },
        }
        (runs / "111.json").write_text(json.dumps(stale))
        live_started = process_identity(live_launcher.pid)[0]
        live = {
            "pid": live_launcher.pid,
            "started": live_started,
            "head_url": "x",
            "servers": {
                "theirs": {
                    "pid": stranger.pid,
                    "started": process_identity(stranger.pid)[0],
                    "cmdline": process_identity(stranger.pid)[1],
                }
            },
        }
        (runs / "222.json").write_text(json.dumps(live))
        (runs / "333.json").write_text("{not json")
        messages: list[str] = []
        stopped = clean_stale_runs(runs, messages.append, grace_s=10)
        assert stopped == ["ours"]
        assert ours.wait(timeout=10) == -signal.SIGTERM  # its normal shutdown path first
        assert stranger.poll() is None and live_launcher.poll() is None
        assert sorted(p.name for p in runs.iterdir()) == ["222.json"]  # a running launcher's file stays
        assert "ours" in messages[0] and "recycled" not in messages[0]
    finally:
        for proc in (ours, stranger, live_launcher):
            if proc.poll() is None:
                proc.kill()


def test_the_state_file_records_identities_and_goes_away(tmp_path: Path) -> None:
    proc = sleeper()
    try:
        state = RunStateFile(tmp_path / "runs", "http://127.0.0.1:1")
        state.record({"env": proc.pid})
        data = json.loads(state.path.read_text())
        assert data["pid"] == os.getpid() and data["started"] == process_identity(os.getpid())[0]
        assert data["servers"]["env"]["pid"] == proc.pid
        assert data["servers"]["env"]["cmdline"][-1] == "import time; print('ready', flush=True); time.sleep(120)"
        # The file of a launcher that runs (this one) is never cleaned.
        assert clean_stale_runs(tmp_path / "runs", lambda m: None) == [] and proc.poll() is None
        state.remove()
        assert not state.path.exists()
    finally:
        proc.kill()
