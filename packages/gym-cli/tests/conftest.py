"""Fixtures shared by gym-cli's tests."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def gym_run() -> Iterator[Callable[..., str]]:
    """Start ``gym run CONFIG --isolation none`` as a user would (a real process); the head's URL once
    all servers are ready. Stopped with Ctrl+C at the end of the test."""
    procs: list[subprocess.Popen] = []

    def start(config: Path, *overrides: str) -> str:
        port = _free_port()
        proc = subprocess.Popen(
            [sys.executable, "-m", "gym_cli", "run", str(config), "--isolation", "none", f"head_server.port={port}",
             *overrides],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
        )
        procs.append(proc)
        seen = []
        deadline = time.monotonic() + 120
        assert proc.stdout is not None
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                pytest.fail("gym run exited early:\n" + "".join(seen))
            seen.append(line)
            if "All servers ready" in line:
                # Keep reading, so that the servers never block on a full pipe.
                threading.Thread(target=proc.stdout.read, daemon=True).start()
                return f"http://127.0.0.1:{port}"
        pytest.fail("gym run was not ready in time:\n" + "".join(seen))

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.communicate()
