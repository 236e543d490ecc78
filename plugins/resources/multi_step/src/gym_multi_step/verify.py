"""Scoring a synonym-value submission (pure functions, no I/O).

Public API:

- :func:`synonym_value` — what the ``get_synonym_value`` tool answers: the sum of the code points;
- :func:`lax_int` — a value as an integer the way the reference's pydantic models coerce it, or None;
- :func:`last_submission` — the ``arguments`` string of the last ``extract_synonym_values`` call;
- :func:`read_submission` — that string's ``synonym_values`` list, or :class:`MalformedSubmission`;
- :func:`score_submission` — the verdict on a submitted list: a :class:`Verdict`;
- :func:`verdict_for` — all of the above for one response.

Comparisons are Python's ``==`` on the parsed JSON, as in the reference: ``711.0`` counts as
``711`` and ``true`` as ``1``, but the string ``"711"`` does not.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gym_core.schemas import Response, function_calls

__all__ = [
    "SUBMIT_TOOL",
    "LOOKUP_TOOL",
    "MalformedSubmission",
    "Verdict",
    "synonym_value",
    "lax_int",
    "last_submission",
    "read_submission",
    "score_submission",
    "verdict_for",
]

LOOKUP_TOOL = "get_synonym_value"
SUBMIT_TOOL = "extract_synonym_values"

# What pydantic's lax mode reads as an int from a string: ASCII digits, an optional sign,
# single underscores between digits, surrounding whitespace, and a ".000" tail.
_INT_STRING = re.compile(r"[+-]?[0-9](?:_?[0-9])*(?:\.0+)?")
_INT64 = 2**63


def synonym_value(synonym: str) -> int:
    """The value of a synonym: the sum of the Unicode code points of the string as given
    (case, spaces and hyphens included): ``"Warm"`` is 407."""
    return sum(map(ord, synonym))


def lax_int(value: Any) -> int | None:
    """``value`` as an int under pydantic's lax rules, or None when pydantic would refuse it.

    Accepted: ints; bools (0/1); finite floats without a fractional part within int64; strings of
    an optionally signed decimal integer (underscores between digits, surrounding whitespace and
    a ``.0`` tail allowed). Everything else (``711.5``, ``"0x10"``, ``null``, lists...) is None.
    """
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if math.isfinite(value) and value.is_integer() and -_INT64 <= value < _INT64:
            return int(value)
        return None
    if isinstance(value, str):
        text = value.strip()
        if _INT_STRING.fullmatch(text):
            try:
                return int(text.partition(".")[0])
            except ValueError:  # past Python's limit on digits
                return None
    return None


class MalformedSubmission(ValueError):
    """The last ``extract_synonym_values`` call cannot be read as a list of integers.

    ``reason`` is a short code for the verify response: ``invalid_json``, ``no_synonym_values``
    (arguments not an object, or without that key), ``not_a_list``, ``not_integers``.
    """

    def __init__(self, reason: str, message: str):
        self.reason = reason
        super().__init__(message)


def last_submission(response: Response) -> str | None:
    """The ``arguments`` string of the last ``extract_synonym_values`` function call of the
    response (all turns), or None when the model never called it."""
    for call in reversed(function_calls(response)):
        if call.name == SUBMIT_TOOL:
            return call.arguments
    return None


def read_submission(arguments: str) -> list[Any]:
    """The ``synonym_values`` list of a call's ``arguments``, its items as the JSON had them.

    Raises :class:`MalformedSubmission` where the reference fails with an error: arguments that
    are not JSON, not an object or lack ``synonym_values``; a value that is not a list; an item
    that is not an integer under :func:`lax_int` (nested lists and objects included).
    """
    try:
        parsed = json.loads(arguments)
    except (ValueError, RecursionError) as exc:
        raise MalformedSubmission("invalid_json", f"{SUBMIT_TOOL} arguments are not valid JSON: {exc}") from None
    if not isinstance(parsed, dict) or "synonym_values" not in parsed:
        raise MalformedSubmission(
            "no_synonym_values", f"{SUBMIT_TOOL} arguments have no synonym_values: {arguments[:200]}"
        )
    values = parsed["synonym_values"]
    if not isinstance(values, list):
        raise MalformedSubmission(
            "not_a_list", f"{SUBMIT_TOOL} synonym_values is not a list: {json.dumps(values)[:200]}"
        )
    for index, item in enumerate(values):
        if lax_int(item) is None:  # lists and objects included, which the reference cannot put in a set
            raise MalformedSubmission(
                "not_integers", f"{SUBMIT_TOOL} synonym_values[{index}] is not an integer: {json.dumps(item)[:200]}"
            )
    return values


@dataclass(frozen=True)
class Verdict:
    """The verdict on one response. ``reason`` is set only when no submission could be read
    (a :class:`MalformedSubmission` code, or ``timeout``); ``parsed_synonym_values`` is then None."""

    reward: float
    parsed_synonym_values: list[int] | None
    accuracy: bool
    set_overlap: float
    original_term_minefield_hit: bool
    order_instruction_following_failure: bool
    reason: str | None = None
    detail: str | None = None  # the error message behind ``reason``; not part of the verify response

    @classmethod
    def unreadable(cls, reason: str, detail: str) -> Verdict:
        """Reward 0 and nothing submitted: what a submission that cannot be read gets."""
        return cls(0.0, None, False, 0.0, False, False, reason, detail)


def score_submission(expected: Sequence[int], minefield_label: str, minefield_value: int, actual: list[Any]) -> Verdict:
    """Score ``actual`` (the submitted list, items as parsed) against ``expected`` (not empty).

    - accuracy: ``actual == expected``, in order; the reward is ``float(accuracy)``;
    - set_overlap: ``|set(actual) ∩ set(expected)| / len(expected)`` (the list's length,
      duplicates included);
    - original_term_minefield_hit: the distractor's value (or its label) is in ``actual``;
    - order_instruction_following_failure: not accurate although ``set_overlap == 1``.
    """
    if not expected:
        raise ValueError("expected must not be empty: set_overlap divides by its length")
    expected = list(expected)
    accuracy = actual == expected
    set_overlap = len(set(actual) & set(expected)) / len(expected)
    return Verdict(
        reward=float(accuracy),
        parsed_synonym_values=[lax_int(item) for item in actual],  # type: ignore[misc]  # read_submission checked them
        accuracy=accuracy,
        set_overlap=set_overlap,
        # The label is a string and the items integers, so only the value can really match;
        # the reference tests both, and so does this.
        original_term_minefield_hit=minefield_label in actual or minefield_value in actual,
        order_instruction_following_failure=not accuracy and set_overlap == 1.0,
    )


def verdict_for(expected: Sequence[int], minefield_label: str, minefield_value: int, arguments: str | None) -> Verdict:
    """The verdict for the ``arguments`` of the last submission (None: never submitted, which
    scores as an empty list). An unreadable submission gets :meth:`Verdict.unreadable`."""
    if arguments is None:
        return score_submission(expected, minefield_label, minefield_value, [])
    try:
        actual = read_submission(arguments)
    except MalformedSubmission as exc:
        return Verdict.unreadable(exc.reason, str(exc))
    return score_submission(expected, minefield_label, minefield_value, actual)
