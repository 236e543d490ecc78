"""Finding the model's ARC-AGI output grid in its text, and scoring it by exact match.

Public API:

- :func:`assistant_text` — the text that is graded (the assistant messages' text parts, joined
  by newlines, stripped);
- :func:`extract_grid` — the first valid grid of a text, or None;
- :func:`several_grids` — whether the boxed grids of a text differ (a hedge);
- :func:`grade` — extract and compare with the expected grid, as a :class:`Verdict`;
- :func:`agrade` — :func:`grade` for the event loop: long texts go to a
  :class:`gym_core.workers.WorkerPool` under a hard time limit;
- :func:`make_grader_pool` — that pool.

Extraction reproduces the reference environment's rules, quirks included, so that rewards match
on the same rows:

1. Candidates are all matches of :data:`BOXED_GRID_RE` (a grid written directly inside
   ``\\boxed{...}``), in document order; only when there is none, all matches of
   :data:`BARE_GRID_RE` (any ``[[...]]``-shaped run). Boxed candidates that all fail to parse do
   *not* fall back to bare ones.
2. The first candidate that parses wins: whitespace deleted, then :func:`json.loads`; it must be
   a non-empty list of lists of ints whose first row is non-empty (later rows may be empty or of
   other lengths).

Consequences worth knowing (all reproduced on purpose): only digits, whitespace, commas and
brackets may appear, so negative numbers, decimals and quoted cells never match; a box must hold
the grid alone (``\\boxed{ [[1]]}`` or ``\\boxed{[[1]] }`` is not boxed, so the bare grids count
instead); because whitespace is deleted before parsing, ``[[1 2]]`` reads as ``[[12]]``; the
bare pattern is greedy over digits, whitespace, commas and brackets, so two grids separated only
by those (``[[1]]\\n[[2]]``, ``[[1]], [[2]]``) form one candidate that does not parse, and the
text then has no grid at all; a grid of lists nested deeper (``[[[1]]]``) is refused; JSON's
rules apply (no leading zeros, no trailing commas).

Why a worker pool: the bare pattern backtracks quadratically on long runs of brackets (a model
that degenerates into ``[[[[[[...`` for 20,000 characters costs about half a second of CPU, and
the time grows with the square of the length), so texts longer than :data:`INLINE_MAX_CHARS` are
graded in a worker process that is killed past its time limit.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass

from gym_core.schemas import Message, Response
from gym_core.workers import WorkerError, WorkerPool, WorkerPoolClosed, WorkerTimeout

__all__ = [
    "BOXED_GRID_RE",
    "BARE_GRID_RE",
    "INLINE_MAX_CHARS",
    "Grid",
    "Verdict",
    "assistant_text",
    "grid_candidates",
    "parse_grid",
    "extract_grid",
    "several_grids",
    "grade",
    "agrade",
    "make_grader_pool",
]

log = logging.getLogger(__name__)

Grid = list[list[int]]

# The reference's two patterns, unchanged: the reward depends on exactly what they match.
BOXED_GRID_RE = re.compile(r"\\boxed\{(\[\s*\[[\d\s,\[\]]+\]\s*\])\}", re.DOTALL)
BARE_GRID_RE = re.compile(r"\[\s*\[[\d\s,\[\]]+\]\s*\]")

# Texts up to this length are graded in the calling thread: the patterns' worst case there
# (a text made only of brackets) stays around a millisecond.
INLINE_MAX_CHARS = 800

_WHITESPACE_RE = re.compile(r"\s+")


def assistant_text(response: Response) -> str:
    """The graded text: every string ``text`` of every content part of every assistant message,
    joined by newlines, then stripped. Refusals, reasoning and tool calls are not graded; a
    message whose content is a plain string counts as one part."""
    parts: list[str] = []
    for item in response.output:
        if isinstance(item, Message) and item.role == "assistant":
            if isinstance(item.content, str):
                parts.append(item.content)
                continue
            for part in item.content:
                text = getattr(part, "text", None)
                if isinstance(text, str):
                    parts.append(text)
    return "\n".join(parts).strip()


def grid_candidates(text: str) -> list[str]:
    """The candidate grid strings of ``text`` in document order: the boxed ones if there is any,
    else the bare ones."""
    boxed = BOXED_GRID_RE.findall(text)
    return boxed if boxed else BARE_GRID_RE.findall(text)


def parse_grid(candidate: str) -> Grid | None:
    """``candidate`` with all whitespace deleted, as JSON, if that is a non-empty list of lists of
    ints with a non-empty first row; else None."""
    try:
        value = json.loads(_WHITESPACE_RE.sub("", candidate))
    except (ValueError, RecursionError):  # bad JSON, an int too long to convert, deep nesting
        return None
    if not isinstance(value, list) or not value:
        return None
    for row in value:
        if not isinstance(row, list) or not all(type(cell) is int for cell in row):
            return None
    if not value[0]:
        return None
    return value


def extract_grid(text: str) -> Grid | None:
    """The first candidate of ``text`` (see :func:`grid_candidates`) that parses, or None."""
    if "[" not in text:
        return None
    for candidate in grid_candidates(text):
        grid = parse_grid(candidate)
        if grid is not None:
            return grid
    return None


@dataclass(frozen=True)
class Verdict:
    """The outcome of grading one response.

    ``reason`` is one of ``"correct"``, ``"wrong"`` (a grid that differs), ``"no_grid"`` (nothing
    parsed), ``"several_answers"`` (boxed grids that differ), ``"no_expected_output"`` (the task has no target grid: never rewarded),
    ``"timeout"`` (grading ran past its time limit) or ``"error"`` (the worker failed otherwise).
    """

    reward: float
    predicted_output: Grid | None
    reason: str

    @property
    def extraction_successful(self) -> bool:
        return self.predicted_output is not None


def several_grids(text: str) -> bool:
    """Whether ``text`` hedges: two of its boxed grids parse to different grids."""
    grids = {json.dumps(grid) for c in BOXED_GRID_RE.findall(text) if (grid := parse_grid(c)) is not None}
    return len(grids) > 1


def grade(text: str, expected_output: Grid, several: str = "reject") -> Verdict:
    """Reward 1.0 when the grid extracted from ``text`` equals ``expected_output`` exactly (same
    rows, same lengths, same values), else 0.0. An empty ``expected_output`` is never matched.
    With ``several="reject"`` (the default) a text whose boxed grids differ (:func:`several_grids`)
    has no grid (reason ``"several_answers"``); ``"reference"`` takes the first, as the reference.
    Runs in the calling thread with no time limit: use :func:`agrade` for model output."""
    if several == "reject" and "\\boxed{" in text and several_grids(text):
        return Verdict(0.0, None, "several_answers")
    predicted = extract_grid(text)
    if predicted is None:
        return Verdict(0.0, None, "no_grid")
    if not expected_output:
        return Verdict(0.0, predicted, "no_expected_output")
    if predicted == expected_output:
        return Verdict(1.0, predicted, "correct")
    return Verdict(0.0, predicted, "wrong")


def make_grader_pool(size: int | None = None, *, memory_limit_mb: int | None = 2048) -> WorkerPool:
    """A :class:`~gym_core.workers.WorkerPool` for :func:`agrade`, its workers forked with this
    module imported. ``size`` defaults to the pool's own default (``min(4, CPUs)``)."""
    return WorkerPool(size, time_limit_s=5.0, memory_limit_mb=memory_limit_mb, preload=[__name__])


async def agrade(
    text: str, expected_output: Grid, *, pool: WorkerPool, timeout_s: float, several: str = "reject"
) -> Verdict:
    """:func:`grade` without blocking the event loop: a text longer than
    :data:`INLINE_MAX_CHARS` is graded in a worker of ``pool``, killed after ``timeout_s``
    seconds (reason ``"timeout"``, no grid)."""
    if len(text) <= INLINE_MAX_CHARS or "[" not in text:
        return grade(text, expected_output, several)
    try:
        return await pool.run(grade, text, expected_output, several, time_limit_s=timeout_s)
    except WorkerPoolClosed:
        raise  # the server is shutting down: not a verdict on the answer
    except WorkerTimeout:
        return Verdict(0.0, None, "timeout")
    except WorkerError as exc:
        log.warning("arc_agi grading failed on a %d-character text: %s", len(text), exc)
        return Verdict(0.0, None, "error")
