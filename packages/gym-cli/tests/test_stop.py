"""gym stop with real processes: a real `gym run` is found through its state file and
stopped with its servers; --head picks one of several runs; a recycled pid is never signalled; a
launcher that ignores SIGTERM is killed once --timeout has passed, and so are its servers."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path

from gym_core.config import free_port, port_is_free
from gym_core.testing import wait_until

from gym_cli.launch.runstate import process_identity, same_head

ROOT = Path(__file__).resolve().parents[3]
COUNTER_SCRIPTED = ROOT / "plugins/resources/counter/configs/counter_scripted.yaml"
PY = sys.executable


def home_env(home: Path) -> dict[str, str]:
    """The environment of a `gym` whose state lives in ``home`` (runs, tokens), output 200 columns wide."""
    return {"GYM_HOME": str(home), "COLUMNS": "200"}


def start_runs(gym, home: Path, count: int) -> list[tuple[subprocess.Popen, str, dict[str, int]]]:
    """``count`` real `gym run`s of the counter config, started side by side on ports of our choosing:
    for each the process, its head URL and its ports."""
    started = []
    for _ in range(count):
        ports = {name: free_port() for name in ("head_server", "counter", "policy_model", "counter_agent")}
        proc = gym.start(
            "run",
            str(COUNTER_SCRIPTED),
            "--isolation",
            "none",
            *(f"++{name}.port={port}" for name, port in ports.items()),
            env={"GYM_HOME": str(home)},
        )
        started.append((proc, f"http://127.0.0.1:{ports['head_server']}", ports))
    try:
        for proc, _, _ in started:
            proc.read_until("All servers ready", 120)
            proc.read_on()
    except BaseException:
        for proc, _, _ in started:
            os.killpg(proc.pid, signal.SIGKILL)
        raise
    return started


def state_of(home: Path, proc: subprocess.Popen) -> dict:
    return json.loads((home / "runs" / f"{proc.pid}.json").read_text())


def answers_health(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def is_gone(pid: int, started: int) -> bool:
    identity = process_identity(pid)
    return identity is None or identity[0] != started


def test_gym_stop_finds_the_run_by_head_or_alone_and_ends_it_with_its_servers(tmp_path, gym):
    home = tmp_path / "home"
    (first, first_head, first_ports), (second, second_head, second_ports) = runs = start_runs(gym, home, 2)
    try:
        second_state = state_of(home, second)
        assert sorted(second_state["servers"]) == ["counter", "counter_agent", "policy_model"]

        ambiguous = gym("stop", env=home_env(home))
        assert ambiguous.exit_code == 2
        assert "--head" in ambiguous.stderr and first_head in ambiguous.stderr and second_head in ambiguous.stderr
        assert first.poll() is None and second.poll() is None

        # The URL as a user may type it: localhost and a trailing slash name the same head server.
        chosen = gym("stop", "--head", second_head.replace("127.0.0.1", "localhost") + "/", env=home_env(home))
        assert chosen.exit_code == 0, chosen.stdout + chosen.stderr
        assert f"stopped `gym run` (pid {second.pid}, head {second_head})" in chosen.stdout
        assert "counter, policy_model, counter_agent" in chosen.stdout and f"pid {first.pid}" not in chosen.stdout
        assert second.wait(timeout=30) == 0  # SIGTERM: the launcher's own graceful shutdown, not a kill
        for server in second_state["servers"].values():
            assert is_gone(server["pid"], server["started"])
        assert all(port_is_free(port) for port in second_ports.values())
        assert first.poll() is None and all(answers_health(port) for port in first_ports.values())
        assert [p.name for p in (home / "runs").glob("*.json")] == [f"{first.pid}.json"]

        gone = gym("stop", "--head", second_head, env=home_env(home))
        assert gone.exit_code == 1
        assert f"no running `gym run` or `gym collect --serve` with its head server at {second_head}" in gone.stderr
        assert first_head in gone.stderr  # the runs that do run are listed

        # With one run left, `gym status` and `gym stop` find it without --head (it is not on the default port).
        status = gym("status", "--json", env=home_env(home))
        assert status.exit_code == 0, status.stderr
        assert {row["url"] for row in json.loads(status.stdout)} == {
            f"http://127.0.0.1:{first_ports[name]}" for name in ("counter", "policy_model", "counter_agent")
        }
        alone = gym("stop", env=home_env(home))
        assert alone.exit_code == 0, alone.stdout + alone.stderr
        assert f"pid {first.pid}" in alone.stdout
        assert first.wait(timeout=30) == 0
        assert all(port_is_free(port) for port in first_ports.values())
        assert list((home / "runs").glob("*.json")) == []

        nothing = gym.run("stop", env=home_env(home))
        assert nothing.returncode == 1
        assert "no running `gym run`" in nothing.stderr and "gym status" in nothing.stderr
        assert "Traceback" not in nothing.stderr
    finally:
        for proc, _, _ in runs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def sleeper(ignore_sigterm: bool = False) -> subprocess.Popen:
    """A process in a session of its own that says `ready` once its signal handling is set, reaped as
    soon as it dies (as init reaps orphans)."""
    code = (
        "import signal, sys, time\n"
        + ("signal.signal(signal.SIGTERM, signal.SIG_IGN)\n" if ignore_sigterm else "")
        + "print('ready', flush=True)\ntime.sleep(120)\n"
    )
    proc = subprocess.Popen([PY, "-c", code], stdout=subprocess.PIPE, text=True, start_new_session=True)
    assert proc.stdout.readline() == "ready\n"
    threading.Thread(target=proc.wait, daemon=True).start()
    return proc


def record(proc: subprocess.Popen, started_offset: int = 0) -> dict:
    started, cmdline = process_identity(proc.pid)
    return {"pid": proc.pid, "started": started + started_offset, "cmdline": cmdline}


def test_all_stops_every_run_and_one_ignoring_sigterm_is_killed_after_the_timeout_with_its_servers(tmp_path, gym):
    home = tmp_path / "home"
    (home / "runs").mkdir(parents=True)
    stubborn, stubborn_server = sleeper(ignore_sigterm=True), sleeper(ignore_sigterm=True)
    polite = sleeper()
    procs = (stubborn, stubborn_server, polite)
    try:
        state = {**record(stubborn), "head_url": "http://127.0.0.1:1", "servers": {"stubborn": record(stubborn_server)}}
        (home / "runs" / f"{stubborn.pid}.json").write_text(json.dumps(state))
        (home / "runs" / f"{polite.pid}.json").write_text(
            json.dumps({**record(polite), "head_url": "http://127.0.0.1:2", "servers": {}})
        )
        # `gym status` at a head that does not answer lists the runs there are.
        status = gym("status", "--head", f"http://127.0.0.1:{free_port()}", env=home_env(home))
        assert status.exit_code == 1
        assert f"pid {polite.pid}, head http://127.0.0.1:2" in status.stderr
        assert f"pid {stubborn.pid}, head http://127.0.0.1:1 (up" in status.stderr

        result = gym("stop", "--all", "--timeout", "0.5", env=home_env(home))
        assert result.exit_code == 0, result.stdout + result.stderr
        assert (
            f"killed `{PY} -c` (pid {stubborn.pid}, head http://127.0.0.1:1) after it ignored SIGTERM for 0.5 s"
            in result.stdout
        )
        assert f"(pid {polite.pid}, head http://127.0.0.1:2) and its servers" in result.stdout
        wait_until(lambda: all(proc.returncode is not None for proc in procs), "processes reaped", 10)
        assert stubborn.returncode == -signal.SIGKILL and stubborn_server.returncode == -signal.SIGKILL
        assert polite.returncode == -signal.SIGTERM
        assert list((home / "runs").glob("*.json")) == []
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()


def test_stale_files_stop_leftovers_and_a_recycled_launcher_pid_is_never_signalled(tmp_path, gym):
    home = tmp_path / "home"
    (home / "runs").mkdir(parents=True)
    leftover, stranger = sleeper(), sleeper()
    dead = subprocess.Popen([PY, "-c", "pass"])
    dead.wait()
    try:
        killed = {
            "pid": dead.pid,
            "started": 1,
            "cmdline": [PY],
            "head_url": "http://127.0.0.1:1",
            "servers": {"counter": record(leftover)},
        }
        (home / "runs" / "1.json").write_text(json.dumps(killed))
        # A live process holds the pid a launcher once had, but started at another time: someone else's.
        recycled = {**record(stranger, started_offset=-1), "head_url": "http://127.0.0.1:2", "servers": {}}
        (home / "runs" / "2.json").write_text(json.dumps(recycled))

        both = gym("stop", "--all", "--head", "http://127.0.0.1:1", env=home_env(home))
        assert both.exit_code == 2 and "either --head or --all" in both.stderr

        result = gym("stop", env=home_env(home))
        assert result.exit_code == 0, result.stdout + result.stderr
        assert "stopped counter: left running by a gym run that was killed" in result.stdout
        wait_until(lambda: leftover.returncode is not None, "the leftover server to end", 10)
        assert leftover.returncode == -signal.SIGTERM  # its normal shutdown path
        assert stranger.poll() is None
        assert list((home / "runs").glob("*.json")) == []

        nothing = gym("stop", env=home_env(home))
        assert nothing.exit_code == 1 and "no running `gym run`" in nothing.stderr
        assert stranger.poll() is None
    finally:
        for proc in (leftover, stranger):
            if proc.poll() is None:
                proc.kill()


def test_head_urls_compare_by_server_not_by_spelling():
    assert same_head("http://127.0.0.1:11000", "http://LOCALHOST:11000/")
    assert not same_head("http://127.0.0.1:11000", "http://127.0.0.1:11001")
    assert same_head("http://127.0.0.1", "http://127.0.0.1:80")
    assert not same_head("http://127.0.0.1:11000", "not a url:x")


def test_gym_stop_ends_a_run_whose_servers_are_still_starting(tmp_path, gym):
    """The launcher writes its state file before any server is ready (before venvs are built, even), so
    `gym stop` finds a run still starting and stops it the graceful way, the slow server included."""
    home = tmp_path / "home"
    site = tmp_path / "site"
    site.mkdir()
    # A real server that is slow to start: counter's process sleeps before it even imports gym.
    (site / "sitecustomize.py").write_text(
        "import os, time\nif os.environ.get('GYM_INSTANCE') == 'counter':\n    time.sleep(120)\n"
    )
    pythonpath = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH")) if p)
    proc = gym.start(
        "run",
        str(COUNTER_SCRIPTED),
        "--isolation",
        "none",
        "head_server.port=0",
        env={"GYM_HOME": str(home), "PYTHONPATH": pythonpath},
    )
    output: list[str] = []
    reader = threading.Thread(target=lambda: output.extend(proc.stdout), daemon=True)
    reader.start()
    state_file = home / "runs" / f"{proc.pid}.json"

    def counter_recorded() -> dict | None:
        state = json.loads(state_file.read_text()) if state_file.exists() else {}
        return state if "counter" in state.get("servers", {}) else None

    try:
        state = wait_until(counter_recorded, "the run to record its counter server", 60)
        assert proc.poll() is None and not any("All servers ready" in line for line in output)
        result = gym("stop", "--timeout", "30", env=home_env(home))
        assert result.exit_code == 0, result.stdout + result.stderr
        assert f"stopped `gym run` (pid {proc.pid}, head {state['head_url']})" in result.stdout
        assert proc.wait(timeout=30) == 0  # SIGTERM unwound the start-up like Ctrl+C
        reader.join(timeout=10)
        for server in state["servers"].values():
            assert is_gone(server["pid"], server["started"])
        assert not state_file.exists()
        text = "".join(output)
        assert "all servers stopped" in text and "All servers ready" not in text
        # The launcher's own lines (a server's are prefixed with its name) end without a traceback.
        assert not [line for line in output if not line.startswith("[") and "Traceback" in line]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_gym_stop_ends_a_run_that_is_still_building_venvs(tmp_path, gym):
    """A fresh $GYM_HOME: the run builds the counter's venv first (seconds). Its state file is there
    already, with no servers; `gym stop` ends the run there, the uv build included."""
    home = tmp_path / "home"
    config = tmp_path / "counter.yaml"
    config.write_text(json.dumps({"counter": {"plugin": "counter"}}))
    proc = gym.start("run", str(config), "--isolation", "venv", "head_server.port=0", env={"GYM_HOME": str(home)})
    output: list[str] = []
    reader = threading.Thread(target=lambda: output.extend(proc.stdout), daemon=True)
    reader.start()
    state_file = home / "runs" / f"{proc.pid}.json"
    try:
        wait_until(lambda: any("building venv for counter" in line for line in output), "the venv build", 60)
        state = json.loads(state_file.read_text())
        assert (state["pid"], state["servers"]) == (proc.pid, {})
        result = gym("stop", "--timeout", "30", env=home_env(home))
        assert result.exit_code == 0, result.stdout + result.stderr
        assert (
            f"stopped `gym run` (pid {proc.pid}, head {state['head_url']}) and its servers (no servers yet)"
            in result.stdout
        )
        assert proc.wait(timeout=30) == 0
        reader.join(timeout=10)
        text = "".join(output)
        assert "all servers stopped" in text
        assert "built venv for counter" not in text and "All servers ready" not in text  # stopped mid-build
        assert not state_file.exists()
        assert not [pid for pid in builders(home)], "a uv build outlived the run"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def builders(home: Path) -> list[int]:
    """The processes whose command line names a path under ``home`` (the uv builds of its venvs)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and str(home).encode() in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found
