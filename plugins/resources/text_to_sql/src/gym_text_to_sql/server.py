"""The ``text_to_sql`` resources server (spec §13): no database, no tools; an LLM judge decides
whether the model's query is functionally equivalent to the gold one.

Task rows: ``responses_create_params``, ``sql`` (the gold query), ``sql_dialect`` (``mysql``,
``postgresql`` or ``sqlite``, aliases accepted), ``sql_prompt`` (the question), ``sql_context``
(CREATE and INSERT statements, default empty), ``uuid`` and ``metadata`` (optional); other keys are
ignored.

``/verify``: the SQL is taken from OUTPUT_TEXT by spider2_lite's rule (:mod:`gym_sql.extract`,
linear), inline, or for a long text in a worker process under ``extract_timeout_s``. The judge is
asked with A = gold, B = the model's query; after an
*equal* verdict, with ``check_twice_swap``, again with the two swapped. With ``verdict_mode: guarded``
(the default) both queries go in neutralised (:func:`gym_core.judge.neutralise`: a ``[[A=B]]`` or an
``<|End of SQL Query B|>`` in a comment cannot pass for the judge's) and the verdict is the label
occurring last; ``reference`` sends them verbatim and reads the first label (gameable). Rewards: 1.0 when every
verdict asked says equal; ``reward_if_swap_fails`` when only the first does; 0.0 otherwise, and
without asking the judge when there is no text or no SQL. A judge that cannot be asked raises
:class:`gym_core.judge.JudgeError`: the answer is ``502 judge_failed`` and the rollout fails, never
a reward.
"""

from __future__ import annotations

import os
from typing import Any

from gym_core import ResourcesServer, Session
from gym_core.judge import Judge, JudgeReply
from gym_core.schemas import VerifyRequest, VerifyResponse, output_text
from gym_core.workers import WorkerError, WorkerPool, WorkerPoolClosed, WorkerTimeout

from gym_text_to_sql.config import TextToSqlConfig
from gym_text_to_sql.verify import extract_sql, extraction_is_cheap, judge_prompt, normalise_dialect, verdict_label

__all__ = ["TextToSqlServer", "TextToSqlVerifyRequest", "TextToSqlVerifyResponse", "FAILURE_REASONS"]

#: Every ``failure_reason``: the spec's four, and ``timeout`` (the extraction ran past its limit).
FAILURE_REASONS = ("none", "no_sql_extracted", "judge_evaluation_failed", "unknown_error", "timeout")


class TextToSqlVerifyRequest(VerifyRequest, kw_only=True):
    """The task fields ``verify`` reads. ``sql_dialect`` is normalised on decoding: an unknown one
    is a 422 naming the field and the allowed values."""

    sql: str
    sql_dialect: str
    sql_prompt: str
    sql_context: str | None = ""
    uuid: str | int | None = None
    metadata: Any = None

    def __post_init__(self) -> None:
        self.sql_dialect = normalise_dialect(self.sql_dialect)
        if self.sql_context is None:
            self.sql_context = ""


class TextToSqlVerifyResponse(VerifyResponse, kw_only=True, omit_defaults=False):
    """Always carries every field, nulls included (profiles count the missing SQL)."""

    model_output: str
    extracted_sql: str | None = None
    judge_passed: bool = False
    failure_reason: str
    judge_evaluations: list[dict[str, Any]] = []
    sql_dialect: str
    sql: str
    sql_context: str
    sql_prompt: str
    uuid: str | int | None = None


class TextToSqlServer(ResourcesServer):
    config: TextToSqlConfig
    # reward_if_swap_fails may be as low as -1.0 (its option is bounded to [-1, 1]).
    reward_range = (-1.0, 1.0)

    async def startup(self) -> None:
        self.judge = Judge.from_options(self, self.config)
        self.pool = WorkerPool(
            self.config.extract_workers or min(2, os.cpu_count() or 1),
            time_limit_s=self.config.extract_timeout_s,
            memory_limit_mb=self.config.extract_memory_limit_mb,
            preload=["gym_sql.extract"],
        )
        await self.pool.start()

    async def shutdown(self) -> None:
        if getattr(self, "pool", None) is not None:
            await self.pool.aclose()

    async def extract(self, text: str) -> tuple[str | None, str | None]:
        """``(sql, failure)``: the query found in ``text`` (None: none), or the failure reason when
        the extraction did not finish (``timeout``, ``unknown_error``)."""
        if extraction_is_cheap(text):
            return extract_sql(text), None
        try:
            return await self.pool.run(extract_sql, text), None
        except WorkerPoolClosed:
            raise  # shutting down: not a verdict on the answer
        except WorkerTimeout:
            self.log.warning(
                "SQL extraction ran past %gs on a %d-character answer", self.config.extract_timeout_s, len(text)
            )
            return None, "timeout"
        except WorkerError as exc:
            self.log.warning("SQL extraction failed on a %d-character answer: %s", len(text), exc)
            return None, "unknown_error"

    async def ask(self, body: TextToSqlVerifyRequest, sql_a: str, sql_b: str) -> tuple[bool, JudgeReply, str | None]:
        """One judge call on queries A and B: ``(equal, reply, verdict label)``. Raises JudgeError."""
        labels = (self.config.judge_equal_label, self.config.judge_not_equal_label)
        sql_a, sql_b = self.judge.data(sql_a, labels), self.judge.data(sql_b, labels)
        prompt = judge_prompt(body.sql_dialect, body.sql_context or "", body.sql_prompt, sql_a, sql_b)
        reply = await self.judge.ask(prompt, system=self.config.judge_system_message or None)
        label = verdict_label(reply.text, *labels, self.judge.verdict_mode)
        return label == self.config.judge_equal_label, reply, label

    async def verify(self, session: Session, body: TextToSqlVerifyRequest) -> TextToSqlVerifyResponse:
        text = output_text(body.response)
        evaluations: list[dict[str, Any]] = []

        def verdict(reward: float, reason: str, sql: str | None = None) -> TextToSqlVerifyResponse:
            return TextToSqlVerifyResponse(
                reward=reward, model_output=text, extracted_sql=sql, judge_passed=reason == "none",
                failure_reason=reason, judge_evaluations=evaluations, sql_dialect=body.sql_dialect, sql=body.sql,
                sql_context=body.sql_context or "", sql_prompt=body.sql_prompt, uuid=body.uuid,
            )  # fmt: skip

        if not text:
            return verdict(0.0, "no_sql_extracted")
        sql, failure = await self.extract(text)
        if failure is not None:
            return verdict(0.0, failure)
        if not sql:
            return verdict(0.0, "no_sql_extracted")  # an empty ```sql block too

        equal, reply, label = await self.ask(body, body.sql, sql)
        evaluations.append(reply.record(verdict_label=label))
        if not equal:
            return verdict(0.0, "judge_evaluation_failed", sql)
        if not self.config.check_twice_swap:
            return verdict(1.0, "none", sql)
        equal, reply, label = await self.ask(body, sql, body.sql)
        evaluations.append(reply.record(verdict_label=label))
        if not equal:
            return verdict(self.config.reward_if_swap_fails, "judge_evaluation_failed", sql)
        return verdict(1.0, "none", sql)
