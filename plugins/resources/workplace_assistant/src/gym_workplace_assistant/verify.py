"""Verification by replay (pure functions, no I/O): did the model's actions leave the workplace
in the state the ground-truth actions leave it in?

Public API:

- :func:`predicted_actions` — every ``function_call`` of a response, in order, as ``(name, arguments)``;
- :func:`ground_truth_actions` — a row's ``ground_truth`` as actions (a plain string gives none);
- :func:`replay` — a fresh :class:`~gym_workplace_assistant.workplace.Workplace` after some actions;
- :func:`tables_equal` — the reference's strict frame equality of two tables, after normalising;
- :func:`states_equal` — the five compared tables of two workplaces, all equal;
- :func:`reward_for` — all of the above: 1.0 or 0.0.

The live session state is not used: both action lists are replayed in fresh workplaces. An action
that cannot run (unreadable JSON, arguments that are not an object, an unknown tool, arguments the
tool does not take, a tool that raises) is skipped. Actions of read-only tools are skipped too:
they cannot change a table, so the outcome is the same, and replay never evaluates a model's regex.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Sequence
from typing import Any

from gym_core.schemas import Response, function_calls

from gym_workplace_assistant.tables import Table, Tables
from gym_workplace_assistant.workplace import WRITE_TOOLS, Workplace

__all__ = [
    "COMPARED_TABLES",
    "KEPT_CASE_COLUMNS",
    "ReplayTimeout",
    "predicted_actions",
    "ground_truth_actions",
    "replay",
    "normalized_row",
    "tables_equal",
    "states_equal",
    "reward_for",
]

COMPARED_TABLES = ("calendar_events", "emails", "plots", "project_tasks", "crm")
# Every other column is lowercased before comparing (non-string cells become null).
KEPT_CASE_COLUMNS = frozenset({"status", "list_name", "board"})

Action = tuple[str, Any]  # (tool name, arguments: a JSON string, or an already parsed object)


class ReplayTimeout(Exception):
    """Replaying took longer than its deadline."""


def predicted_actions(response: Response) -> list[Action]:
    """Every function call of the response (all turns), in order, failed and read-only ones included."""
    return [(call.name, call.arguments) for call in function_calls(response)]


def ground_truth_actions(ground_truth: str | Sequence[Any] | None) -> list[Action]:
    """The ``{name, arguments}`` entries of a row's ``ground_truth``; a string is not parsed (no action)."""
    if ground_truth is None or isinstance(ground_truth, str):
        return []
    actions = []
    for entry in ground_truth:
        if isinstance(entry, dict):
            actions.append((entry.get("name"), entry.get("arguments")))
        else:  # a decoded row's GroundTruthAction
            actions.append((entry.name, entry.arguments))
    return actions


def replay(tables: Tables, actions: Iterable[Action], deadline: float | None = None) -> Workplace:
    """A fresh workplace after running ``actions`` in order, skipping those that cannot run.

    ``deadline`` (a :func:`time.monotonic` value) is checked between actions: past it,
    :class:`ReplayTimeout` is raised. Each action costs at most one pass over its table.
    """
    workplace = Workplace(tables)
    for name, arguments in actions:
        if deadline is not None and time.monotonic() > deadline:
            raise ReplayTimeout("replay took longer than its deadline")
        if name not in WRITE_TOOLS:
            continue
        try:
            parsed = json.loads(arguments) if isinstance(arguments, (str, bytes)) else arguments
            workplace.call(name, parsed)
        except Exception:  # the reference skips any action that fails, whatever the reason
            continue
    return workplace


def normalized_row(columns: Sequence[str], row: Sequence[Any]) -> tuple[Any, ...]:
    """A row as compared: lowercased strings (non-strings as None), except in the kept-case columns."""
    return tuple(
        cell if column in KEPT_CASE_COLUMNS else (cell.lower() if isinstance(cell, str) else None)
        for column, cell in zip(columns, row)
    )


def tables_equal(left: Table, right: Table) -> bool:
    """The same columns, the same row labels in the same order, and equal normalised rows."""
    if left.columns != right.columns or left.labels != right.labels or len(left.rows) != len(right.rows):
        return False
    for a, b in zip(left.rows, right.rows):
        # Rows neither replay touched are the very same tuple: equal without normalising.
        if a is b or a == b:
            continue
        if normalized_row(left.columns, a) != normalized_row(right.columns, b):
            return False
    return True


def states_equal(left: Workplace, right: Workplace) -> bool:
    """Whether the five compared tables are equal (analytics and the directory are not compared)."""
    return all(tables_equal(getattr(left, name), getattr(right, name)) for name in COMPARED_TABLES)


def reward_for(
    tables: Tables, predicted: Sequence[Action], expected: Sequence[Action], deadline: float | None = None
) -> float:
    """1.0 when replaying ``predicted`` leaves the compared tables as replaying ``expected`` does."""
    return float(states_equal(replay(tables, predicted, deadline), replay(tables, expected, deadline)))
