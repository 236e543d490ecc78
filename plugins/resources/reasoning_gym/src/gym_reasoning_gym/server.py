"""The ``reasoning_gym`` resources server: no tools, a verifier that scores the model's answer with
the `reasoning-gym` library's scorer of the row's task (spec §10).

Task rows: ``question`` (str), ``answer`` (str or null; the key is required) and ``metadata``
(an object whose ``source_dataset`` names the task, plus what that task's scorer reads). The answer
is extracted from OUTPUT_TEXT (:func:`gym_reasoning_gym.scoring.extract_answer`) and scored by
``score_answer`` of the task built with its default config; the reward is that score. Back come
``task_name``, ``score``, ``extracted_answer`` and a ``reason`` (``scored``; ``error`` when the
scorer raised, score 0 as in the reference; ``timeout``).

Scorers parse, simulate and sometimes solve puzzles, so extraction and scoring run in a
:class:`gym_core.workers.WorkerPool` (the library imported and every scorer built once, before the
workers fork) under ``verify_timeout_s``: past it the answer scores 0 with reason ``"timeout"``.
"""

from __future__ import annotations

from typing import Any

from gym_core import ResourcesServer, Session, ToolError
from gym_core.schemas import VerifyRequest, VerifyResponse, output_text
from gym_core.workers import WorkerError, WorkerPool, WorkerPoolClosed, WorkerTimeout

from gym_reasoning_gym.config import ReasoningGymConfig
from gym_reasoning_gym.scoring import Score, score, warm_scorers

__all__ = ["ReasoningGymServer", "ReasoningGymVerifyRequest", "ReasoningGymVerifyResponse"]


class ReasoningGymVerifyRequest(VerifyRequest, kw_only=True):
    """The task fields ``verify`` reads, all required (``answer`` may be null)."""

    question: str
    answer: str | None
    metadata: dict[str, Any]


class ReasoningGymVerifyResponse(VerifyResponse, kw_only=True, omit_defaults=False):
    task_name: str
    score: float
    extracted_answer: str | None  # null only when scoring timed out or its worker failed
    reason: str


class ReasoningGymServer(ResourcesServer):
    config: ReasoningGymConfig

    async def startup(self) -> None:
        # Started before the server says it is ready: importing the library and building its ~100
        # scorers takes seconds, paid once here rather than by the first rollouts.
        self.pool = WorkerPool(
            self.config.verify_workers,
            time_limit_s=self.config.verify_timeout_s,
            memory_limit_mb=self.config.worker_memory_mb,
            preload=["gym_reasoning_gym.scoring"],  # the initializer imports the library, quietly
            initializer=warm_scorers,
            start_timeout_s=300.0,
        )
        await self.pool.start()

    async def shutdown(self) -> None:
        await self.pool.aclose()

    async def verify(self, session: Session, body: ReasoningGymVerifyRequest) -> ReasoningGymVerifyResponse:
        task = body.metadata.get("source_dataset")
        if not isinstance(task, str) or not task:
            # The reference raises (HTTP 500); the rollout fails here too, with a clear 422.
            raise ToolError(f"{self.name}: metadata.source_dataset must name a reasoning-gym task", 422)
        text = output_text(body.response)
        result = await self._score(
            task,
            text,
            body.question,
            body.answer,
            body.metadata,
            self.config.restore_tuple_grids,
            self.config.several_answers,
        )
        return ReasoningGymVerifyResponse(
            reward=result.score,
            task_name=task,
            score=result.score,
            extracted_answer=result.extracted_answer,
            reason=result.reason,
        )

    async def _score(self, *args: Any) -> Score:
        # Extraction runs in the worker too: the answer-tag pattern is quadratic on a text full of
        # unclosed tags. So after a failure there is no extracted answer to report.
        try:
            return await self.pool.run(score, *args)
        except WorkerTimeout:
            return Score(0.0, None, "timeout")
        except WorkerPoolClosed:
            raise
        except WorkerError as exc:  # out of memory, a crashed worker, an unpicklable result
            self.log.warning("reasoning_gym scoring failed: %s", exc)
            return Score(0.0, None, "error")
