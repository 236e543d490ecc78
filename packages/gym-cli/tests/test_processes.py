"""The supervisor, with real child processes."""

from __future__ import annotations

import os
import signal
import sys
import textwrap
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from gym_core.config import free_port, port_is_free

from gym_cli.launch.supervisor import ChildExitedError, ChildSpec, ReadyTimeoutError, Supervisor

PY = sys.executable

SERVER = textwrap.dedent(
    """
    import http.server, sys, time
    port = int(sys.argv[1])
    delay = float(sys.argv[2]) if len(sys.argv) > 2 else 0.0
    print("starting on", port)
    time.sleep(delay)

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            status = 200 if self.path == "/ready" else 404
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", port), Handler)
    print("listening")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        print("interrupted, bye")
    """
)


def answers_ready(port: int) -> bool:
    try:
        with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(
            f"http://127.0.0.1:{port}/ready", timeout=5
        ) as r:
            return r.status == 200
    except OSError:
        return False


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture
def server_script(tmp_path: Path) -> Path:
    path = tmp_path / "server.py"
    path.write_text(SERVER)
    return path


class Collector:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.lock = threading.Lock()

    def __call__(self, line: str) -> None:
        with self.lock:
            self.lines.append(line)

    def wait_for(self, line: str, timeout: float = 5) -> bool:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            with self.lock:
                if line in self.lines:
                    return True
            time.sleep(0.02)
        return False


@pytest.fixture
def sup():
    out = Collector()
    supervisor = Supervisor(output=out)
    supervisor.out = out  # type: ignore[attr-defined]
    yield supervisor
    supervisor.shutdown(timeout_s=2)


def test_ready_then_shutdown_frees_pid_and_port(sup: Supervisor, server_script: Path) -> None:
    ports = [free_port(), free_port()]
    for i, port in enumerate(ports):
        sup.start(
            ChildSpec(f"srv{i}", [PY, str(server_script), str(port), "0.3"], ready_url=f"http://127.0.0.1:{port}/ready")
        )
    sup.wait_ready(deadline_s=20)
    assert all(answers_ready(port) for port in ports)  # returned because both answer, not by giving up
    pids = list(sup.pids().values())
    assert all(os.getpgid(pid) == pid != os.getpgid(0) for pid in pids)  # own session and group
    codes = sup.shutdown(timeout_s=5)
    assert set(codes) == {"srv0", "srv1"}
    assert all(code is not None for code in codes.values())
    assert not any(pid_alive(pid) for pid in pids)
    assert all(port_is_free(port) for port in ports)
    assert "[srv0] interrupted, bye" in sup.out.lines  # type: ignore[attr-defined]  # SIGINT, gracefully
    assert sup.shutdown() == codes  # idempotent


def test_output_is_prefixed_and_merged(sup: Supervisor) -> None:
    code = "import sys; print('to stdout'); print('to stderr', file=sys.stderr); print('partial', end='')"
    sup.start(ChildSpec("alpha", [PY, "-c", code]))
    sup.start(
        ChildSpec(
            "beta",
            [PY, "-c", "import os; print(os.environ['GREETING'], os.environ['PYTHONUNBUFFERED'])"],
            env={"GREETING": "hi"},
        )
    )
    out = sup.out  # type: ignore[attr-defined]
    for line in ("[alpha] to stdout", "[alpha] to stderr", "[alpha] partial", "[beta] hi 1"):
        assert out.wait_for(line), out.lines
    assert sup.last_lines("alpha") == ["to stdout", "to stderr", "partial"]


def test_child_exiting_during_startup_raises_with_last_lines(sup: Supervisor, server_script: Path) -> None:
    port = free_port()
    sup.start(ChildSpec("good", [PY, str(server_script), str(port)], ready_url=f"http://127.0.0.1:{port}/ready"))
    code = "import sys, time; print('loading'); time.sleep(0.3); print('fatal: no model', file=sys.stderr); sys.exit(3)"
    sup.start(ChildSpec("bad", [PY, "-c", code], ready_url=f"http://127.0.0.1:{free_port()}/ready"))
    with pytest.raises(ChildExitedError) as info:
        sup.wait_ready(deadline_s=20)
    assert info.value.name == "bad"
    assert info.value.returncode == 3
    assert info.value.last_lines == ["loading", "fatal: no model"]
    assert "exit code 3" in str(info.value) and "[bad] fatal: no model" in str(info.value)


def test_ready_timeout_names_the_laggards(sup: Supervisor) -> None:
    sup.start(
        ChildSpec(
            "slow",
            [PY, "-c", "import time; print('still loading'); time.sleep(30)"],
            ready_url=f"http://127.0.0.1:{free_port()}/ready",
        )
    )
    sup.start(ChildSpec("noready", [PY, "-c", "import time; time.sleep(30)"]))  # no ready_url: ready at once
    with pytest.raises(ReadyTimeoutError) as info:
        sup.wait_ready(deadline_s=0.8)
    assert info.value.names == ["slow"]
    assert info.value.last_lines["slow"] == ["still loading"]
    assert sup.returncodes() == {"slow": None, "noready": None}  # giving up on readiness kills nobody


def test_child_ignoring_sigint_gets_sigint_then_sigkill(sup: Supervisor) -> None:
    code = (
        "import signal, time\n"
        "signal.signal(signal.SIGINT, lambda *a: print('got SIGINT, carrying on', flush=True))\n"
        "print('armored', flush=True)\n"
        "while True: time.sleep(60)\n"
    )
    pid = sup.start(ChildSpec("stubborn", [PY, "-c", code]))
    assert sup.out.wait_for("[stubborn] armored")  # type: ignore[attr-defined]
    codes = sup.shutdown(timeout_s=1)
    assert sup.last_lines("stubborn") == ["armored", "got SIGINT, carrying on"]  # asked first...
    assert codes == {"stubborn": -signal.SIGKILL}  # ...then killed
    assert not pid_alive(pid)


def test_shutdown_kills_grandchildren(sup: Supervisor, tmp_path: Path) -> None:
    pidfile = tmp_path / "grandchild.pid"
    code = textwrap.dedent(
        f"""
        import subprocess, sys, time
        p = subprocess.Popen([sys.executable, "-c",
                              "import signal, time; signal.signal(signal.SIGINT, signal.SIG_IGN); time.sleep(60)"])
        open({str(pidfile)!r}, "w").write(str(p.pid))
        print("spawned", flush=True)
        time.sleep(60)
        """
    )
    sup.start(ChildSpec("parent", [PY, "-c", code]))
    assert sup.out.wait_for("[parent] spawned")  # type: ignore[attr-defined]
    grandchild = int(pidfile.read_text())
    sup.shutdown(timeout_s=2)
    deadline = time.monotonic() + 5  # the grandchild is reaped by init, not by us
    while pid_alive(grandchild) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not pid_alive(grandchild)


def test_exits_are_reads_that_every_caller_sees(sup: Supervisor) -> None:
    """Asking about exits changes nothing: a second reader (the head server's /server_instances
    next to `gym run`'s watch loop) sees the same exit, every time."""
    sup.start(ChildSpec("steady", [PY, "-c", "import time; time.sleep(30)"]))
    sup.start(ChildSpec("flaky", [PY, "-c", "import time; time.sleep(0.3); print('oops'); raise SystemExit(7)"]))
    assert sup.exited() == []
    assert sup.returncodes() == {"steady": None, "flaky": None}
    exited = sup.watch(timeout_s=10)
    assert [(e.name, e.returncode, e.last_lines) for e in exited] == [("flaky", 7, ["oops"])]
    for _ in range(3):
        assert sup.returncodes() == {"steady": None, "flaky": 7}
        assert sup.exited() == exited
    assert sup.watch(timeout_s=0.3) == exited  # still there for a watcher that comes later
    sup.shutdown(timeout_s=2)
    stop = threading.Event()
    stop.set()
    assert sup.watch(stop=stop) == []


def test_duplicate_names_are_refused(sup: Supervisor) -> None:
    sup.start(ChildSpec("one", [PY, "-c", "pass"]))
    with pytest.raises(ValueError):
        sup.start(ChildSpec("one", [PY, "-c", "pass"]))
