"""The ``bird_sql`` and ``spider2_lite`` resources servers: text-to-SQL scored by execution.

No tools. ``/verify`` extracts the model's query from OUTPUT_TEXT, runs it and the gold query
against the SQLite database the row's ``db_id`` names, read-only and under time, row and memory
limits, in worker processes (:mod:`gym_sql.execute`), and compares the results:

- ``bird_sql`` (spec §11): unordered set equality of the rows;
- ``spider2_lite`` (spec §12): every gold column must equal some predicted column, numbers within
  0.01, against the gold query's rows or any of the row's ``gold_result`` alternatives.

The two share the database directory, the worker pool and the limits (:class:`SqlServerBase`);
their rows, extraction rules and response fields differ, hence two server types.

The extraction rules (:mod:`gym_sql.extract`) are linear-time; still, an answer longer than
:data:`INLINE_EXTRACT_MAX_CHARS` is searched in a worker of the same pool under
:data:`EXTRACT_TIME_LIMIT_S` (:func:`extract_bounded`), so that no answer can hold the event loop.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import msgspec

from gym_core import ResourcesServer, Session
from gym_core.schemas import VerifyRequest, VerifyResponse, output_text
from gym_core.workers import WorkerError, WorkerPool, WorkerPoolClosed, WorkerTimeout

from gym_sql.config import SqlConfig
from gym_sql.examples import build_example_databases
from gym_sql.execute import Outcome, execute_bird, execute_spider2, ping
from gym_sql.extract import extract_bird_sql, extract_spider2_sql

__all__ = [
    "BirdSqlServer",
    "BirdSqlVerifyRequest",
    "BirdSqlVerifyResponse",
    "EXTRACT_TIME_LIMIT_S",
    "INLINE_EXTRACT_MAX_CHARS",
    "Spider2LiteServer",
    "Spider2LiteVerifyRequest",
    "Spider2LiteVerifyResponse",
    "SqlServerBase",
    "extract_bounded",
    "lax_bool",
    "lax_int",
]

# Strings pydantic's lax mode reads as booleans (the reference validates rows with pydantic).
_TRUE = frozenset({"1", "on", "t", "true", "y", "yes"})
_FALSE = frozenset({"0", "off", "f", "false", "n", "no"})
_DB_ID = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\- ]*")

T = TypeVar("T")

#: Answers longer than this are searched for SQL in a worker process, not on the event loop.
INLINE_EXTRACT_MAX_CHARS = 4096
#: The hard limit of searching one long answer (its worker is killed past it). The extraction is
#: linear-time, a fraction of a second on megabytes; the limit is a backstop, not a budget.
EXTRACT_TIME_LIMIT_S = 10.0


async def extract_bounded(
    pool: WorkerPool,
    fn: Callable[[str], T],
    text: str,
    *,
    inline_max_chars: int = INLINE_EXTRACT_MAX_CHARS,
    time_limit_s: float = EXTRACT_TIME_LIMIT_S,
) -> T:
    """``fn(text)``: inline when ``text`` has at most ``inline_max_chars`` characters, else in a
    worker of ``pool`` under ``time_limit_s``.

    The rules of :mod:`gym_sql.extract` are linear-time; this is defence in depth, so that no
    answer (nor a future regression of a rule into backtracking) can hold the event loop for long.
    Raises what :meth:`WorkerPool.run` raises (:class:`WorkerTimeout` past the limit).
    """
    if len(text) <= inline_max_chars:
        return fn(text)
    return await pool.run(fn, text, time_limit_s=time_limit_s)


def lax_bool(value: Any, field: str, default: bool) -> bool:
    """``value`` read as pydantic's lax mode reads a bool; None gives ``default``. Raises
    ``msgspec.ValidationError`` (an HTTP 422 naming ``field``) otherwise."""
    if value is None:
        return default
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
        return value.strip().lower() in _TRUE
    raise msgspec.ValidationError(f"Expected a boolean, got {value!r} - at `$.{field}`")


def lax_int(value: Any, field: str) -> int | None:
    """``value`` read as pydantic's lax mode reads an int (``"0"`` → 0); None stays None."""
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            pass
    raise msgspec.ValidationError(f"Expected an integer, got {value!r} - at `$.{field}`")


class SqlServerBase(ResourcesServer):
    """The database directory, the worker pool and the query limits both server types share."""

    config: SqlConfig

    async def startup(self) -> None:
        self._built_dir: Path | None = None
        if self.config.db_dir is None:
            self._built_dir = Path(tempfile.mkdtemp(prefix="gym-sql-examples-"))
            build_example_databases(self._built_dir)
            self.db_dir = self._built_dir
        else:
            self.db_dir = Path(self.config.db_dir).expanduser()
            if not self.db_dir.is_dir():
                raise FileNotFoundError(f"db_dir {self.db_dir} is not a directory")
        # Each verify runs up to two queries, each stopped by its own deadline inside the worker;
        # the pool's hard limit (both deadlines plus slack) is the backstop for a stuck worker.
        self.pool = WorkerPool(
            self.config.max_concurrency,
            time_limit_s=2 * self.config.sql_execution_timeout_s + 5.0,
            memory_limit_mb=self.config.memory_limit_mb,
            preload=["gym_sql.execute", "gym_sql.extract"],
        )
        await self.pool.run(ping)  # start the zygote and one worker before saying ready

    async def shutdown(self) -> None:
        if getattr(self, "pool", None) is not None:
            await self.pool.aclose()
        if getattr(self, "_built_dir", None) is not None:
            shutil.rmtree(self._built_dir, ignore_errors=True)

    def database_path(self, db_id: str) -> Path | None:
        """``<db_dir>/<db_id>.sqlite``, else ``<db_dir>/<db_id>/<db_id>.sqlite``; None when
        ``db_id`` is not a plain name or neither file exists."""
        if not _DB_ID.fullmatch(db_id) or ".." in db_id:
            return None
        for path in (self.db_dir / f"{db_id}.sqlite", self.db_dir / db_id / f"{db_id}.sqlite"):
            if path.is_file():
                return path
        return None

    async def extract(self, fn: Callable[[str], T], text: str) -> tuple[T | None, str | None]:
        """``(fn(text), None)`` by :func:`extract_bounded` in the query workers, or ``(None, why)``
        when the extraction did not finish (past :data:`EXTRACT_TIME_LIMIT_S`, or its worker
        failed): the answer then scores 0 as ``no_sql_extracted`` with that ``error``."""
        try:
            return await extract_bounded(self.pool, fn, text), None
        except WorkerPoolClosed:
            raise  # shutting down: not a verdict on the answer
        except WorkerError as exc:
            self.log.warning("SQL extraction failed on a %d-character answer: %s", len(text), exc)
            return None, f"the SQL extraction did not finish: {exc}"[:500]

    async def execute(self, fn: Any, db_id: str, *args: Any) -> Outcome:
        """``fn(db_path, *args)`` in a worker; a missing database, a worker past its hard limit or
        a crashed worker become an :class:`Outcome` that says so (the gold query "failed")."""
        path = self.database_path(db_id)
        if path is None:
            self.log.warning("no database for db_id %r in %s", db_id, self.db_dir)
            return Outcome(gold_error=f"no database {db_id!r} in db_dir")
        try:
            return await self.pool.run(fn, str(path), *args)
        except WorkerPoolClosed:
            raise
        except WorkerTimeout:
            return Outcome(predicted_error="timeout (the worker was killed)")
        except WorkerError as exc:
            self.log.warning("query worker failed: %s", exc)
            return Outcome(predicted_error=f"worker failed: {exc}"[:500])


# --- bird_sql ----------------------------------------------------------------------------------


class BirdSqlVerifyRequest(VerifyRequest, kw_only=True):
    question: str
    gt_sql: str
    db_id: str
    difficulty: str | None = None
    id: int | str | None = None


class BirdSqlVerifyResponse(VerifyResponse, kw_only=True, omit_defaults=False):
    model_output: str
    extracted_sql: str
    had_codeblock: bool
    execution_match: bool
    failure_reason: str
    error: str | None = None
    question: str
    gt_sql: str
    db_id: str
    difficulty: str | None = None
    id: int | None = None


class BirdSqlServer(SqlServerBase):
    """bird_sql: reward 1 when the predicted query's rows equal the gold query's as sets."""

    async def verify(self, session: Session, body: BirdSqlVerifyRequest) -> BirdSqlVerifyResponse:
        task_id = lax_int(body.id, "id")
        text = output_text(body.response)
        extracted, extraction_error = await self.extract(extract_bird_sql, text)
        if extracted is None:
            return BirdSqlVerifyResponse(
                reward=0.0, model_output=text, extracted_sql="", had_codeblock=False, execution_match=False,
                failure_reason="no_sql_extracted", error=extraction_error, question=body.question,
                gt_sql=body.gt_sql, db_id=body.db_id, difficulty=body.difficulty, id=task_id,
            )  # fmt: skip
        sql, had_codeblock = extracted
        outcome = await self.execute(
            execute_bird, body.db_id, body.gt_sql, sql, self.config.sql_execution_timeout_s, self.config.max_rows
        )
        if outcome.gold_error is not None:
            reason, error = "gold_execution_error", outcome.gold_error
        elif outcome.match:
            reason, error = "none", None
        else:
            reason = "execution_error" if had_codeblock else "no_sql_extracted"
            error = outcome.predicted_error
        return BirdSqlVerifyResponse(
            reward=1.0 if outcome.match else 0.0,
            model_output=text,
            extracted_sql=sql,
            had_codeblock=had_codeblock,
            execution_match=outcome.match,
            failure_reason=reason,
            error=error,
            question=body.question,
            gt_sql=body.gt_sql,
            db_id=body.db_id,
            difficulty=body.difficulty,
            id=task_id,
        )


# --- spider2_lite ------------------------------------------------------------------------------


class Spider2LiteVerifyRequest(VerifyRequest, kw_only=True):
    db_id: str
    question: str
    gold_sql: str | None = None
    gold_result: list[list[list[Any]]] | None = None
    ignore_order: bool | int | float | str | None = None
    condition_cols: list[int | list[int]] | None = None
    instance_id: str | int | None = None
    uuid: str | None = None
    metadata: Any = None


class Spider2LiteVerifyResponse(VerifyResponse, kw_only=True, omit_defaults=False):
    model_output: str
    extracted_sql: str | None = None
    execution_match: bool
    failure_reason: str
    error: str | None = None
    gold_sql: str | None = None
    db_id: str
    question: str
    instance_id: str | int | None = None
    uuid: str | None = None


class Spider2LiteServer(SqlServerBase):
    """spider2_lite: reward 1 when every gold column appears among the predicted columns."""

    async def verify(self, session: Session, body: Spider2LiteVerifyRequest) -> Spider2LiteVerifyResponse:
        ignore_order = lax_bool(body.ignore_order, "ignore_order", default=True)
        if not body.gold_sql and body.gold_result is None:
            raise msgspec.ValidationError("Object has neither `gold_sql` nor `gold_result` - at `$`")
        text = output_text(body.response)
        sql, extraction_error = await self.extract(extract_spider2_sql, text)
        echo = {
            "gold_sql": body.gold_sql,
            "db_id": body.db_id,
            "question": body.question,
            "instance_id": body.instance_id,
            "uuid": body.uuid,
        }
        if not sql:
            return Spider2LiteVerifyResponse(
                reward=0.0, model_output=text, extracted_sql=sql, execution_match=False,
                failure_reason="no_sql_extracted", error=extraction_error or "no SQL found in the answer", **echo,
            )  # fmt: skip
        outcome = await self.execute(
            execute_spider2,
            body.db_id,
            body.gold_sql or None,
            body.gold_result,
            sql,
            body.condition_cols,
            ignore_order,
            self.config.sql_execution_timeout_s,
            self.config.max_rows,
        )
        error = outcome.gold_error if outcome.gold_error is not None else outcome.predicted_error
        if error is not None and outcome.gold_error is not None:
            error = f"gold query: {error}"
        return Spider2LiteVerifyResponse(
            reward=1.0 if outcome.match else 0.0,
            model_output=text,
            extracted_sql=sql,
            execution_match=outcome.match,
            failure_reason="none" if outcome.match else "execution_error",
            error=error,
            **echo,
        )
