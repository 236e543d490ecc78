"""The pure parts of code_gen's verdict (environments spec §9): finding the code in the answer,
the reasoning-format check, and judging one test's output, all outside the sandbox.

Result codes of one unit test: ``True`` (passed), ``-1`` (the global deadline passed), ``-2``
(wrong answer), ``-3`` (time limit), ``-4`` (runtime or syntax error).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from gym_core.schemas import Reasoning, Response, output_text

__all__ = [
    "PASSED",
    "GLOBAL_TIMEOUT",
    "WRONG_ANSWER",
    "TIME_LIMIT",
    "RUNTIME_ERROR",
    "ERROR_MESSAGES",
    "extract_code",
    "reasoning_format_violation",
    "stdout_matches",
    "call_result_matches",
    "global_deadline_s",
    "CallReport",
    "read_call_report",
    "truncate",
]

PASSED = True
GLOBAL_TIMEOUT = -1
WRONG_ANSWER = -2
TIME_LIMIT = -3
RUNTIME_ERROR = -4
ERROR_MESSAGES = {
    GLOBAL_TIMEOUT: "Global Timeout",
    WRONG_ANSWER: "Wrong Answer",
    TIME_LIMIT: "Time Limit Exceeded",
    RUNTIME_ERROR: "Runtime Error",
}

FENCE = "```"


def extract_code(text: str) -> str | None:
    """The lines strictly between the second-to-last and the last line holding a fence, joined
    by newlines; None with fewer than two fence lines (the language tag does not matter)."""
    lines = text.split("\n")
    fences = [index for index, line in enumerate(lines) if FENCE in line]
    if len(fences) < 2:
        return None
    return "\n".join(lines[fences[-2] + 1 : fences[-1]])


def reasoning_format_violation(response: Response) -> bool:
    """``<think>`` or ``</think>`` in OUTPUT_TEXT, or more than one of either in the reasoning
    items' summaries (their texts concatenated)."""
    text = output_text(response)
    if "<think>" in text or "</think>" in text:
        return True
    reasoning = "".join(part.text for item in response.output if isinstance(item, Reasoning) for part in item.summary)
    return reasoning.count("<think>") > 1 or reasoning.count("</think>") > 1


def _decimals(line: str) -> list[Decimal] | None:
    try:
        return [Decimal(token) for token in line.split()]
    except (InvalidOperation, ValueError):
        return None


def _same_numbers(left: list[Decimal], right: list[Decimal]) -> bool:
    try:
        return left == right
    except InvalidOperation:  # a signalling NaN compares by raising
        return False


def stdout_matches(output: str, expected: str) -> bool:
    """A standard-input test's verdict: both texts stripped and split on newlines, every line
    stripped; the line counts must agree, and each pair of lines be equal as strings or as
    whitespace-separated lists of decimal numbers (arbitrary precision: ``1.0`` equals ``1``)."""
    got = [line.strip() for line in output.strip().split("\n")]
    want = [line.strip() for line in expected.strip().split("\n")]
    if len(got) != len(want):
        return False
    for left, right in zip(got, want):
        if left == right:
            continue
        left_numbers, right_numbers = _decimals(left), _decimals(right)
        if left_numbers is None or right_numbers is None or not _same_numbers(left_numbers, right_numbers):
            return False
    return True


def _floats(value: Any) -> Any:
    """``value`` as floats (nested lists kept), or None when some part does not convert."""
    if isinstance(value, list):
        converted = [_floats(item) for item in value]
        return None if any(item is None for item in converted) else converted
    if isinstance(value, (dict, type(None))):
        return None
    try:
        return float(value)
    except (TypeError, ValueError, OverflowError):
        return None


def _close(got: Any, want: Any) -> bool:
    """numpy.allclose's defaults, elementwise: |a - b| <= 1e-8 + 1e-5·|b| (equal infinities close, NaN never)."""
    if isinstance(got, list) or isinstance(want, list):
        return (
            isinstance(got, list)
            and isinstance(want, list)
            and len(got) == len(want)
            and all(_close(a, b) for a, b in zip(got, want))
        )
    if math.isinf(got) or math.isinf(want):
        return got == want
    return abs(got - want) <= 1e-8 + 1e-5 * abs(want)


def call_result_matches(prediction: Any, expected: Any) -> bool:
    """A function-call test's verdict on JSON values: equal, or equal JSON serialisations, or
    both convertible to floats (or same-shaped lists of them) that are close."""
    if prediction == expected:
        return True
    try:
        if json.dumps(prediction) == json.dumps(expected):
            return True
    except (TypeError, ValueError):
        pass
    got, want = _floats(prediction), _floats(expected)
    if got is None or want is None:
        return False
    try:
        return _close(got, want)
    except TypeError:  # a list against a number
        return False


def global_deadline_s(timeout_s: float, tests: int) -> float:
    """The reference's deadline for all of a program's tests: ``(timeout + 1) × n + 5`` seconds."""
    return (timeout_s + 1) * tests + 5


@dataclass
class CallReport:
    """What the driver reported from inside the sandbox about one function call."""

    loaded: bool = False  # the module ran and the function was found
    kind: str | None = None  # result, unserializable, timeout, error; None: no verdict frame
    payload: str = ""
    frames: int = 0  # verdict frames seen (more than one: malformed)


def read_call_report(stdout: bytes, nonce: str) -> CallReport:
    """The driver's frames (lines ``<nonce> <kind> <payload>``) in ``stdout``; lines without the
    nonce are ignored."""
    report = CallReport()
    prefix = nonce + " "
    for line in stdout.decode("utf-8", errors="replace").split("\n"):
        if not line.startswith(prefix):
            continue
        kind, _, payload = line[len(prefix) :].partition(" ")
        if kind == "loaded":
            report.loaded = True
        elif kind in ("result", "unserializable", "timeout", "error"):
            report.frames += 1
            report.kind, report.payload = kind, payload
    return report


def truncate(text: str, limit: int = 300) -> str:
    """``text`` cut to ``limit`` characters, marked when cut (metadata stays small)."""
    return text if len(text) <= limit else text[:limit] + f"...(truncated {len(text) - limit} chars)"
