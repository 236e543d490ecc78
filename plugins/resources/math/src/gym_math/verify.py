"""Checking a model's final ``\\boxed{}`` answer against a reference answer.

Public API:

- :func:`extract_boxed_answer` — the content of the last ``\\boxed{...}`` / ``\\fbox{...}``;
- :func:`answers_equivalent` — are two answer strings mathematically the same (in-process, no
  time limit);
- :func:`verify_answer` / :func:`averify_answer` — extract, compare under a hard wall-clock limit,
  and return a :class:`VerifyResult` (``reward`` 1.0/0.0, ``extracted_answer``, ``reason``);
- :class:`VerifierPool`, :func:`get_default_pool`, :func:`shutdown_default_pool` — the worker
  processes behind the hard limit.

Reasons reported by :func:`verify_answer`: ``"correct"``, ``"wrong"``, ``"no_boxed_answer"``,
``"timeout"`` (the comparison ran past ``timeout_s`` and its worker was killed) and ``"error"``
(the worker died, e.g. killed by the OS for memory).

Why worker processes: sympy can spin for hours (or until memory runs out) on inputs such as
``9^{9^{9^{9}}}``. ``math_verify`` bounds its own work with ``signal.alarm``, which only works in
the main thread and cannot interrupt long C-level big-integer arithmetic, so its timeouts are
disabled here (``parsing_timeout=None`` / ``timeout_seconds=None``) and the comparison runs in a
small pool of persistent worker processes instead. A call sends the two strings over a socket and
waits at most ``timeout_s``; on expiry the worker is SIGKILLed and a fresh one is forked from a
pre-warmed "zygote" process, so the caller's wall time is bounded by ``timeout_s`` plus a few
milliseconds no matter what sympy does. Warm workers keep sympy imported and math_verify's parser
caches initialised, so a simple answer costs the socket round trip (~0.1-0.2 ms) plus the
comparison itself. Cases decidable by plain string normalisation (e.g. ``"12"`` vs ``"12"``,
``"Paris"`` vs ``"paris"``) are answered in the calling process without touching a worker.

Equivalence (:func:`answers_equivalent`), in order:

1. normalised strings equal (whitespace, ``$``/``\\(``, ``\\text{}``, ``\\dfrac``, ``\\left`` and
   a trailing full stop removed) → equivalent;
2. if either answer is plain words (letters, spaces, ``'`` and ``-`` only, e.g. ``Paris``) the
   answers are compared as text, case- and whitespace-insensitively, and nothing else is tried
   (so ``yes`` and ``sey`` are not "equal products of symbols");
3. ``math_verify.parse`` both and ``math_verify.verify(gold=expected, target=predicted)``
   (numbers, fractions, decimals, expressions, equations, sets, intervals, tuples, matrices);
4. fallbacks when (3) finds no match: exact rational comparison of plain numbers
   (``1/2``, ``0.5``, ``\\frac{1}{2}``, ``1,000``), then ``latex2sympy`` +
   ``sympy.simplify(a - b) == 0`` when math_verify could not parse one of the sides.
"""

from __future__ import annotations

import asyncio
import atexit
import functools
import logging
import os
import queue
import re
import signal
import socket
import struct
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from fractions import Fraction
from multiprocessing.connection import Connection
from typing import Any

__all__ = [
    "VerifyResult",
    "VerifierPool",
    "extract_boxed_answer",
    "answers_equivalent",
    "verify_answer",
    "averify_answer",
    "get_default_pool",
    "shutdown_default_pool",
]

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------------------------
# Extraction
# --------------------------------------------------------------------------------------------

# Tokens that matter for brace matching: a box opener, any escaped character (so ``\{``, ``\}``
# and ``\\`` never count as braces), and bare braces. Alternation order matters: the box opener
# must be tried before the generic escape.
_BOX_TOKEN_RE = re.compile(r"\\(?:boxed|fbox)\s*\{|\\.|[{}]", re.DOTALL)


def extract_boxed_answer(text: str) -> str | None:
    """Return the stripped content of the last ``\\boxed{...}`` (or ``\\fbox{...}``) in ``text``.

    Braces are matched with nesting (``\\boxed{\\frac{1}{2}}`` → ``\\frac{1}{2}``) and escaped
    braces (``\\{``, ``\\}``) are not counted. "Last" means the box that closes last, so a box
    nested in another yields the outer one; if the outer content is itself a single box it is
    unwrapped (``\\boxed{\\boxed{3}}`` → ``3``). A box that is never closed (e.g. a response cut
    off mid-answer) is ignored, and an earlier complete box, if any, is returned. Returns None
    when there is no complete box.
    """
    if not text or ("boxed" not in text and "fbox" not in text):
        return None
    # Stack of open braces: the content start index for a box, -1 for an ordinary brace.
    stack: list[int] = []
    last: tuple[int, int] | None = None
    for m in _BOX_TOKEN_RE.finditer(text):
        tok = m.group()
        if tok == "{":
            stack.append(-1)
        elif tok == "}":
            if not stack:
                continue  # stray closing brace: ignore
            start = stack.pop()
            if start >= 0:
                last = (start, m.start())
        elif len(tok) > 2:  # a box opener (escapes are 2 characters, braces 1)
            stack.append(m.end())
        # any other token is an escaped character: nothing to do
    if last is None:
        return None
    content = text[last[0] : last[1]].strip()
    inner = extract_boxed_answer(content) if content.startswith(("\\boxed", "\\fbox")) else None
    if inner is not None and _is_single_box(content):
        return inner
    return content


def _is_single_box(s: str) -> bool:
    """True when ``s`` is exactly one ``\\boxed{...}``/``\\fbox{...}`` and nothing else."""
    m = re.match(r"\\(?:boxed|fbox)\s*\{", s)
    if not m:
        return False
    depth = 1
    i = m.end()
    while i < len(s):
        c = s[i]
        if c == "\\":
            i += 2
            continue
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return s[i + 1 :].strip() == ""
        i += 1
    return False


# --------------------------------------------------------------------------------------------
# Normalisation helpers (pure string work, safe to run in the calling process)
# --------------------------------------------------------------------------------------------

_TEXT_CMD_RE = re.compile(
    r"\\(?:text|textbf|textit|textrm|textnormal|mathrm|mathbf|mathit|mbox|operatorname)\s*\{([^{}]*)\}"
)
_SPACING_RE = re.compile(r"\\[,;:! ]|~|\\quad|\\qquad")
_LEFT_RIGHT_RE = re.compile(r"\\(?:left|right)(?![a-zA-Z])")
_WORDS_RE = re.compile(r"[A-Za-z]+(?:[ '\-]+[A-Za-z]+)*")
_WS_RE = re.compile(r"\s+")


def _strip_math_delimiters(s: str) -> str:
    s = s.strip()
    changed = True
    while changed and s:
        changed = False
        for left, right in (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]")):
            if len(s) >= len(left) + len(right) and s.startswith(left) and s.endswith(right):
                inner = s[len(left) : len(s) - len(right)]
                if left in inner or right in inner:  # "$1$ and $2$" is not one math span
                    continue
                s = inner.strip()
                changed = True
                break
    return s


def _normalize(s: str) -> str:
    """Light, meaning-preserving clean-up shared by all comparison steps."""
    s = _strip_math_delimiters(s)
    for _ in range(3):  # a few rounds handle \text{\textbf{x}}
        new = _TEXT_CMD_RE.sub(r"\1", s)
        if new == s:
            break
        s = new
    s = _SPACING_RE.sub(" ", s)
    s = _LEFT_RIGHT_RE.sub("", s)
    s = s.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    s = _WS_RE.sub(" ", s).strip()
    s = s.rstrip(".").rstrip()
    return s


def _is_words(s: str) -> bool:
    return _WORDS_RE.fullmatch(s) is not None


def _fast_decision(predicted: str, expected: str) -> bool | None:
    """Decide by string normalisation alone; None when mathematics is needed."""
    p, e = _normalize(predicted), _normalize(expected)
    if not p or not e:
        return False
    if p.replace(" ", "") == e.replace(" ", ""):
        return True
    if _is_words(p) or _is_words(e):
        return p.casefold() == e.casefold()
    return None


# --------------------------------------------------------------------------------------------
# Equivalence
# --------------------------------------------------------------------------------------------

_math_verify_ready = False


class _DropTimeoutDisabledWarning(logging.Filter):
    """math_verify warns once that its (signal based) timeouts are off; that is on purpose here."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Timeout is disabled")


def _import_math_verify() -> Any:
    global _math_verify_ready
    import math_verify

    if not _math_verify_ready:
        for name in ("math_verify.parser", "math_verify.grader"):
            logging.getLogger(name).addFilter(_DropTimeoutDisabledWarning())
        _math_verify_ready = True
    return math_verify


def _mv_parse(mv: Any, s: str) -> list[Any]:
    """Parse one bare answer with math_verify; tries a few wrappings, first sympy result wins."""
    from sympy import Basic, MatrixBase

    fallback: list[Any] = []
    for wrapped in (f"${s}$", f"\\boxed{{{s}}}", s):
        try:
            res = mv.parse(wrapped, parsing_timeout=None)
        except Exception:  # noqa: BLE001 - a parser bug must not fail the comparison
            continue
        if any(isinstance(x, (Basic, MatrixBase)) for x in res):
            return res
        if res and not fallback:
            fallback = res
    return fallback


_THOUSANDS_RE = re.compile(r"[+-]?\d{1,3}(?:,\d{3})+(?:\.\d+)?")
_UNSIGNED = r"(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?"
_DECIMAL_RE = re.compile(r"[+-]?" + _UNSIGNED)
_SLASH_RE = re.compile(rf"([+-]?)\(?({_UNSIGNED})\)?/\(?({_UNSIGNED})\)?")
_FRAC_RE = re.compile(r"([+-]?)\\frac\s*\{\s*([^{}]+?)\s*\}\s*\{\s*([^{}]+?)\s*\}")


def _to_number(s: str) -> tuple[Fraction, bool] | None:
    """A plain number as an exact Fraction, plus whether it was written with a decimal point."""
    s = s.replace(" ", "")
    if _THOUSANDS_RE.fullmatch(s):
        s = s.replace(",", "")
    try:
        if _DECIMAL_RE.fullmatch(s):
            return Fraction(s), ("." in s or "e" in s.lower())
        m = _SLASH_RE.fullmatch(s) or _FRAC_RE.fullmatch(s)
        if m:
            num, den = Fraction(m.group(2)), Fraction(m.group(3))
            if den == 0:
                return None
            value = num / den
            return (-value if m.group(1) == "-" else value), ("." in m.group(2) + m.group(3))
    except (ValueError, ZeroDivisionError, OverflowError):
        return None
    return None


def _numbers_equal(p: str, e: str) -> bool | None:
    a, b = _to_number(p), _to_number(e)
    if a is None or b is None:
        return None
    if a[0] == b[0]:
        return True
    if a[1] or b[1]:  # a decimal was involved: allow rounding at the 6th significant place
        return abs(a[0] - b[0]) <= Fraction(1, 10**6) * max(Fraction(1), abs(b[0]))
    return False


def _sympy_fallback(p: str, e: str) -> bool:
    from latex2sympy2_extended import latex2sympy
    from sympy import simplify

    try:
        a, b = latex2sympy(p), latex2sympy(e)
        return bool(simplify(a - b) == 0)
    except Exception:  # noqa: BLE001
        return False


def answers_equivalent(predicted: str, expected: str) -> bool:
    """Whether ``predicted`` and ``expected`` denote the same answer (see the module docstring).

    Both are bare answers (what was inside the box), e.g. ``"\\frac{1}{2}"`` and ``"0.5"``. The
    comparison is not symmetric in corner cases (``expected`` is math_verify's gold). Runs in the
    calling thread without any time limit and without signals (safe in worker threads); use
    :func:`verify_answer` for untrusted input.
    """
    if predicted is None or expected is None:
        return False
    fast = _fast_decision(predicted, expected)
    if fast is not None:
        return fast
    p, e = _normalize(predicted), _normalize(expected)

    mv = _import_math_verify()
    from sympy import Basic, MatrixBase

    gold = _mv_parse(mv, e)
    target = _mv_parse(mv, p)
    if gold and target:
        try:
            if mv.verify(gold, target, timeout_seconds=None):
                return True
        except Exception:  # noqa: BLE001
            pass

    numeric = _numbers_equal(p, e)
    if numeric is not None:
        return numeric

    def parsed(res: list[Any]) -> bool:
        return any(isinstance(x, (Basic, MatrixBase)) for x in res)

    if not (parsed(gold) and parsed(target)):
        return _sympy_fallback(p, e)
    return False


# --------------------------------------------------------------------------------------------
# Worker processes
#
# A "zygote" process is started once per pool with subprocess (a fresh interpreter: no fork of a
# multi-threaded server, and unlike multiprocessing's spawn/forkserver it never re-imports the
# caller's __main__). It imports sympy/math_verify, warms the parser caches, and then forks a
# worker whenever the pool asks for one, handing the worker's end of a new socket pair back over
# the control socket (SCM_RIGHTS). Workers are therefore ready within milliseconds, also right
# after a timed-out worker was killed. Workers talk to the pool with
# multiprocessing.connection.Connection framing (pickled tuples).
# --------------------------------------------------------------------------------------------

_WARMUP = (("\\frac{1}{2}", "0.5"), ("x+1", "1+x"), ("\\{1,2\\}", "\\{2,1\\}"), ("3.0", "3"))
_PID = struct.Struct("!q")


def _serve(conn: Connection) -> None:
    """Loop of one worker process: receive (predicted, expected), answer ("ok", bool)."""
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg is None:
            return
        try:
            reply: tuple[str, Any] = ("ok", bool(answers_equivalent(*msg)))
        except BaseException as exc:  # noqa: BLE001 - report, keep serving
            reply = ("error", f"{type(exc).__name__}: {exc}"[:500])
        try:
            conn.send(reply)
        except (OSError, EOFError):
            return


def _zygote_main(ctrl_fd: int, memory_limit_mb: int) -> None:
    """Entry point of the zygote process (see above). Exits when the pool closes its end."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's business
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # workers are reaped automatically
    ctrl = socket.socket(fileno=ctrl_fd)
    try:
        for p, e in _WARMUP:
            answers_equivalent(p, e)
    except Exception:  # noqa: BLE001
        pass
    ctrl.sendall(b"R")
    commands = ctrl.makefile("rb")
    for line in commands:
        if line.strip() != b"spawn":
            continue
        ours, theirs = socket.socketpair()
        pid = os.fork()
        if pid == 0:  # worker
            code = 0
            try:
                commands.close()
                ctrl.close()
                ours.close()
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                if memory_limit_mb > 0:
                    try:
                        import resource

                        limit = memory_limit_mb * 1024 * 1024
                        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
                    except (ImportError, ValueError, OSError):
                        pass
                _serve(Connection(theirs.detach()))
            except BaseException:  # noqa: BLE001
                code = 1
            finally:
                os._exit(code)
        theirs.close()
        socket.send_fds(ctrl, [_PID.pack(pid)], [ours.fileno()])
        ours.close()


class _Zygote:
    def __init__(self, memory_limit_mb: int | None) -> None:
        ours, theirs = socket.socketpair()
        src_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        code = (
            "import sys; sys.path.insert(0, sys.argv[1]); "
            "from gym_math.verify import _zygote_main; _zygote_main(int(sys.argv[2]), int(sys.argv[3]))"
        )
        self.proc = subprocess.Popen(
            [sys.executable, "-c", code, src_root, str(theirs.fileno()), str(memory_limit_mb or 0)],
            pass_fds=[theirs.fileno()],
            stdin=subprocess.DEVNULL,
        )
        theirs.close()
        self.ctrl = ours
        self.ready = False

    def spawn(self, startup_timeout_s: float) -> _Worker:
        """Fork one worker (waits for the zygote's start-up the first time)."""
        if not self.ready:
            self.ctrl.settimeout(startup_timeout_s)
            try:
                if self.ctrl.recv(1) != b"R":
                    raise EOFError("verifier zygote exited during start-up")
            finally:
                self.ctrl.settimeout(None)
            self.ready = True
        self.ctrl.sendall(b"spawn\n")
        data, fds, _flags, _addr = socket.recv_fds(self.ctrl, _PID.size, 1)
        while data and len(data) < _PID.size:
            more = self.ctrl.recv(_PID.size - len(data))
            if not more:
                break
            data += more
        if len(data) != _PID.size or len(fds) != 1:
            for fd in fds:
                os.close(fd)
            raise EOFError("verifier zygote went away")
        os.set_inheritable(fds[0], False)
        return _Worker(_PID.unpack(data)[0], Connection(fds[0]))

    def close(self) -> None:
        try:
            self.ctrl.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=2.0)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@dataclass
class _Worker:
    pid: int
    conn: Connection

    def kill(self) -> None:
        try:
            os.kill(self.pid, signal.SIGKILL)
        except OSError:
            pass
        self.conn.close()

    def stop(self) -> None:
        try:
            self.conn.send(None)  # the worker exits at its next recv
        except OSError:
            pass
        self.conn.close()


class VerifierPool:
    """A fixed number of persistent worker processes running :func:`answers_equivalent`.

    Thread safe: a call takes an idle worker (waiting if all are busy), so at most ``size``
    comparisons run at once. A worker that exceeds its time limit is SIGKILLed and a fresh one is
    forked from the pool's zygote process (milliseconds). Start-up (the zygote importing sympy,
    a few seconds) happens in the background from construction on; a call that arrives earlier
    waits for it, up to ``startup_timeout_s``, without that counting against its ``timeout_s``.
    Call :meth:`wait_ready` at server start-up to get it over with.

    ``size`` defaults to ``$GYM_MATH_VERIFY_WORKERS`` or ``min(4, cpu_count)``.
    ``memory_limit_mb`` caps each worker's address space (RLIMIT_AS; None for no cap), so a
    runaway expression fails with MemoryError (→ "wrong") instead of exhausting the machine.
    POSIX only (fork, SCM_RIGHTS).
    """

    def __init__(
        self,
        size: int | None = None,
        *,
        memory_limit_mb: int | None = 4096,
        startup_timeout_s: float = 120.0,
    ) -> None:
        if size is None:
            env = os.environ.get("GYM_MATH_VERIFY_WORKERS")
            size = int(env) if env else min(4, os.cpu_count() or 1)
        if size < 1:
            raise ValueError("size must be >= 1")
        self.size = size
        self.memory_limit_mb = memory_limit_mb
        self.startup_timeout_s = startup_timeout_s
        self.pid = os.getpid()
        self._lock = threading.Lock()  # guards the zygote (spawning) and close()
        self._closed = False
        self._executor: ThreadPoolExecutor | None = None
        self._zygote: _Zygote | None = _Zygote(memory_limit_mb)
        # Idle slots: a live worker, or None for "fork one when needed".
        self._idle: queue.LifoQueue[_Worker | None] = queue.LifoQueue()
        for _ in range(size):
            self._idle.put(None)

    @property
    def closed(self) -> bool:
        return self._closed

    def _spawn(self) -> _Worker:
        with self._lock:
            if self._closed:
                raise RuntimeError("VerifierPool is closed")
            for attempt in range(2):
                if self._zygote is None:
                    self._zygote = _Zygote(self.memory_limit_mb)
                try:
                    return self._zygote.spawn(self.startup_timeout_s)
                except (OSError, EOFError):  # zygote died (or timed out): start over once
                    self._zygote.close()
                    self._zygote = None
                    if attempt:
                        raise
            raise AssertionError("unreachable")

    def wait_ready(self) -> None:
        """Block until every worker is running (e.g. at server start-up)."""
        slots: list[_Worker | None] = []
        try:
            while len(slots) < self.size:
                slots.append(self._idle.get())
            for i, slot in enumerate(slots):
                if slot is None:
                    slots[i] = self._spawn()
        finally:
            for slot in slots:
                self._idle.put(slot)

    def check(self, predicted: str, expected: str, timeout_s: float | None) -> tuple[str, Any]:
        """Run ``answers_equivalent(predicted, expected)`` in a worker.

        Returns ``("ok", bool)``, ``("timeout", None)`` or ``("error", message)``.
        """
        if self._closed:
            raise RuntimeError("VerifierPool is closed")
        slot = self._idle.get()
        keep = False
        try:
            if slot is None:
                try:
                    slot = self._spawn()
                except (OSError, EOFError, RuntimeError) as exc:
                    return "error", f"cannot start a verifier worker: {exc}"
            try:
                slot.conn.send((predicted, expected))
                if slot.conn.poll(timeout_s):
                    reply = slot.conn.recv()
                    keep = True
                    return reply
            except (EOFError, OSError) as exc:  # the worker died (e.g. killed for memory)
                return "error", f"verifier worker died: {type(exc).__name__}"
            return "timeout", None
        finally:
            if slot is not None and not keep:
                slot.kill()
                slot = None
            if self._closed:
                if slot is not None:
                    slot.stop()
            else:
                if slot is None:  # replace now: forking is cheap and keeps the next call fast
                    try:
                        slot = self._spawn()
                    except (OSError, EOFError, RuntimeError):
                        slot = None
                self._idle.put(slot)

    @property
    def executor(self) -> ThreadPoolExecutor:
        """Threads that wait on workers for :func:`averify_answer` (one per worker)."""
        with self._lock:
            if self._closed:
                raise RuntimeError("VerifierPool is closed")
            if self._executor is None:
                self._executor = ThreadPoolExecutor(
                    max_workers=self.size, thread_name_prefix="gym-math-verify"
                )
            return self._executor

    def close(self) -> None:
        """Stop the zygote and idle workers; busy workers are stopped when their call returns."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            executor, self._executor = self._executor, None
            zygote, self._zygote = self._zygote, None
        if executor is not None:
            executor.shutdown(wait=False, cancel_futures=True)
        if os.getpid() != self.pid:
            return  # a forked copy: the processes belong to the parent
        while True:
            try:
                slot = self._idle.get_nowait()
            except queue.Empty:
                break
            if slot is not None:
                slot.stop()
        if zygote is not None:
            zygote.close()

    def __enter__(self) -> VerifierPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_default_pool: VerifierPool | None = None
_default_lock = threading.Lock()


def get_default_pool() -> VerifierPool:
    """The process-wide pool used by :func:`verify_answer`, created on first use."""
    global _default_pool
    with _default_lock:
        if _default_pool is None or _default_pool.closed or _default_pool.pid != os.getpid():
            _default_pool = VerifierPool()
        return _default_pool


def shutdown_default_pool() -> None:
    """Stop the default pool's workers (also done at interpreter exit)."""
    global _default_pool
    with _default_lock:
        pool, _default_pool = _default_pool, None
    if pool is not None:
        pool.close()


atexit.register(shutdown_default_pool)


# --------------------------------------------------------------------------------------------
# Verification entry points
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class VerifyResult:
    """Outcome of :func:`verify_answer`."""

    reward: float
    extracted_answer: str | None
    reason: str  # "correct" | "wrong" | "no_boxed_answer" | "timeout" | "error"


def verify_answer(
    response_text: str,
    expected_answer: str,
    timeout_s: float | None = 5.0,
    *,
    pool: VerifierPool | None = None,
) -> VerifyResult:
    """Reward 1.0 when the last ``\\boxed{}`` in ``response_text`` is equivalent to
    ``expected_answer``, else 0.0.

    The mathematical comparison runs in a worker process of ``pool`` (default:
    :func:`get_default_pool`) and is abandoned after ``timeout_s`` seconds of wall time (None: no
    limit), giving reason ``"timeout"``. Safe to call from any thread; blocks the caller.
    """
    extracted = extract_boxed_answer(response_text or "")
    if extracted is None:
        return VerifyResult(0.0, None, "no_boxed_answer")
    fast = _fast_decision(extracted, str(expected_answer))
    if fast is not None:
        return VerifyResult(1.0 if fast else 0.0, extracted, "correct" if fast else "wrong")
    status, value = (pool or get_default_pool()).check(extracted, str(expected_answer), timeout_s)
    if status == "ok":
        return VerifyResult(1.0 if value else 0.0, extracted, "correct" if value else "wrong")
    if status == "timeout":
        return VerifyResult(0.0, extracted, "timeout")
    log.warning("math verification failed for %.200r: %s", extracted, value)
    return VerifyResult(0.0, extracted, "error")


async def averify_answer(
    response_text: str,
    expected_answer: str,
    timeout_s: float | None = 5.0,
    *,
    pool: VerifierPool | None = None,
) -> VerifyResult:
    """:func:`verify_answer` for asyncio code: the wait happens in the pool's executor threads, so
    the event loop keeps running. Calls beyond the pool size queue up (their ``timeout_s`` starts
    when a worker picks them up)."""
    extracted = extract_boxed_answer(response_text or "")
    if extracted is None:
        return VerifyResult(0.0, None, "no_boxed_answer")
    if _fast_decision(extracted, str(expected_answer)) is not None:
        return verify_answer(response_text, expected_answer, timeout_s, pool=pool)
    pool = pool or get_default_pool()
    loop = asyncio.get_running_loop()
    call = functools.partial(verify_answer, response_text, expected_answer, timeout_s, pool=pool)
    return await loop.run_in_executor(pool.executor, call)
