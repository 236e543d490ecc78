"""Comparing a model's tool calls with the expected ones: pure functions, no server.

:func:`values_equal` decides whether two parsed JSON values are equal under :class:`Rules`;
:func:`argument_differences` says where two argument objects differ; :func:`score_calls` scores
the calls a model made against one expected batch (one call or several, unordered). The rules are
the README's "Argument comparison".
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Rules", "Call", "Score", "parse_arguments", "values_equal", "argument_differences", "score_calls"]

_JSON_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?")
_SPACES = re.compile(r"\s+")
# Partial credit finds the best one-to-one pairing exactly (over subsets of the smaller side) when
# it is this small; larger batches are paired greedily, best pair first.
_EXACT_PAIRING_MAX_SMALL, _EXACT_PAIRING_MAX_LARGE = 8, 64
MAX_REPORTED_DIFFERENCES = 20


@dataclass(frozen=True)
class Rules:
    """How arguments are compared (the server's options)."""

    extra_arguments: str = "reject"  # "reject" | "ignore": keys the prediction has and the expectation lacks
    ignore_null_arguments: bool = False  # drop null-valued keys on both sides first
    string_match: str = "exact"  # "exact" | "normalized"
    numeric_strings: bool = False  # "10" equals 10
    number_tolerance: float = 0.0  # absolute
    list_order: str = "ordered"  # "ordered" | "any"


@dataclass
class Call:
    """A call, parsed: ``arguments`` is the parsed JSON, or the raw text when ``valid`` is false."""

    name: str
    arguments: Any
    valid: bool = True

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "arguments": self.arguments}


@dataclass
class Score:
    reward: float
    reason: str
    matched: int
    name_match: bool
    differences: list[str] = field(default_factory=list)


def parse_arguments(text: str) -> tuple[Any, bool]:
    """``(parsed, True)`` for valid JSON, else ``(text, False)``."""
    try:
        return json.loads(text), True
    except (ValueError, RecursionError):
        return text, False


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _as_number(value: Any, rules: Rules) -> float | int | None:
    if _is_number(value):
        return value
    if rules.numeric_strings and isinstance(value, str) and _JSON_NUMBER.fullmatch(value.strip()):
        text = value.strip()
        return float(text) if any(c in text for c in ".eE") else int(text)
    return None


def _normalise(text: str) -> str:
    return _SPACES.sub(" ", unicodedata.normalize("NFKC", text).casefold()).strip()


def _without_nulls(obj: dict[str, Any], rules: Rules) -> dict[str, Any]:
    return {k: v for k, v in obj.items() if v is not None} if rules.ignore_null_arguments else obj


def values_equal(expected: Any, predicted: Any, rules: Rules) -> bool:
    """Whether ``predicted`` equals ``expected`` under ``rules`` (both parsed JSON)."""
    try:
        return _equal(expected, predicted, rules)
    except RecursionError:  # nesting deeper than the interpreter can walk: not a match
        return False


def _equal(expected: Any, predicted: Any, rules: Rules) -> bool:
    if isinstance(expected, bool) or isinstance(predicted, bool):
        return type(expected) is type(predicted) and expected == predicted
    if expected is None or predicted is None:
        return expected is None and predicted is None
    if _is_number(expected) or _is_number(predicted):
        a, b = _as_number(expected, rules), _as_number(predicted, rules)
        if a is None or b is None:
            return False
        if a == b:
            return True
        try:
            return rules.number_tolerance > 0 and abs(a - b) <= rules.number_tolerance
        except OverflowError:  # an integer too large for a float: only exact equality counts
            return False
    if isinstance(expected, str) and isinstance(predicted, str):
        return expected == predicted or (
            rules.string_match == "normalized" and _normalise(expected) == _normalise(predicted)
        )
    if isinstance(expected, dict) and isinstance(predicted, dict):
        expected, predicted = _without_nulls(expected, rules), _without_nulls(predicted, rules)
        if any(key not in predicted for key in expected):
            return False
        if rules.extra_arguments == "reject" and any(key not in expected for key in predicted):
            return False
        return all(_equal(value, predicted[key], rules) for key, value in expected.items())
    if isinstance(expected, list) and isinstance(predicted, list):
        if len(expected) != len(predicted):
            return False
        if rules.list_order == "ordered":
            return all(_equal(a, b, rules) for a, b in zip(expected, predicted))
        return _max_matching(expected, predicted, lambda a, b: _equal(a, b, rules)) == len(expected)
    return False


def _max_matching(left: Sequence[Any], right: Sequence[Any], match: Callable[[Any, Any], bool]) -> int:
    """The size of a maximum one-to-one matching between ``left`` and ``right`` (augmenting paths)."""
    edges = [[j for j, r in enumerate(right) if match(item, r)] for item in left]
    owner: list[int | None] = [None] * len(right)

    def augment(i: int, seen: set[int]) -> bool:
        for j in edges[i]:
            if j in seen:
                continue
            seen.add(j)
            if owner[j] is None or augment(owner[j], seen):
                owner[j] = i
                return True
        return False

    return sum(1 for i in range(len(left)) if augment(i, set()))


def _show(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def argument_differences(expected: Any, predicted: Any, rules: Rules, path: str = "$") -> list[str]:
    """Where ``predicted`` differs from ``expected``: one line per differing path (at most 20)."""
    out: list[str] = []
    try:
        _differences(expected, predicted, rules, path, out)
    except RecursionError:
        out.append(f"{path}: nested too deeply to compare")
    return out[:MAX_REPORTED_DIFFERENCES]


def _differences(expected: Any, predicted: Any, rules: Rules, path: str, out: list[str]) -> None:
    if len(out) >= MAX_REPORTED_DIFFERENCES:
        return
    if isinstance(expected, dict) and isinstance(predicted, dict):
        expected, predicted = _without_nulls(expected, rules), _without_nulls(predicted, rules)
        for key, value in expected.items():
            if key not in predicted:
                out.append(f"{path}.{key}: missing (expected {_show(value)})")
            else:
                _differences(value, predicted[key], rules, f"{path}.{key}", out)
        if rules.extra_arguments == "reject":
            out.extend(
                f"{path}.{key}: unexpected (got {_show(predicted[key])})" for key in predicted if key not in expected
            )
        return
    if (
        isinstance(expected, list)
        and isinstance(predicted, list)
        and rules.list_order == "ordered"
        and len(expected) == len(predicted)
    ):
        for index, (a, b) in enumerate(zip(expected, predicted)):
            _differences(a, b, rules, f"{path}[{index}]", out)
        return
    if not _equal(expected, predicted, rules):
        out.append(f"{path}: expected {_show(expected)}, got {_show(predicted)}")


def _pair_credit(expected: Call, predicted: Call, rules: Rules) -> float:
    """Partial credit of one predicted call for one expected call: 1 when equal; for the same name
    with object arguments, the share of argument keys that agree; else 0."""
    if expected.name != predicted.name or not predicted.valid:
        return 0.0
    if values_equal(expected.arguments, predicted.arguments, rules):
        return 1.0
    if not (isinstance(expected.arguments, dict) and isinstance(predicted.arguments, dict)):
        return 0.0
    want, got = _without_nulls(expected.arguments, rules), _without_nulls(predicted.arguments, rules)
    keys = set(want) | (set(got) if rules.extra_arguments == "reject" else set())
    agree = sum(1 for key in want if key in got and values_equal(want[key], got[key], rules))
    return agree / len(keys) if keys else 1.0


def _best_pairing(credit: list[list[float]]) -> float:
    """The largest total credit of a one-to-one pairing of rows with columns."""
    rows, cols = len(credit), len(credit[0]) if credit else 0
    if not rows or not cols:
        return 0.0
    if min(rows, cols) <= _EXACT_PAIRING_MAX_SMALL and max(rows, cols) <= _EXACT_PAIRING_MAX_LARGE:
        if rows < cols:  # subsets of the smaller side: rows
            credit = [list(col) for col in zip(*credit)]
            rows, cols = cols, rows
        best = {0: 0.0}  # mask of columns taken -> best total
        for row in credit:
            nxt = dict(best)
            for mask, total in best.items():
                for j in range(cols):
                    if not mask & (1 << j) and row[j] > 0:
                        key = mask | (1 << j)
                        if total + row[j] > nxt.get(key, -1.0):
                            nxt[key] = total + row[j]
            best = nxt
        return max(best.values())
    pairs = sorted(((c, i, j) for i, row in enumerate(credit) for j, c in enumerate(row) if c > 0), reverse=True)
    used_rows, used_cols, total = set(), set(), 0.0
    for c, i, j in pairs:
        if i not in used_rows and j not in used_cols:
            used_rows.add(i)
            used_cols.add(j)
            total += c
    return total


def score_calls(
    expected: Sequence[Call], predicted: Sequence[Call], rules: Rules, *, partial_credit: bool = False
) -> Score:
    """Score ``predicted`` against the batch ``expected`` (non-empty; order ignored).

    Reward 1 when the calls pair up one to one, each equal (same name, equal arguments), with
    none left over; else 0, or with ``partial_credit`` the F1 of a best pairing where each pair
    counts its :func:`_pair_credit`.
    """
    matched = _max_matching(
        expected, predicted, lambda e, p: p.valid and e.name == p.name and values_equal(e.arguments, p.arguments, rules)
    )
    name_match = Counter(c.name for c in expected) == Counter(c.name for c in predicted)
    if not predicted:
        reason = "no_call"
    elif matched == len(expected) == len(predicted):
        return Score(1.0, "match", matched, True)
    elif len(predicted) != len(expected):
        reason = "wrong_call_count"
    elif any(not c.valid for c in predicted):
        reason = "invalid_arguments"
    elif not name_match:
        reason = "wrong_name"
    else:
        reason = "arguments_mismatch"
    differences: list[str] = []
    if len(expected) == len(predicted) == 1 and name_match and predicted[0].valid:
        differences = argument_differences(expected[0].arguments, predicted[0].arguments, rules)
    reward = 0.0
    if partial_credit and predicted:
        total = _best_pairing([[_pair_credit(e, p, rules) for p in predicted] for e in expected])
        reward = 2 * total / (len(expected) + len(predicted))
    return Score(reward, reason, matched, name_match, differences)
