"""Supervision of the server processes that ``gym run`` starts.

Asking about the children (:meth:`Supervisor.exited`, :meth:`Supervisor.returncodes`) is a read:
any number of readers (``gym run``'s watch loop, the head server's ``/server_instances``) see the same
answer, and a child that has exited is reported as exited by every later call.

Each child runs in a session (and process group) of its own, so a Ctrl+C typed in the terminal reaches
only the CLI, which then shuts the children down in order: SIGINT to each child's process group, a
grace period, SIGKILL to the groups still alive. Signalling whole groups also stops whatever a server
spawned itself (worker processes, a model runner).

A child that dies after start-up (once :meth:`Supervisor.wait_ready` saw it ready) is restarted when the
supervisor has a :class:`RestartPolicy`: the same command, environment and so port, after a backoff,
at most ``attempts`` times within ``window_s`` seconds; whatever the child held in memory (sessions)
is lost, and the supervisor says so. Only a child whose budget is spent is reported as exited.

Each child gets ``PR_SET_PDEATHSIG`` (Linux): SIGTERM, its normal shutdown path, when the supervisor's
process dies, even by ``kill -9``. The kernel sends it when the *thread* that forked the child ends, so
every child is forked by one spawner thread that lives as long as the supervisor.

The children's stdout and stderr are merged and read by one thread per child, which hands every line
to ``output`` prefixed with the instance name (``[name] line``) and keeps the last lines for error
messages. Children get ``PYTHONUNBUFFERED=1`` so lines arrive as they are printed.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import http.client
import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, NamedTuple
from urllib.parse import urlsplit

import msgspec

from gym_cli.exits import CommandFailed
from gym_cli.launch.runstate import group_alive, signal_group

__all__ = [
    "ChildSpec",
    "ChildExit",
    "ChildExitedError",
    "ReadyTimeoutError",
    "RestartPolicy",
    "Supervisor",
    "RING_LINES",
    "die_with",
    "feed_stdin",
]

RING_LINES = 50
"""How many of its last output lines are kept per child."""

Output = Callable[[str], None]


@dataclass
class ChildSpec:
    """One child process: ``argv`` run in ``cwd`` with ``env`` added to the CLI's environment;
    ready once ``ready_url`` answers 200 (at once when it is None).

    ``stdin``: bytes written to the child's standard input, which is then closed (each start, restarts
    included); None: the child reads nothing (``/dev/null``). ``gym run`` hands each server its config
    this way: not in the environment, which is limited to 128 KiB and shown by ``ps e``, nor on disk.

    ``start``: the child runs elsewhere (on a Ray node: :mod:`~gym_cli.launch.ray_placement`), started by
    ``start(argv, env, cwd, stdin)`` with ``env`` added to *that* place's environment; it returns a handle
    like ``subprocess.Popen``'s (``pid``, ``stdout``, ``poll()``, ``wait()``) with ``signal_group(signum)``
    and ``group_alive()`` for the child's process group there."""

    name: str
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    ready_url: str | None = None
    cwd: str | Path | None = None
    ready_headers: dict[str, str] = field(default_factory=dict)  # the run's token, for ``ready_url``
    stdin: bytes | None = None
    start: Callable[[list[str], dict[str, str], str | None, bytes | None], Any] | None = None


class RestartPolicy(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """How a child that dies after start-up is restarted: up to ``attempts`` restarts within any
    ``window_s`` seconds (0: never), the first after ``backoff_s`` seconds, each further one in the
    window after twice the wait of the one before; a restart must be ready within ``ready_timeout_s``.
    The ``server_restarts`` key of a config sets it for ``gym run`` and ``gym collect --serve``."""

    attempts: Annotated[int, msgspec.Meta(ge=0)] = 3
    window_s: Annotated[float, msgspec.Meta(gt=0)] = 60.0
    backoff_s: Annotated[float, msgspec.Meta(ge=0)] = 1.0
    ready_timeout_s: Annotated[float, msgspec.Meta(gt=0)] = 600.0


class ChildExit(NamedTuple):
    """A child that exited: its name, return code (negative: killed by that signal), last lines, and
    how many times it had been restarted within the policy's window before this exit."""

    name: str
    returncode: int
    last_lines: list[str]
    restarts: int = 0


class ChildExitedError(CommandFailed):
    """A child exited: while the others were starting (``while_starting``), or later (after
    ``restarts`` restarts within the restart window: the budget was spent)."""

    def __init__(
        self, name: str, returncode: int, last_lines: list[str], *, while_starting: bool = True, restarts: int = 0
    ):
        self.name = name
        self.returncode = returncode
        self.last_lines = list(last_lines)
        self.while_starting = while_starting
        self.restarts = restarts
        when = "while starting" if while_starting else "after start-up"
        text = f"server {name!r} exited with {_describe_returncode(returncode)} {when}"
        if restarts:
            text += (
                f", and stays down: it had been restarted {restarts} time(s) within server_restarts.window_s,"
                " the most server_restarts.attempts allows"
            )
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


def _print_notice(line: str) -> None:
    try:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>
# Looked up once here: the child runs preexec_fn between fork and exec, where loading a library is unsafe.
_prctl = ctypes.CDLL(None, use_errno=True).prctl if sys.platform.startswith("linux") else None


def die_with(parent_pid: int) -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes the child get SIGTERM when its parent dies (Linux; None elsewhere)."""
    prctl = _prctl
    if prctl is None:
        return None

    def preexec() -> None:
        prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent_pid:  # the parent died before prctl ran: no signal will come
            os.kill(os.getpid(), signal.SIGTERM)

    return preexec


def feed_stdin(proc: subprocess.Popen[bytes], data: bytes | None, name: str) -> None:
    """Write ``data`` to ``proc``'s standard input and close it, from a thread of its own: a pipe holds
    64 KiB, so a larger config is written as the child reads it. A child that exits before reading it
    all ends the write (its exit is what the supervisor reports)."""
    stream = proc.stdin
    if stream is None:
        return

    def write() -> None:
        with contextlib.suppress(OSError, ValueError):  # BrokenPipeError: the child is gone
            try:
                if data:
                    stream.write(data)
            finally:
                stream.close()

    threading.Thread(target=write, name=f"gym-stdin-{name}", daemon=True).start()


class _Child:
    def __init__(self, spec: ChildSpec, proc: subprocess.Popen[bytes] | Any, ring_lines: int):
        self.spec = spec
        self.proc = proc
        self.pgid = proc.pid  # start_new_session: the child leads its own group
        self.lines: deque[str] = deque(maxlen=ring_lines)
        self.lines_lock = threading.Lock()
        self.ready = spec.ready_url is None
        self.reader: threading.Thread | None = None
        # Supervised: seen ready by wait_ready, so restarted by the policy when it dies.
        self.supervised = False
        self.state = "starting"  # starting | running | restarting | exited
        self.restart_times: list[float] = []  # monotonic times of its restarts
        self.restarts = 0  # in total
        self.gave_up = False

    def last_lines(self) -> list[str]:
        with self.lines_lock:
            return list(self.lines)

    def signal_group(self, signum: int) -> None:
        """Send ``signum`` to the child's process group (where it runs: here, or through its handle)."""
        if isinstance(self.proc, subprocess.Popen):  # started here, not by ChildSpec.start
            signal_group(self.pgid, signum)
        else:
            self.proc.signal_group(signum)

    def group_alive(self) -> bool:
        """Whether the child's process group has a live member."""
        return group_alive(self.pgid) if isinstance(self.proc, subprocess.Popen) else self.proc.group_alive()


class Supervisor:
    """Starts children, waits until they are ready, watches them, and shuts them all down.

    ``output`` receives each child output line, prefixed (default: print to stdout); ``notice`` the
    supervisor's own messages about restarts (default: print to stderr). ``restart`` (default: none)
    restarts children that die after start-up; ``on_spawn`` is called after each child process is
    started or restarted. Usable as a context manager; :meth:`shutdown` also runs at interpreter exit.
    """

    def __init__(
        self,
        output: Output | None = None,
        ring_lines: int = RING_LINES,
        *,
        restart: RestartPolicy | None = None,
        notice: Output | None = None,
        on_spawn: Callable[[], None] | None = None,
    ):
        self._output = output or _print_line
        self._notice = notice or _print_notice
        self._restart = restart or RestartPolicy(attempts=0)
        self._on_spawn = on_spawn
        self._stop = threading.Event()
        self._monitor: threading.Thread | None = None
        self._restarters: list[threading.Thread] = []
        # PR_SET_PDEATHSIG fires when the forking thread ends: fork from one that lives as long as we do.
        self._spawner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gym-spawn")
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
        return self._spawn(spec).proc.pid

    def _spawn(self, spec: ChildSpec, replacing: _Child | None = None) -> _Child:
        with self._lock:
            if self._shutting_down:
                raise RuntimeError("the supervisor is shut down")
            if replacing is None and spec.name in self._children:
                raise ValueError(f"a child named {spec.name!r} is already started")
            if spec.start is not None:  # elsewhere: that place's environment, plus what the run adds
                proc = spec.start(
                    list(spec.argv),
                    {**spec.env, "PYTHONUNBUFFERED": "1"},
                    None if spec.cwd is None else str(spec.cwd),
                    spec.stdin,
                )
            else:
                proc = self._popen(spec)
            child = _Child(spec, proc, self._ring_lines)
            if replacing is not None:
                child.supervised, child.state = True, "restarting"
                child.restart_times, child.restarts = replacing.restart_times, replacing.restarts
            child.reader = threading.Thread(target=self._read, args=(child,), name=f"gym-out-{spec.name}", daemon=True)
            self._children[spec.name] = child
        child.reader.start()
        if self._on_spawn is not None:
            try:
                self._on_spawn()
            except Exception as exc:  # noqa: BLE001 - bookkeeping must not stop a server from starting
                self._notice(f"gym: could not record the server processes: {exc}")
        return child

    def _popen(self, spec: ChildSpec) -> subprocess.Popen[bytes]:
        env = dict(os.environ)
        env.update(spec.env)
        env["PYTHONUNBUFFERED"] = "1"
        proc = self._spawner.submit(
            subprocess.Popen,
            list(spec.argv),
            cwd=spec.cwd,
            env=env,
            stdin=subprocess.DEVNULL if spec.stdin is None else subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
            preexec_fn=die_with(os.getpid()),
        ).result()
        feed_stdin(proc, spec.stdin, spec.name)
        return proc

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

    def wait_ready(
        self,
        deadline_s: float,
        names: Iterable[str] | None = None,
        on_ready: Callable[[str], None] | None = None,
        on_waiting: Callable[[list[str]], None] | None = None,
    ) -> None:
        """Wait up to ``deadline_s`` seconds until every child (or those in ``names``) answers 200 on its
        ready_url, passing each child's name to ``on_ready`` when it first does, and the names of those
        not ready yet to ``on_waiting`` after each round of polls (every 0.1 s or so). Raises
        :class:`ChildExitedError` as soon as a child exits, :class:`ReadyTimeoutError` at the deadline."""
        started = time.monotonic()
        deadline = started + deadline_s
        waiting = [self._children[n] for n in (names if names is not None else list(self._children))]
        interval = 0.05
        while True:
            for child in list(self._children.values()):
                if child.supervised:  # the restart monitor's to handle
                    continue
                returncode = self._poll(child)
                if returncode is not None:
                    self._drain(child)
                    raise ChildExitedError(child.spec.name, returncode, child.last_lines())
            pending = [c for c in waiting if not c.ready]
            for child in pending:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                child.ready = _answers_200(
                    str(child.spec.ready_url), timeout=min(1.0, max(0.05, remaining)), headers=child.spec.ready_headers
                )
                if child.ready and on_ready is not None:
                    on_ready(child.spec.name)
            pending = [c for c in waiting if not c.ready]
            if not pending:
                for child in waiting:
                    child.supervised, child.state = True, "running"
                self._start_monitor()
                return
            if on_waiting is not None:
                on_waiting([c.spec.name for c in pending])
            now = time.monotonic()
            if now >= deadline:
                raise ReadyTimeoutError(
                    [c.spec.name for c in pending], {c.spec.name: c.last_lines() for c in pending}, now - started
                )
            time.sleep(min(interval, max(0.0, deadline - now)))
            # Short polls: a /ready that fails costs a refused connection, and start-up is ~2 s, so
            # longer sleeps would only add their length to the time until "All servers ready".
            interval = min(interval * 1.5, 0.1)

    # -- watching ------------------------------------------------------------------------------------

    def states(self) -> dict[str, dict[str, object]]:
        """Each child's ``state`` (``starting``, ``running``, ``restarting``: dead or not ready yet and
        being restarted, ``exited``: dead for good) and ``restarts`` (how many times it was restarted)."""
        states: dict[str, dict[str, object]] = {}
        for name, child in list(self._children.items()):
            state = child.state
            if state in ("starting", "running") and self._poll(child) is not None:
                state = "exited"  # until the monitor, if any, decides to restart it
            states[name] = {"state": state, "restarts": child.restarts}
        return states

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
            if child.supervised and self._restart.attempts > 0 and not child.gave_up:
                continue  # dead or alive, the restart monitor decides
            returncode = self._poll(child)
            if returncode is not None:
                self._drain(child)
                exits.append(ChildExit(child.spec.name, returncode, child.last_lines(), len(child.restart_times)))
        return exits

    # -- restarting ----------------------------------------------------------------------------------

    def _start_monitor(self) -> None:
        with self._lock:
            if self._restart.attempts <= 0 or self._monitor is not None or self._shutting_down:
                return
            self._monitor = threading.Thread(target=self._watch_for_deaths, name="gym-restart-monitor", daemon=True)
        self._monitor.start()

    def _watch_for_deaths(self) -> None:
        while not self._stop.wait(0.1):
            for child in list(self._children.values()):
                if child.supervised and child.state == "running" and self._poll(child) is not None:
                    child.state = "restarting"
                    thread = threading.Thread(
                        target=self._bring_back, args=(child,), name=f"gym-restart-{child.spec.name}", daemon=True
                    )
                    self._restarters.append(thread)
                    thread.start()

    def _bring_back(self, dead: _Child) -> None:
        """Restart ``dead`` until it is ready again or its budget is spent (then it is reported as exited)."""
        name, policy = dead.spec.name, self._restart
        while not self._stop.is_set():
            returncode = self._poll(dead)
            if dead.group_alive():  # what it spawned (workers) may still hold its port
                dead.signal_group(signal.SIGKILL)
            now = time.monotonic()
            dead.restart_times = [t for t in dead.restart_times if now - t < policy.window_s]
            recent = len(dead.restart_times)
            what = (
                "exited with " + _describe_returncode(returncode) if returncode is not None else "was not ready in time"
            )
            if recent >= policy.attempts:
                self._notice(
                    f"gym: server {name!r} {what}; restarted {recent} time(s) within {policy.window_s:g} s "
                    "already, so it stays down"
                )
                dead.state, dead.gave_up = "exited", True
                return
            delay = policy.backoff_s * 2**recent
            self._notice(
                f"gym: server {name!r} {what} after start-up; restarting it in {delay:g} s, on the same "
                f"port (restart {recent + 1} of at most {policy.attempts} within {policy.window_s:g} s); "
                "its sessions are lost: rollouts in flight through it fail"
            )
            if self._stop.wait(delay):
                return
            dead.restart_times.append(time.monotonic())
            dead.restarts += 1
            try:
                child = self._spawn(dead.spec, replacing=dead)
            except RuntimeError:  # shut down meanwhile
                return
            except Exception as exc:  # noqa: BLE001 - started elsewhere (Ray) and that failed: the next attempt
                self._notice(f"gym: could not restart server {name!r}: {exc}")
                continue
            if self._ready_again(child):
                child.state = "running"
                self._notice(f"gym: server {name!r} is back (pid {child.proc.pid}, restart {child.restarts})")
                return
            if self._poll(child) is None:  # not ready in time: stop it before the next attempt
                child.signal_group(signal.SIGKILL)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    child.proc.wait(timeout=5)
            self._drain(child)
            dead = child

    def _ready_again(self, child: _Child) -> bool:
        """Whether ``child`` answers ready before it exits, shutdown begins or the policy's timeout passes."""
        deadline = time.monotonic() + self._restart.ready_timeout_s
        while time.monotonic() < deadline and not self._stop.is_set() and self._poll(child) is None:
            if child.spec.ready_url is None or _answers_200(
                child.spec.ready_url, timeout=1.0, headers=child.spec.ready_headers
            ):
                child.ready = True
                return True
            self._stop.wait(0.1)
        return False

    def watch(
        self, timeout_s: float | None = None, interval_s: float = 0.2, stop: threading.Event | None = None
    ) -> list[ChildExit]:
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
                child.signal_group(signum)

    def shutdown(self, timeout_s: float = 10) -> dict[str, int | None]:
        """SIGINT every child's process group, wait up to ``timeout_s`` seconds, SIGKILL the groups still
        alive, and collect the readers. Idempotent; the return code of each child."""
        with self._lock:
            if self._shutdown_codes is not None:
                return dict(self._shutdown_codes)
            self._shutting_down = True
            self._stop.set()
            children = list(self._children.values())
        try:
            for child in children:
                if self._poll(child) is None:
                    child.signal_group(signal.SIGINT)
            deadline = time.monotonic() + max(0.0, timeout_s)
            for child in children:
                try:
                    child.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    pass
            for child in children:
                # The group of a child that exited may still hold processes it spawned: stop them too.
                if self._poll(child) is None or child.group_alive():
                    child.signal_group(signal.SIGKILL)
            for child in children:
                try:
                    child.proc.wait(timeout=5)
                except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL is not ignorable
                    pass
            for child in children:
                if child.reader is not None:
                    child.reader.join(timeout=2)
            for thread in self._restarters:
                thread.join(timeout=2)
            self._spawner.shutdown(wait=False)
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


def _answers_200(url: str, timeout: float, headers: dict[str, str] | None = None) -> bool:
    """GET ``url`` directly (never through an HTTP proxy from the environment); True on status 200."""
    parts = urlsplit(url)
    host = parts.hostname or "127.0.0.1"
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    conn_cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    conn = conn_cls(host, parts.port, timeout=timeout)
    try:
        conn.request("GET", path, headers={"Connection": "close", **(headers or {})})
        response = conn.getresponse()
        response.read()
        return response.status == 200
    except (OSError, http.client.HTTPException):
        return False
    finally:
        conn.close()
