"""Supervision of the server processes that ``gym run`` starts.

Asking about the children (:meth:`Supervisor.exited`, :meth:`Supervisor.returncodes`) is a read:
any number of readers (``gym run``'s watch loop, the head server's ``/server_instances``) see the same
answer, and a child that has exited is reported as exited by every later call.

Each child runs in a session (and process group) of its own, so a Ctrl+C typed in the terminal reaches
only the CLI, which then shuts the children down in order: SIGINT to each child's process group, a
grace period, SIGKILL to the groups still alive. Signalling whole groups also stops whatever a server
spawned itself (worker processes, a model runner).

The children's stdout and stderr are merged and read by one thread per child, which hands every line
to ``output`` prefixed with the instance name (``[name] line``) and keeps the last lines for error
messages. Children get ``PYTHONUNBUFFERED=1`` so lines arrive as they are printed.
"""

from __future__ import annotations

import atexit
import http.client
import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple
from urllib.parse import urlsplit

from gym_cli.exits import CommandFailed

__all__ = [
    "ChildSpec",
    "ChildExit",
    "ChildExitedError",
    "ReadyTimeoutError",
    "Supervisor",
    "RING_LINES",
]

RING_LINES = 50
"""How many of its last output lines are kept per child."""

Output = Callable[[str], None]


@dataclass
class ChildSpec:
    """One child process: ``argv`` run in ``cwd`` with ``env`` added to the CLI's environment;
    ready once ``ready_url`` answers 200 (at once when it is None)."""

    name: str
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    ready_url: str | None = None
    cwd: str | Path | None = None


class ChildExit(NamedTuple):
    """A child that exited: its name, return code (negative: killed by that signal), last lines."""

    name: str
    returncode: int
    last_lines: list[str]


class ChildExitedError(CommandFailed):
    """A child exited: while the others were starting (``while_starting``), or later."""

    def __init__(self, name: str, returncode: int, last_lines: list[str], *, while_starting: bool = True):
        self.name = name
        self.returncode = returncode
        self.last_lines = list(last_lines)
        self.while_starting = while_starting
        when = "while starting" if while_starting else "after start-up"
        text = f"server {name!r} exited with {_describe_returncode(returncode)} {when}"
        if self.last_lines:
            text += "; its last output:\n" + "\n".join(f"  [{name}] {line}" for line in self.last_lines)
        else:
            text += " (it printed nothing)"
        super().__init__(text)


class ReadyTimeoutError(CommandFailed, TimeoutError):
    """Some children were still not ready when the deadline passed."""

    def __init__(self, names: list[str], last_lines: dict[str, list[str]], waited_s: float | None = None):
        self.names = list(names)
        self.last_lines = {name: list(lines) for name, lines in last_lines.items()}
        waited = f" after {waited_s:.0f} s" if waited_s is not None else ""
        text = f"server(s) not ready{waited}: {', '.join(self.names)}"
        for name in self.names:
            lines = self.last_lines.get(name) or []
            if lines:
                text += f"\nlast output of {name!r}:\n" + "\n".join(f"  [{name}] {line}" for line in lines[-20:])
        super().__init__(text)


def _describe_returncode(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"signal {signal.Signals(-returncode).name}"
        except ValueError:
            return f"signal {-returncode}"
    return f"exit code {returncode}"


def _print_line(line: str) -> None:
    try:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()
    except (OSError, ValueError):
        pass


class _Child:
    def __init__(self, spec: ChildSpec, proc: subprocess.Popen[bytes], ring_lines: int):
        self.spec = spec
        self.proc = proc
        self.pgid = proc.pid  # start_new_session: the child leads its own group
        self.lines: deque[str] = deque(maxlen=ring_lines)
        self.lines_lock = threading.Lock()
        self.ready = spec.ready_url is None
        self.reader: threading.Thread | None = None

    def last_lines(self) -> list[str]:
        with self.lines_lock:
            return list(self.lines)


class Supervisor:
    """Starts children, waits until they are ready, watches them, and shuts them all down.

    ``output`` receives each child output line, prefixed (default: print to stdout). Usable as a context
    manager; :meth:`shutdown` also runs at interpreter exit as a safety net.
    """

    def __init__(self, output: Output | None = None, ring_lines: int = RING_LINES):
        self._output = output or _print_line
        self._output_lock = threading.Lock()
        self._ring_lines = ring_lines
        self._children: dict[str, _Child] = {}
        self._lock = threading.Lock()
        # Popen.poll() from two threads at once answers None to the one that finds the other reaping
        # the child: readers (the head's /server_instances, the watch loop) take turns instead.
        self._poll_lock = threading.Lock()
        self._shutdown_codes: dict[str, int | None] | None = None
        self._shutting_down = False
        atexit.register(self._atexit)

    # -- starting ----------------------------------------------------------------------------------

    def start(self, spec: ChildSpec) -> int:
        """Spawn ``spec``'s process; its pid."""
        with self._lock:
            if self._shutting_down:
                raise RuntimeError("the supervisor is shut down")
            if spec.name in self._children:
                raise ValueError(f"a child named {spec.name!r} is already started")
            env = dict(os.environ)
            env.update(spec.env)
            env["PYTHONUNBUFFERED"] = "1"
            proc = subprocess.Popen(
                list(spec.argv),
                cwd=spec.cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                close_fds=True,
            )
            child = _Child(spec, proc, self._ring_lines)
            child.reader = threading.Thread(target=self._read, args=(child,), name=f"gym-out-{spec.name}", daemon=True)
            self._children[spec.name] = child
        child.reader.start()
        return proc.pid

    def _read(self, child: _Child) -> None:
        stream = child.proc.stdout
        assert stream is not None
        prefix = f"[{child.spec.name}] "
        try:
            for raw in iter(stream.readline, b""):
                line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
                with child.lines_lock:
                    child.lines.append(line)
                try:
                    with self._output_lock:
                        self._output(prefix + line)
                except Exception:  # noqa: BLE001 - keep draining the pipe whatever the sink does
                    pass
        except (OSError, ValueError):
            pass
        finally:
            try:
                stream.close()
            except OSError:
                pass

    # -- queries -------------------------------------------------------------------------------------

    @property
    def names(self) -> list[str]:
        return list(self._children)

    def pid(self, name: str) -> int:
        return self._children[name].proc.pid

    def pids(self) -> dict[str, int]:
        return {name: child.proc.pid for name, child in list(self._children.items())}

    def last_lines(self, name: str) -> list[str]:
        child = self._children[name]
        self._drain(child)
        return child.last_lines()

    def returncode(self, name: str) -> int | None:
        return self._poll(self._children[name])

    def _poll(self, child: _Child) -> int | None:
        with self._poll_lock:
            return child.proc.poll()

    def _drain(self, child: _Child, timeout: float = 1.0) -> None:
        """Once the child has exited, let its reader catch the last lines (bounded: a grandchild may
        still hold the pipe open)."""
        if self._poll(child) is not None and child.reader is not None and child.reader.is_alive():
            child.reader.join(timeout)

    # -- readiness -----------------------------------------------------------------------------------

    def wait_ready(self, deadline_s: float, names: Iterable[str] | None = None) -> None:
        """Wait up to ``deadline_s`` seconds until every child (or those in ``names``) answers 200 on its
        ready_url. Raises :class:`ChildExitedError` as soon as a child exits, :class:`ReadyTimeoutError`
        at the deadline."""
        started = time.monotonic()
        deadline = started + deadline_s
        waiting = [self._children[n] for n in (names if names is not None else list(self._children))]
        interval = 0.05
        while True:
            for child in list(self._children.values()):
                returncode = self._poll(child)
                if returncode is not None:
                    self._drain(child)
                    raise ChildExitedError(child.spec.name, returncode, child.last_lines())
            pending = [c for c in waiting if not c.ready]
            for child in pending:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                child.ready = _answers_200(str(child.spec.ready_url), timeout=min(1.0, max(0.05, remaining)))
            pending = [c for c in waiting if not c.ready]
            if not pending:
                return
            now = time.monotonic()
            if now >= deadline:
                raise ReadyTimeoutError([c.spec.name for c in pending],
                                        {c.spec.name: c.last_lines() for c in pending}, now - started)
            time.sleep(min(interval, max(0.0, deadline - now)))
            # Short polls: a /ready that fails costs a refused connection, and start-up is ~2 s, so
            # longer sleeps would only add their length to the time until "All servers ready".
            interval = min(interval * 1.5, 0.1)

    # -- watching ------------------------------------------------------------------------------------

    def returncodes(self) -> dict[str, int | None]:
        """Each child's return code, None while it runs (negative: killed by that signal). A read, and
        cheap: it never waits for a child's last output lines."""
        return {name: self._poll(child) for name, child in list(self._children.items())}

    def exited(self) -> list[ChildExit]:
        """Every child that has exited, with its last lines; none during shutdown. A read: a child that
        exited is in every later answer, whoever else asked."""
        if self._shutting_down:
            return []
        exits: list[ChildExit] = []
        for child in list(self._children.values()):
            returncode = self._poll(child)
            if returncode is not None:
                self._drain(child)
                exits.append(ChildExit(child.spec.name, returncode, child.last_lines()))
        return exits

    def watch(self, timeout_s: float | None = None, interval_s: float = 0.2,
              stop: threading.Event | None = None) -> list[ChildExit]:
        """Block until some child has exited (then :meth:`exited`), ``stop`` is set, shutdown begins, or
        ``timeout_s`` passes (then an empty list)."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            exited = self.exited()
            if exited or self._shutting_down:
                return exited
            if stop is not None and stop.is_set():
                return []
            wait = interval_s if deadline is None else min(interval_s, deadline - time.monotonic())
            if wait <= 0:
                return []
            if stop is not None:
                stop.wait(wait)
            else:
                time.sleep(wait)

    # -- stopping ------------------------------------------------------------------------------------

    def signal_all(self, signum: int = signal.SIGINT) -> None:
        """Send ``signum`` to the process group of every child still running."""
        for child in list(self._children.values()):
            if self._poll(child) is None:
                _killpg(child.pgid, signum)

    def shutdown(self, timeout_s: float = 10) -> dict[str, int | None]:
        """SIGINT every child's process group, wait up to ``timeout_s`` seconds, SIGKILL the groups still
        alive, and collect the readers. Idempotent; the return code of each child."""
        with self._lock:
            if self._shutdown_codes is not None:
                return dict(self._shutdown_codes)
            self._shutting_down = True
            children = list(self._children.values())
        try:
            for child in children:
                if self._poll(child) is None:
                    _killpg(child.pgid, signal.SIGINT)
            deadline = time.monotonic() + max(0.0, timeout_s)
            for child in children:
                try:
                    child.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    pass
            for child in children:
                # The group of a child that exited may still hold processes it spawned: stop them too.
                if self._poll(child) is None or _group_alive(child.pgid):
                    _killpg(child.pgid, signal.SIGKILL)
            for child in children:
                try:
                    child.proc.wait(timeout=5)
                except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL is not ignorable
                    pass
            for child in children:
                if child.reader is not None:
                    child.reader.join(timeout=2)
        finally:
            codes = {child.spec.name: self._poll(child) for child in children}
            with self._lock:
                self._shutdown_codes = codes
            atexit.unregister(self._atexit)
        return dict(codes)

    def _atexit(self) -> None:
        try:
            self.shutdown(timeout_s=5)
        except Exception:  # noqa: BLE001 - a last resort at exit
            pass

    def __enter__(self) -> Supervisor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


def _killpg(pgid: int, signum: int) -> None:
    try:
        os.killpg(pgid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _answers_200(url: str, timeout: float) -> bool:
    """GET ``url`` directly (never through an HTTP proxy from the environment); True on status 200."""
    parts = urlsplit(url)
    host = parts.hostname or "127.0.0.1"
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    conn_cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    conn = conn_cls(host, parts.port, timeout=timeout)
    try:
        conn.request("GET", path, headers={"Connection": "close"})
        response = conn.getresponse()
        response.read()
        return response.status == 200
    except (OSError, http.client.HTTPException):
        return False
    finally:
        conn.close()
