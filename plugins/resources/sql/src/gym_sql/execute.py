"""Running a query against a SQLite file, read-only and bounded; the worker-side entry points.

:func:`run_query` opens the database read-only three ways over (a ``mode=ro`` URI,
``PRAGMA query_only``, and an authorizer that allows only reading: no writes, no schema changes,
no ``ATTACH``, no ``load_extension``, no transaction control, no pragma that sets or changes
anything), stops the query at its deadline with a progress handler, and refuses results of more
than ``max_rows`` rows while fetching them (so ``SELECT *`` over a cartesian product or an endless
``WITH RECURSIVE`` stops at the limit instead of filling memory). Any failure raises
:class:`QueryError` with a short reason.

:func:`execute_bird` and :func:`execute_spider2` run the gold and predicted queries and compare
their results in one call; the server runs them in a :class:`gym_core.workers.WorkerPool` whose
hard time limit (and memory limit) backs up the progress handler.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from gym_sql.compare import bird_results_match, spider2_columns, spider2_results_match

__all__ = ["Outcome", "QueryError", "execute_bird", "execute_spider2", "run_query", "ping"]

# Pragmas that only report (with or without an argument); any other pragma is refused.
_READ_PRAGMAS = frozenset(
    {
        "table_info",
        "table_xinfo",
        "table_list",
        "index_info",
        "index_xinfo",
        "index_list",
        "foreign_key_list",
        "database_list",
        "collation_list",
        "function_list",
        "compile_options",
    }
)
_ALLOWED_ACTIONS = frozenset({sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_RECURSIVE})
_PROGRESS_EVERY = 10_000  # SQLite VM instructions between two deadline checks


class QueryError(Exception):
    """The query did not give a result: ``reason`` says why in a few words."""


@dataclass(frozen=True)
class Outcome:
    """What a worker reports: whether each query ran (None) or why not, and whether results match."""

    gold_error: str | None = None
    predicted_error: str | None = None
    match: bool = False


def _authorize(action: int, arg1: str | None, arg2: str | None, db: str | None, source: str | None) -> int:
    if action in _ALLOWED_ACTIONS:
        return sqlite3.SQLITE_OK
    if action == sqlite3.SQLITE_FUNCTION:
        return sqlite3.SQLITE_DENY if (arg2 or "").lower() == "load_extension" else sqlite3.SQLITE_OK
    if action == sqlite3.SQLITE_PRAGMA and (arg1 or "").lower() in _READ_PRAGMAS:
        return sqlite3.SQLITE_OK
    return sqlite3.SQLITE_DENY


def _describe(exc: BaseException) -> str:
    message = str(exc)
    if message == "interrupted":
        return "timeout"
    if "not authorized" in message or "authorization denied" in message:
        return f"refused (the query may only read): {message}"
    return f"{type(exc).__name__}: {message}"[:500]


def run_query(
    db_path: str,
    sql: str,
    *,
    timeout_s: float,
    max_rows: int,
    text_factory: Callable[[bytes], Any] | None = None,
) -> list[tuple[Any, ...]]:
    """All rows of ``sql`` on the SQLite file ``db_path``, opened read-only.

    Raises :class:`QueryError` when the file is missing, the query fails or is refused (anything
    but reading), runs past ``timeout_s`` seconds, or yields more than ``max_rows`` rows.
    ``text_factory`` decodes TEXT values (default: strict UTF-8).
    """
    path = Path(db_path)
    if not path.is_file():
        raise QueryError(f"no database file {path.name}")
    deadline = time.monotonic() + timeout_s
    try:
        conn = sqlite3.connect(
            f"file:{quote(str(path.resolve()))}?mode=ro", uri=True, isolation_level=None, check_same_thread=False
        )
    except sqlite3.Error as exc:
        raise QueryError(_describe(exc)) from None
    try:
        conn.execute("PRAGMA query_only = ON")
        conn.set_authorizer(_authorize)
        conn.set_progress_handler(lambda: time.monotonic() > deadline, _PROGRESS_EVERY)
        if text_factory is not None:
            conn.text_factory = text_factory
        rows: list[tuple[Any, ...]] = []
        cursor = conn.execute(sql)
        while batch := cursor.fetchmany(1000):
            rows.extend(batch)
            if len(rows) > max_rows:
                raise QueryError(f"more than {max_rows} rows")
        return rows
    except (sqlite3.Error, ValueError, OverflowError, MemoryError) as exc:
        # ValueError: e.g. a NUL character in the query; sqlite3.Warning: several statements.
        raise QueryError(_describe(exc)) from None
    except sqlite3.Warning as exc:
        raise QueryError(_describe(exc)) from None
    finally:
        conn.close()


def _bird_text(raw: bytes) -> str:
    return raw.decode("utf-8", errors="ignore")


def execute_bird(db_path: str, gold_sql: str, predicted_sql: str, timeout_s: float, max_rows: int) -> Outcome:
    """bird_sql: the gold query, then (if it ran) the predicted one, each under ``timeout_s``;
    match = unordered set equality of their rows. Undecodable bytes of text values are dropped."""
    try:
        gold = run_query(db_path, gold_sql, timeout_s=timeout_s, max_rows=max_rows, text_factory=_bird_text)
    except QueryError as exc:
        return Outcome(gold_error=str(exc))
    try:
        predicted = run_query(db_path, predicted_sql, timeout_s=timeout_s, max_rows=max_rows, text_factory=_bird_text)
    except QueryError as exc:
        return Outcome(predicted_error=str(exc))
    return Outcome(match=bird_results_match(gold, predicted))


def execute_spider2(
    db_path: str,
    gold_sql: str | None,
    gold_result: Sequence[Sequence[Sequence[Any]]] | None,
    predicted_sql: str,
    condition_cols: Any,
    ignore_order: bool,
    timeout_s: float,
    max_rows: int,
) -> Outcome:
    """spider2_lite: with ``gold_sql``, run it then the predicted query and compare with its rows;
    otherwise run the predicted query and compare with each alternative of ``gold_result`` (any
    match wins)."""
    if gold_sql:
        try:
            gold_sets = [run_query(db_path, gold_sql, timeout_s=timeout_s, max_rows=max_rows)]
        except QueryError as exc:
            return Outcome(gold_error=str(exc))
    else:
        gold_sets = [[tuple(row) for row in rows] for rows in gold_result or []]
    try:
        predicted = run_query(db_path, predicted_sql, timeout_s=timeout_s, max_rows=max_rows)
    except QueryError as exc:
        return Outcome(predicted_error=str(exc))
    try:
        match = any(
            spider2_results_match(gold, predicted, spider2_columns(condition_cols, i), ignore_order)
            for i, gold in enumerate(gold_sets)
        )
    except (IndexError, TypeError) as exc:  # ragged gold rows, say
        return Outcome(predicted_error=f"cannot compare with the gold result: {type(exc).__name__}: {exc}")
    return Outcome(match=match)


def ping() -> bool:
    """A no-op for warming the worker pool."""
    return True
