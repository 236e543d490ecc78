"""The library grading mode: the math_with_judge environment's symbolic stage, with HF Math-Verify.

Public API:

- :func:`prepare_gold` — the reference answer as the library's gold: ``\\boxed{...}`` around the
  stripped answer, with one ``\\(...\\)`` and then one ``$...$`` wrapper removed;
- :func:`library_grade` — grade a whole response text against a reference answer, in the calling
  process (no hard time limit: run it in a :class:`gym_core.workers.WorkerPool`), returning a
  :class:`LibraryResult` (``reward``, ``extracted_answer``, ``reason``);
- :func:`alibrary_grade` — the same in a worker of a :class:`gym_core.workers.WorkerPool`, under a
  hard time limit, for asyncio code;
- :func:`warm_up` — the pool initializer that imports the library and fills its caches.

How a response is graded (the environments spec, §18 "Library stage"):

1. the gold is :func:`prepare_gold` of ``expected_answer``;
2. Math-Verify's ``math_metric`` is built with gold extraction = LaTeX extraction (default settings),
   prediction extraction = expression extraction and LaTeX extraction (defaults), aggregation
   ``max`` and precision 6, and applied to ``([gold], [the whole response text])``: the score is
   1.0 when any prediction extracted from the text verifies against the extracted gold;
3. ``extracted_answer`` is the first extracted prediction (as a string) that equals a gold string,
   else the first prediction; null when nothing was extracted;
4. whenever the library raises (nothing extractable from the gold, nothing extracted from the
   response, anything else), the result is reward 0.0 and ``extracted_answer`` null.

Unlike the boxed mode (:mod:`gym_math.verify`), the whole response is searched, not only its last
``\\boxed{}``: an answer given as "the final answer is 12" counts, as it does in the reference.

Math-Verify's own timeouts (``signal.alarm``: 5 s per parse and per comparison, 2 s to turn the
extractions into strings) stay on, as in the reference, because the library then returns "not
verified" rather than raising; they work because a pool worker runs each call in its main thread.
The pool's hard limit covers what a signal cannot interrupt (long C-level big-integer arithmetic).

Reasons: ``"correct"``, ``"wrong"``, ``"no_answer"`` (nothing extracted from the response),
``"unparseable_expected_answer"`` (nothing extracted from the gold: 0 whatever the model wrote) and
``"error"`` (the library raised anything else) and ``"timeout"`` (one of the library's own timeouts
fired and nothing verified: the library logs the timeout and goes on as if the answer were wrong, so
the log record is what tells the two apart); :func:`alibrary_grade` adds ``"timeout"`` (the worker
was killed) and ``"error"`` (the worker died or ran out of memory).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gym_core.workers import WorkerPool

__all__ = ["LibraryResult", "prepare_gold", "library_grade", "alibrary_grade", "warm_up"]

PRECISION = 6

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LibraryResult:
    """Outcome of :func:`library_grade`."""

    reward: float
    extracted_answer: str | None
    reason: str  # "correct" | "wrong" | "no_answer" | "unparseable_expected_answer" | "timeout" | "error"


def prepare_gold(expected_answer: str) -> str:
    """The reference answer as Math-Verify's gold: stripped; one ``\\(...\\)`` wrapper removed, then
    one ``$...$`` wrapper (when longer than one character); stripped again; put in ``\\boxed{}``.

    >>> prepare_gold(" $\\\\frac{1}{2}$ ")
    '\\\\boxed{\\\\frac{1}{2}}'
    """
    gold = expected_answer.strip()
    if gold.startswith("\\(") and gold.endswith("\\)"):
        gold = gold[2:-2]
    if len(gold) > 1 and gold.startswith("$") and gold.endswith("$"):
        gold = gold[1:-1]
    return "\\boxed{" + gold.strip() + "}"


_metric: Callable[[list[str], list[str]], tuple[float, Any]] | None = None


class _TimeoutWatch(logging.Handler):
    """The only handler of the library's loggers: it swallows their chatter (as the reference mutes
    it) and notes the warnings the library logs when one of its own timeouts fires ("Timeout during
    parsing", "... comparison", "Timeout when adding extracted predictions"), which it otherwise
    swallows, scoring the answer as not verified."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.fired = False

    def emit(self, record: logging.LogRecord) -> None:
        if str(record.msg).startswith("Timeout"):
            self.fired = True


_timeouts = _TimeoutWatch()


def _get_metric() -> Callable[[list[str], list[str]], tuple[float, Any]]:
    global _metric
    if _metric is None:
        from math_verify import ExprExtractionConfig, LatexExtractionConfig
        from math_verify.metric import math_metric

        # The reference mutes the library's chatter ("did not manage to extract a prediction"); its
        # timeout warnings are kept, for the reason.
        library_log = logging.getLogger("math_verify")
        library_log.setLevel(logging.WARNING)
        library_log.propagate = False
        library_log.handlers[:] = [_timeouts]
        _metric = math_metric(
            gold_extraction_target=(LatexExtractionConfig(),),
            pred_extraction_target=(ExprExtractionConfig(), LatexExtractionConfig()),
            aggregation_function=max,
            precision=PRECISION,
        )
    return _metric


def library_grade(response_text: str, expected_answer: str) -> LibraryResult:
    """Grade ``response_text`` (the whole model output) against ``expected_answer`` with the library
    (see the module docstring). Never raises: a library error is reward 0 with a null answer.

    Uses ``signal.alarm`` inside the library: call it in a process's main thread (a pool worker).
    """
    from math_verify import verify

    metric = _get_metric()
    _timeouts.fired = False
    try:
        score, strings = metric([prepare_gold(str(expected_answer))], [response_text])
        extracted: str | None = None
        if strings is not None:  # None: turning the extractions into strings timed out
            golds, predictions = strings
            extracted = next(
                (p for p in predictions if any(verify(g, p) for g in golds)),
                predictions[0],  # IndexError when nothing was extracted: handled below, as the reference does
            )
        reward = float(score)
    except Exception as exc:  # noqa: BLE001 - the reference scores any library failure 0 with no answer
        return LibraryResult(0.0, None, "timeout" if _timeouts.fired else _failure_reason(exc))
    if reward > 0.5:
        return LibraryResult(reward, extracted, "correct")
    return LibraryResult(reward, extracted, "timeout" if _timeouts.fired else "wrong")


async def alibrary_grade(
    response_text: str, expected_answer: str, *, pool: WorkerPool, timeout_s: float | None = None
) -> LibraryResult:
    """:func:`library_grade` in a worker of ``pool``, killed after ``timeout_s`` seconds (None: the
    pool's own limit): then reward 0, null answer, reason ``"timeout"`` (the reference's result for a
    child past its limit); a worker that dies or runs out of memory gives reason ``"error"``. The event
    loop keeps running meanwhile. Raises :class:`gym_core.workers.WorkerPoolClosed` on a closed pool.
    """
    from gym_core.workers import WorkerError, WorkerPoolClosed, WorkerTimeout

    try:
        return await pool.run(library_grade, response_text, expected_answer, time_limit_s=timeout_s)
    except WorkerPoolClosed:
        raise
    except WorkerTimeout:
        return LibraryResult(0.0, None, "timeout")
    except WorkerError as exc:
        log.warning("math library grading failed: %s", exc)
        return LibraryResult(0.0, None, "error")


def _failure_reason(exc: Exception) -> str:
    message = str(exc)
    if message.startswith("No gold targets found"):
        return "unparseable_expected_answer"
    if isinstance(exc, (ValueError, IndexError)) and ("empty" in message or "out of range" in message):
        return "no_answer"  # max() of no predictions, or no first prediction
    return "error"


def warm_up() -> None:
    """Import the library and fill its parser caches (run in the pool's zygote before forking)."""
    for text, gold in (
        ("The answer is $\\frac{1}{2}$.", "0.5"),
        ("so x = 3", "3"),
        ("\\boxed{\\{1,2\\}}", "\\{2,1\\}"),
    ):
        library_grade(text, gold)
