"""The ``bird_sql`` and ``spider2_lite`` resources servers: text-to-SQL scored by execution.

No tools. ``/verify`` extracts the model's query from OUTPUT_TEXT, runs it and the gold query
against the SQLite database the row's ``db_id`` names, read-only and under time, row and memory
limits, in worker processes (:mod:`gym_sql.execute`), and compares the results:

- ``bird_sql`` (spec §11): unordered set equality of the rows;
- ``spider2_lite`` (spec §12): every gold column must equal some predicted column, numbers within
  0.01, against the gold query's rows or any of the row's ``gold_result`` alternatives.

The two share the database directory, the worker pool and the limits (:class:`SqlServerBase`);
their rows, extraction rules and response fields differ, hence two server types.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

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
    "Spider2LiteServer",
    "Spider2LiteVerifyRequest",
    "Spider2LiteVerifyResponse",
    "SqlServerBase",
    "lax_bool",
    "lax_int",
]

# Strings pydantic's lax mode reads as booleans (the reference validates rows with pydantic).
_TRUE = frozenset({"1", "on", "t", "true", "y", "yes"})
_FALSE = frozenset({"0", "off", "f", "false", "n", "no"})
_DB_ID = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\- ]*")


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
            preload=["gym_sql.execute"],
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
        sql, had_codeblock = extract_bird_sql(text)
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
        sql = extract_spider2_sql(text)
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
                failure_reason="no_sql_extracted", error="no SQL found in the answer", **echo,
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
