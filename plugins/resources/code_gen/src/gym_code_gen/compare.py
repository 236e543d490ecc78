"""How one test's output is judged (environments spec §9), standard library only.

The server imports it (through :mod:`gym_code_gen.verify`), and the driver inside the sandbox
(:mod:`gym_code_gen.runner`) runs the same text, shipped beside it as ``compare.py``: the verdict is
made by the driver, in a process the program cannot read.
"""

import json
import math
from decimal import Decimal, InvalidOperation
from typing import Any

__all__ = ["stdout_matches", "call_result_matches"]


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
