"""Checking a model's final ``\\boxed{}`` answer against a reference answer (the server's
``boxed`` grading mode; the ``library`` mode is :mod:`gym_math.library`).

Public API:

- :func:`extract_boxed_answer` — the content of the last ``\\boxed{...}`` / ``\\fbox{...}``;
- :func:`answers_equivalent` — are two answer strings mathematically the same (in-process, no
  time limit);
- :func:`verify_answer` / :func:`averify_answer` — extract, compare under a hard wall-clock limit,
  and return a :class:`VerifyResult` (``reward`` 1.0/0.0, ``extracted_answer``, ``reason``);
- :func:`make_verifier_pool`, :func:`default_pool_size`, :func:`get_default_pool`,
  :func:`shutdown_default_pool` — the worker processes behind the hard limit (a
  :class:`gym_core.workers.WorkerPool`), shared by both grading modes.

Reasons reported by :func:`verify_answer`: ``"correct"``, ``"wrong"``, ``"no_boxed_answer"``,
``"timeout"`` (the comparison ran past ``timeout_s`` and its worker was killed) and ``"error"``
(the worker ran out of memory or died, or the comparison raised).

Why worker processes: sympy can spin for hours (or until memory runs out) on inputs such as
``9^{9^{9^{9}}}``. ``math_verify`` bounds its own work with ``signal.alarm``, which only works in
the main thread and cannot interrupt long C-level big-integer arithmetic, so its timeouts are
disabled here (``parsing_timeout=None`` / ``timeout_seconds=None``) and the comparison runs in
gym's worker pool instead (:mod:`gym_core.workers`): a worker past ``timeout_s`` is killed and
replaced, and each worker is capped in memory. The pool's workers are forked with sympy imported
and math_verify's parser caches warm, so a simple answer costs a socket round trip plus the
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

import logging
import os
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from gym_core.workers import WorkerError, WorkerPool, WorkerPoolClosed, WorkerTimeout

__all__ = [
    "VerifyResult",
    "extract_boxed_answer",
    "answers_equivalent",
    "verify_answer",
    "averify_answer",
    "default_pool_size",
    "make_verifier_pool",
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
    unwrapped, at any depth (``\\boxed{\\boxed{3}}`` → ``3``). A box that is never closed (e.g. a
    response cut off mid-answer) is ignored, and an earlier complete box, if any, is returned.
    Returns None when there is no complete box. One pass over ``text``, no recursion.
    """
    if not text or ("boxed" not in text and "fbox" not in text):
        return None
    # Stack of open braces: (opener start, content start) for a box, None for an ordinary brace.
    stack: list[tuple[int, int] | None] = []
    boxes: dict[int, tuple[int, int]] = {}  # opener start -> (content start, closing brace)
    last: tuple[int, int] | None = None
    for m in _BOX_TOKEN_RE.finditer(text):
        tok = m.group()
        if tok == "{":
            stack.append(None)
        elif tok == "}":
            if not stack:
                continue  # stray closing brace: ignore
            box = stack.pop()
            if box is not None:
                boxes[box[0]] = last = (box[1], m.start())
        elif len(tok) > 2:  # a box opener (escapes are 2 characters, braces 1)
            stack.append((m.start(), m.end()))
        # any other token is an escaped character: nothing to do
    if last is None:
        return None
    start, end = last
    while True:
        while start < end and text[start].isspace():
            start += 1
        while end > start and text[end - 1].isspace():
            end -= 1
        # Unwrap while the content is exactly one box: a box opener at its start whose closing
        # brace is its last character.
        inner = boxes.get(start)
        if inner is None or inner[1] != end - 1:
            return text[start:end]
        start, end = inner


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
# Worker processes (gym_core.workers): the comparison runs there, under a hard time limit
# --------------------------------------------------------------------------------------------

_WARMUP = (("\\frac{1}{2}", "0.5"), ("x+1", "1+x"), ("\\{1,2\\}", "\\{2,1\\}"), ("3.0", "3"))


def _warm_up() -> None:
    """Run once in the pool's zygote before workers are forked: imports sympy and math_verify and
    fills the parser caches, so every worker starts warm."""
    for predicted, expected in _WARMUP:
        answers_equivalent(predicted, expected)


def default_pool_size() -> int:
    """``$GYM_MATH_VERIFY_WORKERS``, else ``min(4, cpu_count)``."""
    env = os.environ.get("GYM_MATH_VERIFY_WORKERS")
    return int(env) if env else min(4, os.cpu_count() or 1)


def make_verifier_pool(
    size: int | None = None, *, memory_limit_mb: int | None = 4096, warm_up: Callable[[], Any] | None = None
) -> WorkerPool:
    """A :class:`~gym_core.workers.WorkerPool` set up for :func:`verify_answer`: warm workers
    (sympy imported, parser caches filled), each capped at ``memory_limit_mb`` of address space.

    ``size`` defaults to ``$GYM_MATH_VERIFY_WORKERS`` or ``min(4, cpu_count)``. The pool's own
    time limit is only a default: every verification passes its ``timeout_s``. ``warm_up`` (a
    module-level function run once before the workers are forked) defaults to this module's
    comparisons; the library mode passes :func:`gym_math.library.warm_up`.
    """
    return WorkerPool(
        default_pool_size() if size is None else size,
        time_limit_s=5.0,
        memory_limit_mb=memory_limit_mb,
        initializer=warm_up or _warm_up,
        start_timeout_s=120.0,
    )


_default_pool: WorkerPool | None = None
_default_pool_pid = 0
_default_lock = threading.Lock()


def get_default_pool() -> WorkerPool:
    """The process-wide pool used by :func:`verify_answer`, created on first use (again in a
    forked child, which cannot use its parent's)."""
    global _default_pool, _default_pool_pid
    with _default_lock:
        if _default_pool is None or _default_pool.closed or _default_pool_pid != os.getpid():
            _default_pool = make_verifier_pool()
            _default_pool_pid = os.getpid()
        return _default_pool


def shutdown_default_pool() -> None:
    """Stop the default pool's workers (a pool also stops on its own at interpreter exit)."""
    global _default_pool
    with _default_lock:
        pool, _default_pool = _default_pool, None
    if pool is not None:
        pool.close()


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
    pool: WorkerPool | None = None,
) -> VerifyResult:
    """Reward 1.0 when the last ``\\boxed{}`` in ``response_text`` is equivalent to
    ``expected_answer``, else 0.0.

    The mathematical comparison runs in a worker process of ``pool`` (default:
    :func:`get_default_pool`), which is killed after ``timeout_s`` seconds of wall time (None: the
    pool's own limit), giving reason ``"timeout"``. Safe to call from any thread; blocks the caller.
    """
    extracted = extract_boxed_answer(response_text or "")
    if extracted is None:
        return VerifyResult(0.0, None, "no_boxed_answer")
    expected = str(expected_answer)
    fast = _fast_decision(extracted, expected)
    if fast is not None:
        return _decided(fast, extracted)
    try:
        pool = pool or get_default_pool()
        same = pool.run_blocking(answers_equivalent, extracted, expected, time_limit_s=timeout_s)
    except WorkerError as exc:
        return _failed(exc, extracted)
    return _decided(same, extracted)


async def averify_answer(
    response_text: str,
    expected_answer: str,
    timeout_s: float | None = 5.0,
    *,
    pool: WorkerPool | None = None,
) -> VerifyResult:
    """:func:`verify_answer` for asyncio code: the event loop keeps running while a worker
    compares. Calls beyond the pool size queue up (their ``timeout_s`` starts when a worker picks
    them up)."""
    extracted = extract_boxed_answer(response_text or "")
    if extracted is None:
        return VerifyResult(0.0, None, "no_boxed_answer")
    expected = str(expected_answer)
    fast = _fast_decision(extracted, expected)
    if fast is not None:
        return _decided(fast, extracted)
    try:
        pool = pool or get_default_pool()
        same = await pool.run(answers_equivalent, extracted, expected, time_limit_s=timeout_s)
    except WorkerError as exc:
        return _failed(exc, extracted)
    return _decided(same, extracted)


def _decided(same: bool, extracted: str) -> VerifyResult:
    return VerifyResult(1.0 if same else 0.0, extracted, "correct" if same else "wrong")


def _failed(exc: WorkerError, extracted: str) -> VerifyResult:
    if isinstance(exc, WorkerPoolClosed):
        raise exc  # a caller's mistake, not a verdict on the answer
    if isinstance(exc, WorkerTimeout):
        return VerifyResult(0.0, extracted, "timeout")
    log.warning("math verification failed for %.200r: %s", extracted, exc)
    return VerifyResult(0.0, extracted, "error")
