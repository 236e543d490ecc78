"""The Ray actor that runs one engine (a vLLM server, or any server speaking its OpenAI API).

The actor lives in its engine's placement group (bundle 0) and starts the engine as a child
process on that node: in its own process group (so that stopping it stops what it spawned), with
``PR_SET_PDEATHSIG`` (so that an actor killed by Ray takes its engine along), its output forwarded
to the actor's stdout (Ray shows it in the gym server's log) and its last lines kept for errors.
The class is plain Python; the server makes it a Ray actor, so this module does not import Ray.
"""

from __future__ import annotations

import collections
import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence

from gym_local_vllm.placement import fill_placeholders

__all__ = ["EngineProcess", "TAIL_LINES"]

TAIL_LINES = 200  # last lines of the engine's output kept (start-up errors show the last 20)
_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>


def _die_with_parent() -> None:  # runs in the child between fork and exec
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


class EngineProcess:
    """One engine process on the actor's node: :meth:`start`, :meth:`poll`, :meth:`stop`."""

    def __init__(self, label: str):
        self.label = label
        self._process: subprocess.Popen[bytes] | None = None
        self._tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
        self._reader: threading.Thread | None = None

    def start(self, argv: Sequence[str], env: Mapping[str, str], values: Mapping[str, str], host: str | None) -> dict:
        """Start the engine: ``argv`` with its placeholders filled (``{python}`` is this actor's
        interpreter, ``{host}`` ``host`` or the node's IP, ``{port}`` a free port there), ``env`` over
        the actor's environment. Returns its ``url`` (API root with ``/v1``), ``pid``, ``node_ip``."""
        import ray  # the actor runs inside Ray

        from gym_core.config import free_port

        node_ip = ray.util.get_node_ip_address()
        host = host or node_ip
        port = free_port(host)
        command = fill_placeholders(argv, {**values, "python": sys.executable, "host": host, "port": str(port)})
        self._process = subprocess.Popen(
            command,
            env={**os.environ, **env},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
        self._reader = threading.Thread(target=self._forward, args=(self._process.stdout,), daemon=True)
        self._reader.start()
        return {"url": f"http://{host}:{port}/v1", "pid": self._process.pid, "node_ip": node_ip, "command": command}

    def _forward(self, stream) -> None:
        for raw in iter(stream.readline, b""):
            line = raw.decode(errors="replace").rstrip()
            self._tail.append(line[:500])
            print(f"[{self.label}] {line}", flush=True)

    def poll(self) -> tuple[int | None, list[str]]:
        """The engine's exit status (None while it runs) and its last lines of output."""
        status = None if self._process is None else self._process.poll()
        if status is not None and self._reader is not None:
            self._reader.join(2.0)  # the last lines, written just before it exited
        return status, list(self._tail)

    def stop(self, grace_s: float) -> int | None:
        """SIGTERM to the engine's process group, SIGKILL after ``grace_s``; its exit status."""
        process = self._process
        if process is None:
            return None
        if process.poll() is None:
            self._signal(signal.SIGTERM)
            deadline = time.monotonic() + grace_s
            while process.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
        self._signal(signal.SIGKILL)  # stragglers of the group, even when the leader is gone
        try:
            return process.wait(5.0)
        except subprocess.TimeoutExpired:
            return None

    def _signal(self, sig: int) -> None:
        try:
            os.killpg(self._process.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
