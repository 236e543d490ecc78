"""Comparing result sets: bird_sql's unordered set equality and spider2_lite's column matching.

Pure functions over lists of row tuples, run in the worker process next to the query (a large
result set costs CPU to compare).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

__all__ = ["bird_results_match", "normalize_value", "spider2_results_match", "spider2_columns", "vectors_match"]

Rows = Sequence[Sequence[Any]]


def bird_results_match(gold: Rows, predicted: Rows) -> bool:
    """Unordered set equality of the row tuples: order and duplicates are ignored. Rows that
    cannot be hashed are compared as the sorted lists of each row's ``repr``."""
    try:
        return {tuple(r) for r in gold} == {tuple(r) for r in predicted}
    except TypeError:
        return sorted(repr(tuple(r)) for r in gold) == sorted(repr(tuple(r)) for r in predicted)


def normalize_value(value: Any) -> Any:
    """A string becomes an int if ``int()`` reads it, else a float if ``float()`` does, else stays;
    then None and NaN become 0."""
    if isinstance(value, str):
        try:
            value = int(value)
        except ValueError:
            try:
                value = float(value)
            except ValueError:
                pass
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return 0
    return value


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float))  # bools are ints


def _sort_key(value: Any) -> tuple[bool, str, bool]:
    return (value is None, str(value), _is_number(value))


def vectors_match(gold: Sequence[Any], predicted: Sequence[Any], ignore_order: bool) -> bool:
    """Two column vectors (already normalised) are equal: same length; sorted by
    ``(is None, str(value), is number)`` first when ``ignore_order`` (so by their string form:
    ``10`` sorts before ``9.99``); numbers within ``abs_tol=0.01`` (relative 1e-9), anything else
    strictly equal."""
    if len(gold) != len(predicted):
        return False
    if ignore_order:
        gold, predicted = sorted(gold, key=_sort_key), sorted(predicted, key=_sort_key)
    for a, b in zip(gold, predicted):
        if _is_number(a) and _is_number(b):
            if not math.isclose(a, b, abs_tol=0.01):
                return False
        elif a != b:
            return False
    return True


def spider2_columns(condition_cols: Any, gold_index: int) -> list[int]:
    """The ``condition_cols`` that apply to gold set ``gold_index``: a flat list applies to every
    set, a list of lists gives one list per set; empty or null means all columns."""
    if not condition_cols:
        return []
    if any(isinstance(c, list) for c in condition_cols):
        if gold_index >= len(condition_cols):
            return []
        chosen = condition_cols[gold_index]
        return list(chosen) if isinstance(chosen, list) else [chosen]
    return list(condition_cols)


def spider2_results_match(
    gold: Rows, predicted: Rows, condition_cols: Sequence[int] = (), ignore_order: bool = True
) -> bool:
    """Does ``predicted`` match gold set ``gold`` (spider2_lite's rule)?

    Both empty: match; one empty: no match. Each selected gold column (``condition_cols`` below the
    gold column count, all columns when none is left) must equal, by :func:`vectors_match` on
    normalised values, some predicted column; extra predicted columns and column order do not
    matter.
    """
    if not gold and not predicted:
        return True
    if not gold or not predicted:
        return False
    width = len(gold[0])
    columns = [c for c in condition_cols if isinstance(c, int) and c < width] or list(range(width))
    pred_width = len(predicted[0])
    pred_vectors = [[normalize_value(row[j]) for row in predicted] for j in range(pred_width)]
    for c in columns:
        gold_vector = [normalize_value(row[c]) for row in gold]
        if not any(vectors_match(gold_vector, vector, ignore_order) for vector in pred_vectors):
            return False
    return True
