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
small pool of persistent worker processes instead. A call sends the two strings over a pipe and
waits at most ``timeout_s``; on expiry the worker is SIGKILLed and replaced, so the caller's wall
time is bounded by ``timeout_s`` plus a few milliseconds no matter what sympy does. Warm workers
keep sympy imported and math_verify's parser caches initialised, so a simple answer costs the pipe
round trip (a fraction of a millisecond) plus the comparison itself. Cases decidable by plain
string normalisation (e.g. ``"12"`` vs ``"12"``) are answered in the calling process without
touching a worker.

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
import multiprocessing
import os
import queue
import re
import signal
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from fractions import Fraction
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
                s = s[len(left) : len(s) - len(right)].strip()
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
# --------------------------------------------------------------------------------------------

_WARMUP = (("\\frac{1}{2}", "0.5"), ("x+1", "1+x"), ("\\{1,2\\}", "\\{2,1\\}"), ("3.0", "3"))


def _worker_main(conn: Any, memory_limit_mb: int | None) -> None:
    """Loop of one worker process: receive (predicted, expected), answer ("ok", bool)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's business
    if memory_limit_mb:
        try:
            import resource

            limit = memory_limit_mb * 1024 * 1024
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        except (ImportError, ValueError, OSError):
            pass
    try:
        for p, e in _WARMUP:
            answers_equivalent(p, e)
    except Exception:  # noqa: BLE001
        pass
    try:
        conn.send(("ready", os.getpid()))
    except (OSError, EOFError):
        return
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError, KeyboardInterrupt):
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


def _mp_context() -> Any:
    methods = multiprocessing.get_all_start_methods()
    if "forkserver" in methods:
        ctx = multiprocessing.get_context("forkserver")
        # Only takes effect if the fork server is not running yet; then every (re)started worker
        # is forked with sympy and math_verify already imported.
        ctx.set_forkserver_preload(["math_verify", __name__])
        return ctx
    return multiprocessing.get_context("spawn")


class _Worker:
    def __init__(self, ctx: Any, memory_limit_mb: int | None) -> None:
        self.conn, child = ctx.Pipe(duplex=True)
        self.proc = ctx.Process(
            target=_worker_main, args=(child, memory_limit_mb), name="gym-math-verify", daemon=True
        )
        self.proc.start()
        child.close()
        self.ready = False

    def wait_ready(self, timeout_s: float) -> None:
        if self.ready:
            return
        if not self.conn.poll(timeout_s):
            raise TimeoutError(f"verifier worker not ready after {timeout_s:.0f} s")
        msg = self.conn.recv()
        if not (isinstance(msg, tuple) and msg and msg[0] == "ready"):
            raise RuntimeError(f"unexpected message from verifier worker: {msg!r}")
        self.ready = True

    def kill(self) -> None:
        try:
            self.proc.kill()
            self.proc.join(timeout=2.0)
        except Exception:  # noqa: BLE001
            pass
        try:
            self.conn.close()
        except Exception:  # noqa: BLE001
            pass

    def stop(self) -> None:
        try:
            self.conn.send(None)
            self.proc.join(timeout=0.5)
        except Exception:  # noqa: BLE001
            pass
        if self.proc.is_alive():
            self.kill()
        else:
            self.conn.close()


class VerifierPool:
    """A fixed number of persistent worker processes running :func:`answers_equivalent`.

    Thread safe: a call takes an idle worker (waiting if all are busy), so at most ``size``
    comparisons run at once. A worker that exceeds its time limit is killed and a fresh one is
    started right away (its start-up does not count against anyone's ``timeout_s``; a call that
    picks up a worker still starting waits up to ``startup_timeout_s`` for it).

    ``size`` defaults to ``$GYM_MATH_VERIFY_WORKERS`` or ``min(4, cpu_count)``.
    ``memory_limit_mb`` caps each worker's address space (RLIMIT_AS; None for no cap), so a runaway
    expression fails with MemoryError (→ "wrong") instead of exhausting the machine.
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
        self._ctx = _mp_context()
        self._idle: queue.LifoQueue[_Worker] = queue.LifoQueue()
        self._lock = threading.Lock()
        self._closed = False
        self._executor: ThreadPoolExecutor | None = None
        self.pid = os.getpid()
        for _ in range(size):
            self._idle.put(_Worker(self._ctx, memory_limit_mb))

    def wait_ready(self) -> None:
        """Block until every idle worker has started (e.g. at server start-up)."""
        workers = []
        try:
            while True:
                workers.append(self._idle.get_nowait())
        except queue.Empty:
            pass
        try:
            for w in workers:
                w.wait_ready(self.startup_timeout_s)
        finally:
            for w in workers:
                self._idle.put(w)

    def check(self, predicted: str, expected: str, timeout_s: float | None) -> tuple[str, Any]:
        """Run ``answers_equivalent(predicted, expected)`` in a worker.

        Returns ``("ok", bool)``, ``("timeout", None)`` or ``("error", message)``.
        """
        if self._closed:
            raise RuntimeError("VerifierPool is closed")
        worker = self._idle.get()
        replace = False
        try:
            try:
                worker.wait_ready(self.startup_timeout_s)
            except (TimeoutError, RuntimeError, EOFError, OSError) as exc:
                replace = True
                return "error", f"worker start-up failed: {exc}"
            try:
                worker.conn.send((predicted, expected))
                if worker.conn.poll(timeout_s):
                    return worker.conn.recv()
            except (EOFError, OSError) as exc:  # worker died (e.g. OOM-killed)
                replace = True
                return "error", f"worker died: {type(exc).__name__}"
            replace = True
            return "timeout", None
        except BaseException:
            replace = True  # interrupted mid-request: the pipe state is unknown
            raise
        finally:
            if replace:
                worker.kill()
                if not self._closed:
                    self._idle.put(_Worker(self._ctx, self.memory_limit_mb))
            elif self._closed:
                worker.stop()
            else:
                self._idle.put(worker)

    @property
    def executor(self) -> ThreadPoolExecutor:
        """Threads that wait on workers for :func:`averify_answer` (one per worker)."""
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(
                    max_workers=self.size, thread_name_prefix="gym-math-verify"
                )
            return self._executor

    def close(self) -> None:
        """Stop idle workers; busy ones are stopped when their call returns."""
        with self._lock:
            self._closed = True
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=False, cancel_futures=True)
        if os.getpid() != self.pid:
            return  # a forked copy: the workers belong to the parent
        while True:
            try:
                self._idle.get_nowait().stop()
            except queue.Empty:
                break

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
        if _default_pool is None or _default_pool._closed or _default_pool.pid != os.getpid():
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
