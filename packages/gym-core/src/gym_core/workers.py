"""Worker processes with hard time and memory limits, for work that may never finish.

A verifier that runs untrusted or pathological work (sympy on a model's answer, model-written code,
SQL, a regular expression from model output) cannot rely on the work ending, or on signals or
threads to stop it: ``signal.alarm`` only works in the main thread and cannot interrupt long C-level
computation, and a thread cannot be killed. :class:`WorkerPool` runs such work in persistent worker
processes and kills a worker that runs past its time limit; a worker is also capped in memory.

Public API:

- :class:`WorkerPool` — ``await pool.run(fn, *args)`` returns ``fn(*args)`` computed in a worker
  process, or raises one of the errors below; :meth:`WorkerPool.run_blocking` does the same for
  threads. ``fn`` and ``args`` travel by pickle, so ``fn`` must be a module-level function of an
  importable module (not a lambda, a nested function or a function of ``__main__``).
- :class:`WorkerError` (a :class:`~gym_core.errors.GymError`) and its subclasses:
  :class:`WorkerTimeout` (ran past the time limit; the worker was killed),
  :class:`WorkerMemoryError` (ran out of its memory limit), :class:`WorkerCrashed` (the worker
  died, e.g. killed by a signal), :class:`WorkerTaskError` (``fn`` raised; carries the exception's
  type name, message and traceback text) and :class:`WorkerPoolClosed`.

Example::

    pool = WorkerPool(4, time_limit_s=5.0, memory_limit_mb=2048, preload=["sympy"])
    try:
        value = await pool.run(simplify_answer, text)
    except WorkerTimeout:
        ...
    finally:
        pool.close()

How it works. A server process runs uvloop and threads, so forking it is unsafe. The pool therefore
starts one fresh interpreter, the *zygote*, with ``subprocess`` (fork + exec, safe in a threaded
process). The zygote imports ``preload`` and runs ``initializer`` once, then forks a worker whenever
the pool asks for one and hands the worker's end of a new socket pair back over its control socket
(SCM_RIGHTS). Workers thus start in about a millisecond with everything already imported, also right
after a killed worker has to be replaced. A call pickles ``(fn, args)`` to an idle worker and waits
at most the time limit for the reply; on expiry the pool SIGKILLs the worker, the zygote reaps it,
and a fresh worker takes its place. The memory limit is ``RLIMIT_AS`` in each worker, so an
allocation past it raises ``MemoryError`` there; that worker reports it and exits, and is replaced.

Nothing outlives the pool: :meth:`WorkerPool.close` (also run when the pool is garbage collected and
at interpreter exit) closes the control socket, on which the zygote kills and reaps every worker and
exits; if the pool's process dies instead, the kernel closes that socket, with the same effect, and
each worker also asks the kernel to SIGKILL it when the zygote dies (``PR_SET_PDEATHSIG`` on Linux;
a watchdog thread elsewhere). Every wait is bounded: a call by its time limit, start-up by
``start_timeout_s``, talking to the zygote and shutting down by a few seconds. POSIX only.

This module imports only the standard library (and ``gym_core.errors``), so importing it is cheap.
"""

from __future__ import annotations

import errno
import os
import pickle
import queue
import signal
import socket
import struct
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, TypeVar

from gym_core.errors import GymError

if TYPE_CHECKING:
    import subprocess
    from concurrent.futures import ThreadPoolExecutor

__all__ = [
    "WorkerPool",
    "WorkerError",
    "WorkerTimeout",
    "WorkerMemoryError",
    "WorkerCrashed",
    "WorkerTaskError",
    "WorkerPoolClosed",
]

T = TypeVar("T")


# --------------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------------


class WorkerError(GymError):
    """A call run in a :class:`WorkerPool` did not return a result."""


class WorkerTimeout(WorkerError):
    """The call ran past its time limit; its worker was killed (and has been replaced)."""

    def __init__(self, function: str, time_limit_s: float):
        self.function = function
        self.time_limit_s = time_limit_s
        super().__init__(f"{function} ran past its time limit of {time_limit_s:g} s; its worker was killed")


class WorkerMemoryError(WorkerError):
    """The call ran out of the worker's memory limit; the worker was replaced."""

    def __init__(self, function: str, memory_limit_mb: int | None, detail: str = ""):
        self.function = function
        self.memory_limit_mb = memory_limit_mb
        self.detail = detail
        limit = f"the worker's limit of {memory_limit_mb} MB" if memory_limit_mb else "memory"
        super().__init__(f"{function} ran out of {limit}{f' ({detail})' if detail else ''}; the worker was replaced")


class WorkerCrashed(WorkerError):
    """The worker process died during the call (a signal, ``os._exit``, a C-level crash)."""

    def __init__(self, function: str, how: str):
        self.function = function
        self.how = how
        super().__init__(f"the worker running {function} died ({how}); it was replaced")


class WorkerTaskError(WorkerError):
    """The function raised (or its result could not be sent back). ``exc_type`` is the exception's qualified type name (the exception
    itself is not sent back: it may not be picklable), ``detail`` its message, ``traceback`` the
    worker-side traceback as text."""

    def __init__(self, function: str, exc_type: str, detail: str, traceback: str = ""):
        self.function = function
        self.exc_type = exc_type
        self.detail = detail
        self.traceback = traceback
        super().__init__(f"{function} raised {exc_type}: {detail}" if detail else f"{function} raised {exc_type}")


class WorkerPoolClosed(WorkerError):
    """The pool was closed (before or during the call)."""


# --------------------------------------------------------------------------------------------
# Framing: an 8-byte length, then the payload. Used between the pool and its workers, and for the
# zygote's configuration.
# --------------------------------------------------------------------------------------------

_LEN = struct.Struct("!Q")
_INT = struct.Struct("!q")
_CMD = struct.Struct("!qq")  # (command, argument) sent to the zygote
_SPAWN, _REAP = 1, 2
_ZYGOTE_IO_TIMEOUT_S = 10.0  # forking and reaping take milliseconds; this only bounds a broken zygote
_CLOSE_TIMEOUT_S = 5.0

# Reply kinds, worker → pool: (_OK, result) | (_RAISED, type name, message, traceback) | (_MEMORY, message)
_OK, _RAISED, _MEMORY = 0, 1, 2


def _recv_exact(sock: socket.socket, n: int, deadline: float | None) -> bytes | None:
    """``n`` bytes, or None on EOF before the first byte. Raises TimeoutError past ``deadline``,
    EOFError on EOF mid-message."""
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        if deadline is not None:
            sock.settimeout(max(deadline - time.monotonic(), 0.0) or 1e-6)
        k = sock.recv_into(view[got:])
        if not k:
            if got == 0:
                return None
            raise EOFError("connection closed mid-message")
        got += k
    return bytes(buf)


def _recv_frame(sock: socket.socket, deadline: float | None) -> bytes | None:
    header = _recv_exact(sock, _LEN.size, deadline)
    if header is None:
        return None
    (length,) = _LEN.unpack(header)
    if length == 0:
        return b""
    body = _recv_exact(sock, length, deadline)
    if body is None:
        raise EOFError("connection closed mid-message")
    return body


def _send_frame(sock: socket.socket, payload: bytes, deadline: float | None) -> None:
    if deadline is not None:
        sock.settimeout(max(deadline - time.monotonic(), 0.0) or 1e-6)
    sock.sendall(_LEN.pack(len(payload)) + payload)


def _function_name(fn: Callable[..., Any]) -> str:
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None)
    if name is None:
        return repr(fn)[:100]
    module = getattr(fn, "__module__", None)
    return f"{module}.{name}()" if module and module != "builtins" else f"{name}()"


def _pickle_task(fn: Callable[..., Any], args: tuple[Any, ...]) -> bytes:
    """The task as sent to a worker; a TypeError that says why when it cannot be sent."""
    if getattr(fn, "__module__", None) == "__main__":
        raise TypeError(
            f"{_function_name(fn)} is defined in __main__, which worker processes cannot import; move it to a module"
        )
    try:
        return pickle.dumps((fn, args), protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:  # PicklingError, AttributeError ("local object"), TypeError
        raise TypeError(
            f"cannot send {_function_name(fn)} and its arguments to a worker process: {exc}; "
            "the function must be a module-level function of an importable module, and its "
            "arguments picklable"
        ) from None


def _describe_status(status: int | None) -> str:
    if status is None or status < 0:
        return "its exit status is unknown"
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            return f"killed by {signal.Signals(sig).name}"
        except ValueError:
            return f"killed by signal {sig}"
    if os.WIFEXITED(status):
        return f"exited with status {os.WEXITSTATUS(status)}"
    return f"wait status {status}"


# --------------------------------------------------------------------------------------------
# Inside the zygote and the workers
# --------------------------------------------------------------------------------------------


def _zygote_main(ctrl_fd: int) -> None:
    """Entry point of the zygote process: set up, then fork workers on request until EOF."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the pool's business; workers inherit this
    ctrl = socket.socket(fileno=ctrl_fd)
    os.set_inheritable(ctrl.fileno(), False)
    config = _recv_frame(ctrl, time.monotonic() + _ZYGOTE_IO_TIMEOUT_S)
    if config is None:
        return
    ctrl.settimeout(None)
    try:
        preload, initializer, memory_limit_mb = pickle.loads(config)
        import importlib

        for name in preload:
            importlib.import_module(name)
        if initializer is not None:
            initializer()
    except BaseException as exc:  # noqa: BLE001 - reported to the pool, which raises it
        message = f"{type(exc).__name__}: {exc}".encode(errors="replace")[:4000]
        ctrl.sendall(_INT.pack(len(message)) + message)
        return
    set_pdeathsig = _pdeathsig_setter()
    ctrl.sendall(_INT.pack(0))

    children: set[int] = set()
    try:
        while True:
            command = _recv_exact(ctrl, _CMD.size, None)
            if command is None:
                return
            op, arg = _CMD.unpack(command)
            if op == _SPAWN:
                _zygote_spawn(ctrl, children, memory_limit_mb, set_pdeathsig)
            elif op == _REAP:
                ctrl.sendall(_INT.pack(_zygote_reap(arg, children)))
    except (OSError, EOFError):
        return
    finally:
        # The pool closed (or died): no worker may outlive it.
        for pid in children:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        for pid in list(children):
            _zygote_reap(pid, children)


def _zygote_spawn(
    ctrl: socket.socket, children: set[int], memory_limit_mb: int | None, set_pdeathsig: Callable[[], bool]
) -> None:
    zygote_pid = os.getpid()
    ours, theirs = socket.socketpair()
    try:
        pid = os.fork()
    except OSError as exc:
        ours.close()
        theirs.close()
        ctrl.sendall(_INT.pack(-(exc.errno or errno.EAGAIN)))
        return
    if pid == 0:
        code = 0
        try:
            ctrl.close()
            ours.close()
            _worker_main(theirs, memory_limit_mb, zygote_pid, set_pdeathsig)
        except BaseException:  # noqa: BLE001
            code = 1
        finally:
            os._exit(code)
    theirs.close()
    children.add(pid)
    try:
        socket.send_fds(ctrl, [_INT.pack(pid)], [ours.fileno()])
    finally:
        ours.close()


def _zygote_reap(pid: int, children: set[int]) -> int:
    """Wait for child ``pid`` (already killed, or exiting) and return its wait status; -1 if it is
    not a child or does not end within the bound (then it is SIGKILLed and left to the final
    clean-up)."""
    deadline = time.monotonic() + _CLOSE_TIMEOUT_S
    delay = 0.0005
    try:
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                children.discard(pid)
                return status
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                return -1
            time.sleep(delay)
            delay = min(delay * 2, 0.05)
    except ChildProcessError:
        children.discard(pid)
        return -1
    except OSError:
        return -1


def _pdeathsig_setter() -> Callable[[], bool]:
    """A function a freshly forked worker calls to be SIGKILLed when the zygote dies; returns
    False where the platform has no such thing. Loaded once in the zygote, before any fork."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            prctl = ctypes.CDLL(None, use_errno=True).prctl
        except (OSError, AttributeError):
            pass
        else:
            pr_set_pdeathsig = 1

            def set_pdeathsig() -> bool:
                return prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0) == 0

            return set_pdeathsig
    return lambda: False


def _watch_parent(parent_pid: int) -> None:
    while True:
        time.sleep(0.5)
        if os.getppid() != parent_pid:
            os._exit(1)


def _worker_main(
    sock: socket.socket, memory_limit_mb: int | None, zygote_pid: int, set_pdeathsig: Callable[[], bool]
) -> None:
    """A worker's loop: receive a pickled ``(fn, args)``, reply with the outcome, until EOF."""
    if set_pdeathsig():
        if os.getppid() != zygote_pid:  # the zygote died before the death signal was armed
            return
    else:
        threading.Thread(target=_watch_parent, args=(zygote_pid,), daemon=True).start()
    if memory_limit_mb:
        import resource

        limit = memory_limit_mb * 1024 * 1024
        _soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        if hard != resource.RLIM_INFINITY:
            limit = min(limit, hard)
        # Hard limit too: the work is untrusted and must not raise its own limit.
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    sock.settimeout(None)
    while True:
        task = _recv_frame(sock, None)
        if task is None:
            return
        reply, last = _execute(task)
        del task
        sock.settimeout(None)
        sock.sendall(_LEN.pack(len(reply)) + reply)
        if last:
            return  # after a MemoryError the heap may be fragmented or a C library half-initialised


def _execute(task: bytes) -> tuple[bytes, bool]:
    """Run one task; returns the pickled reply and whether the worker should exit after sending it."""
    out_of_memory = ""
    try:
        fn, args = pickle.loads(task)
        result = fn(*args)
        del fn, args
        try:
            return pickle.dumps((_OK, result), protocol=pickle.HIGHEST_PROTOCOL), False
        except MemoryError:
            raise
        except Exception as exc:  # noqa: BLE001
            message = f"its result ({type(result).__name__}) cannot be pickled: {exc}"
            return pickle.dumps((_RAISED, type(exc).__qualname__, message, "")), False
    except MemoryError as exc:
        out_of_memory = str(exc)[:500]
    except BaseException as exc:  # noqa: BLE001 - SystemExit and KeyboardInterrupt included: keep serving
        try:
            import traceback

            text = "".join(traceback.format_exception(exc))[-20_000:]
            kind = type(exc)
            name = kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
            return pickle.dumps((_RAISED, name, str(exc)[:2000], text)), False
        except MemoryError:
            pass
    # Out of memory: answer outside the except block, so the traceback's frames (and whatever they
    # hold) are freed first.
    return pickle.dumps((_MEMORY, out_of_memory)), True


# --------------------------------------------------------------------------------------------
# The pool's side
# --------------------------------------------------------------------------------------------


class _Zygote:
    """The pool's handle on its zygote process. Not thread safe: the pool serialises calls."""

    def __init__(self, preload: tuple[str, ...], initializer: Callable[[], Any] | None, memory_limit_mb: int | None):
        import subprocess

        ours, theirs = socket.socketpair()
        bootstrap = (
            "import sys; sys.path[:] = sys.argv[2:]; "
            "from gym_core.workers import _zygote_main; _zygote_main(int(sys.argv[1]))"
        )
        try:
            self.proc: subprocess.Popen[bytes] = subprocess.Popen(
                [sys.executable, "-c", bootstrap, str(theirs.fileno()), *sys.path],
                pass_fds=[theirs.fileno()],
                stdin=subprocess.DEVNULL,
            )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self.ctrl = ours
        self.ready = False
        config = pickle.dumps((preload, initializer, memory_limit_mb))
        try:
            _send_frame(ours, config, time.monotonic() + _ZYGOTE_IO_TIMEOUT_S)
        except OSError:
            self.close()
            raise

    def wait_ready(self, timeout_s: float) -> None:
        """Wait for ``preload`` and ``initializer``; WorkerError if they failed or took too long."""
        if self.ready:
            return
        try:
            header = _recv_exact(self.ctrl, _INT.size, time.monotonic() + timeout_s)
        except TimeoutError:
            raise WorkerError(f"worker processes did not start within {timeout_s:g} s") from None
        if header is None:
            raise EOFError("the worker zygote exited during start-up")
        (length,) = _INT.unpack(header)
        if length:
            message = _recv_exact(self.ctrl, length, time.monotonic() + _ZYGOTE_IO_TIMEOUT_S) or b""
            raise WorkerError(f"cannot start worker processes: {message.decode(errors='replace')}")
        self.ready = True

    def spawn(self) -> tuple[int, socket.socket]:
        deadline = time.monotonic() + _ZYGOTE_IO_TIMEOUT_S
        self.ctrl.settimeout(_ZYGOTE_IO_TIMEOUT_S)
        self.ctrl.sendall(_CMD.pack(_SPAWN, 0))
        data, fds, _flags, _addr = socket.recv_fds(self.ctrl, _INT.size, 1)
        if not data:
            raise EOFError("the worker zygote exited")
        if len(data) < _INT.size:
            data += _recv_exact(self.ctrl, _INT.size - len(data), deadline) or b""
        (pid,) = _INT.unpack(data)
        if pid <= 0 or len(fds) != 1:
            for fd in fds:
                os.close(fd)
            if pid < 0:
                raise WorkerError(f"cannot start a worker process: fork failed: {os.strerror(-pid)}")
            raise EOFError("the worker zygote sent no socket")
        os.set_inheritable(fds[0], False)
        return pid, socket.socket(fileno=fds[0])

    def reap(self, pid: int) -> int:
        self.ctrl.settimeout(_ZYGOTE_IO_TIMEOUT_S)
        self.ctrl.sendall(_CMD.pack(_REAP, pid))
        data = _recv_exact(self.ctrl, _INT.size, time.monotonic() + _ZYGOTE_IO_TIMEOUT_S)
        if data is None:
            raise EOFError("the worker zygote exited")
        return _INT.unpack(data)[0]

    def close(self) -> None:
        """End the zygote and, through it, every worker; returns once they are gone (bounded)."""
        try:
            self.ctrl.shutdown(socket.SHUT_RDWR)  # also wakes a thread blocked on this socket
        except OSError:
            pass
        self.ctrl.close()
        try:
            self.proc.wait(timeout=_CLOSE_TIMEOUT_S)
        except Exception:  # noqa: BLE001 - subprocess.TimeoutExpired: the workers die by PDEATHSIG
            self.proc.kill()
            try:
                self.proc.wait(timeout=_CLOSE_TIMEOUT_S)
            except Exception:  # noqa: BLE001
                pass


class _NotDelivered(Exception):
    """A task could not be handed to a worker: the worker had died while idle."""


class _Worker:
    __slots__ = ("pid", "sock", "zygote")

    def __init__(self, pid: int, sock: socket.socket, zygote: _Zygote):
        self.pid = pid
        self.sock = sock
        self.zygote = zygote

    def exchange(self, payload: bytes, time_limit_s: float) -> bytes:
        """Send a task and wait for its reply. TimeoutError past the limit; _NotDelivered when the
        worker was already gone; EOFError or OSError when it died during the task."""
        deadline = time.monotonic() + time_limit_s
        try:
            _send_frame(self.sock, payload, deadline)
        except (BrokenPipeError, ConnectionResetError):
            raise _NotDelivered from None
        reply = _recv_frame(self.sock, deadline)
        if reply is None:
            raise EOFError("worker exited")
        return reply


class _Processes:
    """What must be cleaned up even if the pool object is never closed: its zygote (which takes
    the workers with it). Kept apart from the pool so that a finalizer can hold it."""

    def __init__(self) -> None:
        self.zygote: _Zygote | None = None
        self.owner_pid = os.getpid()

    def close(self) -> None:
        zygote, self.zygote = self.zygote, None
        if zygote is not None and os.getpid() == self.owner_pid:  # a fork's copy is not ours to end
            zygote.close()


class WorkerPool:
    """``size`` persistent worker processes that run functions under hard limits.

    Parameters:

    - ``size``: the number of workers, i.e. of calls running at once (default: ``min(4, CPUs)``).
      Any number of callers may call at once: the others wait, in order, for a free worker,
      without holding a process or, for :meth:`run`, a thread; the time limit starts when a worker
      picks the call up.
    - ``time_limit_s``: the wall-clock limit of a call, from handing it to a worker to its reply;
      a call past it raises :class:`WorkerTimeout` and its worker is SIGKILLed and replaced. A call
      can ask for a different limit.
    - ``memory_limit_mb``: each worker's address-space limit (``RLIMIT_AS``), None for none. It
      covers the whole worker, including what ``preload`` already occupies (an interpreter with
      sympy imported takes a few hundred MB of address space), so leave room. A call past it raises
      :class:`WorkerMemoryError` and its worker is replaced.
    - ``preload``: modules imported once, before any worker is forked, so workers start warm.
    - ``initializer``: a module-level function called once after ``preload``, also before any
      fork (warm caches here). It must not start threads. Failures surface as :class:`WorkerError`
      from the first call (or :meth:`start`).
    - ``start_timeout_s``: how long start-up (``preload`` and ``initializer``) may take.

    Processes start on the first call or on :meth:`start`. Thread safe; usable from several event
    loops and threads at once. Use as a context manager (``with`` or ``async with``) or call
    :meth:`close`; it is also closed when garbage collected and at interpreter exit. A pool
    belongs to the process that created it: in a forked child, create a new one.
    """

    def __init__(
        self,
        size: int | None = None,
        *,
        time_limit_s: float,
        memory_limit_mb: int | None,
        preload: Iterable[str] = (),
        initializer: Callable[[], Any] | None = None,
        start_timeout_s: float = 60.0,
    ) -> None:
        if size is None:
            size = min(4, os.cpu_count() or 1)
        if size < 1:
            raise ValueError(f"size must be at least 1, got {size}")
        self.size = size
        self.time_limit_s = _positive("time_limit_s", time_limit_s)
        if memory_limit_mb is not None and memory_limit_mb < 1:
            raise ValueError(f"memory_limit_mb must be a positive number of MB or None, got {memory_limit_mb}")
        self.memory_limit_mb = memory_limit_mb
        self.preload = tuple(preload)
        if initializer is not None:
            _pickle_task(initializer, ())  # fail now, not in the zygote
        self.initializer = initializer
        self.start_timeout_s = _positive("start_timeout_s", start_timeout_s)

        self._state_lock = threading.Lock()  # _closed, _workers, _executor: held briefly
        self._zygote_lock = threading.Lock()  # talking to the zygote (may wait for its start-up)
        self._closed = False
        self._workers: dict[int, _Worker] = {}
        self._executor: ThreadPoolExecutor | None = None
        # Free slots, most recently used first (a warm worker is reused): a worker, or None for
        # "fork one when needed".
        self._idle: queue.LifoQueue[_Worker | None] = queue.LifoQueue()
        for _ in range(size):
            self._idle.put(None)
        self._processes = _Processes()
        self._finalizer = weakref.finalize(self, self._processes.close)

    # --- public ---

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def pids(self) -> list[int]:
        """Process ids of the workers now running (started lazily, so fewer than ``size`` at first)."""
        with self._state_lock:
            return sorted(self._workers)

    async def run(self, fn: Callable[..., T], /, *args: Any, time_limit_s: float | None = None) -> T:
        """``fn(*args)`` computed in a worker process, within ``time_limit_s`` (default: the
        pool's).

        Raises :class:`WorkerTimeout`, :class:`WorkerMemoryError`, :class:`WorkerCrashed`,
        :class:`WorkerTaskError` (``fn`` raised) or :class:`WorkerPoolClosed`; ``TypeError`` when
        ``fn`` or ``args`` cannot be pickled. Cancelling the awaiting task does not stop a call that
        a worker has begun: it runs to its end or its time limit, and its result is dropped.
        """
        import asyncio

        limit = self.time_limit_s if time_limit_s is None else _positive("time_limit_s", time_limit_s)
        payload = _pickle_task(fn, args)
        loop = asyncio.get_running_loop()
        try:
            executor = self._get_executor()
            future = loop.run_in_executor(executor, self._call, payload, limit, _function_name(fn))
        except RuntimeError:  # the executor was shut down by close() meanwhile
            raise WorkerPoolClosed("the worker pool is closed") from None
        return await future

    def run_blocking(self, fn: Callable[..., T], /, *args: Any, time_limit_s: float | None = None) -> T:
        """:meth:`run` for threads: blocks the calling thread until the result or the error."""
        limit = self.time_limit_s if time_limit_s is None else _positive("time_limit_s", time_limit_s)
        return self._call(_pickle_task(fn, args), limit, _function_name(fn))

    async def start(self) -> None:
        """Start every worker now (e.g. in a server's start-up) instead of on first use."""
        import asyncio

        await asyncio.get_running_loop().run_in_executor(self._get_executor(), self.start_blocking)

    def start_blocking(self) -> None:
        """:meth:`start` for threads."""
        slots: list[_Worker | None] = []
        try:
            while len(slots) < self.size:
                slots.append(self._take_slot())
            for i, slot in enumerate(slots):
                if slot is None:
                    slots[i] = self._spawn()
        finally:
            for slot in slots:
                self._give_back(slot)

    def close(self) -> None:
        """Stop every worker and the zygote, and return once they are gone (a few seconds at
        most). Calls in progress raise :class:`WorkerPoolClosed`; so do later calls. Idempotent."""
        with self._state_lock:
            if self._closed:
                return
            self._closed = True
            executor, self._executor = self._executor, None
            workers = list(self._workers.values())
            self._workers.clear()
        if executor is not None:
            # Queued calls still run, each noticing the pool is closed and raising at once.
            executor.shutdown(wait=False)
        self._finalizer()  # ends the zygote, which kills and reaps every worker first
        for worker in workers:
            worker.sock.close()

    async def aclose(self) -> None:
        """:meth:`close` without blocking the event loop."""
        import asyncio

        await asyncio.to_thread(self.close)

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> WorkerPool:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"{len(self._workers)} running"
        return (
            f"<WorkerPool size={self.size} time_limit_s={self.time_limit_s:g} "
            f"memory_limit_mb={self.memory_limit_mb} {state}>"
        )

    # --- internals ---

    def _get_executor(self) -> ThreadPoolExecutor:
        """Threads that wait on workers for :meth:`run`: one per worker, so waiting calls queue in
        the executor (as cheap futures), not in threads."""
        with self._state_lock:
            self._check_open()
            if self._executor is None:
                from concurrent.futures import ThreadPoolExecutor

                self._executor = ThreadPoolExecutor(max_workers=self.size, thread_name_prefix="gym-worker-pool")
            return self._executor

    def _check_open(self) -> None:
        if self._closed:
            raise WorkerPoolClosed("the worker pool is closed")
        if os.getpid() != self._processes.owner_pid:
            raise WorkerPoolClosed(
                f"this worker pool belongs to process {self._processes.owner_pid}; create a new one after a fork"
            )

    def _take_slot(self) -> _Worker | None:
        while True:
            self._check_open()
            try:
                return self._idle.get(timeout=0.25)  # woken at once by a free slot; the timeout notices close()
            except queue.Empty:
                continue

    def _give_back(self, slot: _Worker | None) -> None:
        if self._closed and slot is not None:
            slot.sock.close()
            return
        self._idle.put(slot)

    def _call(self, payload: bytes, time_limit_s: float, name: str) -> Any:
        slot = self._take_slot()
        try:
            for attempt in (1, 2):
                worker = slot if slot is not None else self._spawn()
                slot = worker
                try:
                    reply = worker.exchange(payload, time_limit_s)
                except _NotDelivered:
                    # The worker died while idle (e.g. killed from outside): the task never ran, so
                    # a fresh worker may run it.
                    status = self._discard(worker)
                    slot = None
                    self._check_open()
                    if attempt == 2:
                        raise WorkerCrashed(name, _describe_status(status)) from None
                    continue
                except TimeoutError:
                    slot = self._replace(worker)
                    if self._closed:
                        raise WorkerPoolClosed("the worker pool was closed during the call") from None
                    raise WorkerTimeout(name, time_limit_s) from None
                except (EOFError, OSError):
                    status = self._discard(worker)
                    slot = None
                    if self._closed:
                        raise WorkerPoolClosed("the worker pool was closed during the call") from None
                    slot = self._respawn()
                    raise WorkerCrashed(name, _describe_status(status)) from None
                except BaseException:
                    # Interrupted (KeyboardInterrupt...): the worker may still answer this task,
                    # and must not hand that answer to the next call.
                    self._discard(worker)
                    slot = None
                    raise
                try:
                    kind, *rest = pickle.loads(reply)
                except Exception as exc:  # noqa: BLE001 - e.g. the result's class is not importable here
                    raise WorkerTaskError(
                        name, type(exc).__qualname__, f"its result cannot be unpickled in this process: {exc}"
                    ) from None
                if kind == _OK:
                    return rest[0]
                if kind == _MEMORY:
                    slot = self._replace(worker)
                    raise WorkerMemoryError(name, self.memory_limit_mb, rest[0])
                raise WorkerTaskError(name, *rest)
            raise AssertionError("unreachable")
        finally:
            self._give_back(slot)

    def _spawn(self) -> _Worker:
        with self._zygote_lock:
            for attempt in (1, 2):
                self._check_open()
                zygote = self._processes.zygote
                try:
                    if zygote is None:
                        zygote = self._start_zygote()
                    zygote.wait_ready(self.start_timeout_s)
                    pid, sock = zygote.spawn()
                except WorkerError:
                    if zygote is not None:
                        self._end_zygote(zygote)
                    self._check_open()
                    raise
                except (OSError, EOFError) as exc:  # the zygote died or hung: start a new one, once
                    if zygote is not None:
                        self._end_zygote(zygote)
                    self._check_open()
                    if attempt == 2:
                        raise WorkerError(f"cannot start a worker process: {exc}") from None
                    continue
                worker = _Worker(pid, sock, zygote)
                with self._state_lock:
                    if not self._closed:
                        self._workers[pid] = worker
                        return worker
                sock.close()
                self._check_open()
        raise AssertionError("unreachable")

    def _start_zygote(self) -> _Zygote:
        zygote = _Zygote(self.preload, self.initializer, self.memory_limit_mb)
        with self._state_lock:
            self._processes.zygote = zygote
        if self._closed:  # close() ran meanwhile and missed this zygote
            self._processes.close()
            self._check_open()
        return zygote

    def _end_zygote(self, zygote: _Zygote) -> None:
        """Stop a zygote that failed (its workers go with it) and forget it and its workers."""
        with self._state_lock:
            if self._processes.zygote is zygote:
                self._processes.zygote = None
            dropped = [pid for pid, w in self._workers.items() if w.zygote is zygote]
            for pid in dropped:
                del self._workers[pid]
        zygote.close()

    def _discard(self, worker: _Worker) -> int | None:
        """Kill a worker and reap it; its wait status when known."""
        try:
            os.kill(worker.pid, signal.SIGKILL)  # still our zygote's child (maybe a zombie): not reused yet
        except OSError:
            pass
        worker.sock.close()
        with self._state_lock:
            self._workers.pop(worker.pid, None)
        with self._zygote_lock:
            if self._processes.zygote is not worker.zygote or self._closed:
                return None  # that zygote is gone, and took its workers with it
            try:
                return worker.zygote.reap(worker.pid)
            except (OSError, EOFError):
                self._end_zygote(worker.zygote)
                return None

    def _respawn(self) -> _Worker | None:
        """A replacement worker now (forking is cheap, and the next call then finds it warm), or
        None to fork one on the next call."""
        try:
            return self._spawn()
        except WorkerError:
            return None

    def _replace(self, worker: _Worker) -> _Worker | None:
        self._discard(worker)
        return None if self._closed else self._respawn()


def _positive(name: str, value: float) -> float:
    if not value > 0:
        raise ValueError(f"{name} must be a positive number of seconds, got {value!r}")
    return float(value)
