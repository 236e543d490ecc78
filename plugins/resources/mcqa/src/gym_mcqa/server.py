"""The ``mcqa`` resources server: no tools, a verifier of multiple-choice answers (spec §5).

Task rows: ``responses_create_params``, ``options`` (a list of one-key objects ``{"A": "text"}``),
``expected_answer`` (the gold letter), ``grading_mode`` and ``template_metadata.output_regex``, all
optional. The reward is 1.0 when the letter extracted from the model's OUTPUT_TEXT equals the gold
letter, else 0.0; the normalised gold (``expected_answer``), the ``extracted_answer`` (null when no
letter was found) and a ``reason`` come back with it.

Grading is pure string work (:mod:`gym_mcqa.verify`). It runs in the server process when it is
certainly cheap: built-in patterns only (all linear) on outputs up to ``inline_max_chars``. A row's
own ``output_regex`` may backtrack catastrophically on a model's output, and a huge output takes
real CPU time, so those are graded in a :class:`gym_core.workers.WorkerPool` under
``verify_timeout_s``: past it the answer scores 0 with reason ``"timeout"``.
"""

from __future__ import annotations

from typing import Any, Literal

from gym_core import ResourcesServer, Session, ToolError
from gym_core.schemas import VerifyRequest, VerifyResponse
from gym_core.workers import WorkerError, WorkerPool, WorkerPoolClosed, WorkerTaskError, WorkerTimeout

from gym_mcqa.config import McqaConfig
from gym_mcqa.verify import DEFAULT_MODE, Grade, OutputRegexError, grade, normalize_gold, output_text

__all__ = ["McqaServer", "McqaVerifyRequest", "McqaVerifyResponse"]

RowGradingMode = Literal["strict_single_letter_boxed", "lenient_boxed", "lenient_answer_colon"]


class McqaVerifyRequest(VerifyRequest, kw_only=True):
    """The task fields ``verify`` reads; all optional (without options and a gold letter the
    reward is always 0). ``uuid`` and ``metadata`` are ignored."""

    options: list[dict[str, str | None]] | None = None
    expected_answer: str | None = None
    # The fourth mode, lenient_answer_colon_md, is the server config's only.
    grading_mode: RowGradingMode | None = None
    template_metadata: dict[str, Any] | None = None


class McqaVerifyResponse(VerifyResponse, kw_only=True, omit_defaults=False):
    """Always carries extracted_answer, None included: profiles count missing answers."""

    expected_answer: str
    extracted_answer: str | None = None
    reason: str = ""


class McqaServer(ResourcesServer):
    config: McqaConfig

    async def startup(self) -> None:
        # Started before the server says it is ready: the first regex row pays no start-up.
        self.pool = WorkerPool(
            self.config.verify_workers,
            time_limit_s=self.config.verify_timeout_s,
            memory_limit_mb=1024,
            preload=["gym_mcqa.verify"],
        )
        await self.pool.start()

    async def shutdown(self) -> None:
        await self.pool.aclose()

    async def verify(self, session: Session, body: McqaVerifyRequest) -> McqaVerifyResponse:
        text = output_text(body.response)
        mode = self.config.grading_mode or body.grading_mode or DEFAULT_MODE
        output_regex = (body.template_metadata or {}).get("output_regex")
        args = (text, body.options, body.expected_answer, mode, output_regex, self.config.several_answers)
        if output_regex is None and len(text) <= self.config.inline_max_chars:
            result = grade(*args)
        else:
            result = await self._grade_in_worker(args)
        return McqaVerifyResponse(
            reward=result.reward,
            expected_answer=normalize_gold(body.expected_answer),
            extracted_answer=result.extracted_answer,
            reason=result.reason,
        )

    async def _grade_in_worker(self, args: tuple[Any, ...]) -> Grade:
        try:
            return await self.pool.run(grade, *args)
        except WorkerTimeout:
            return Grade(0.0, None, "timeout")
        except WorkerTaskError as exc:
            if exc.exc_type.rpartition(".")[2] == OutputRegexError.__name__:
                # A malformed row, not a verdict on the answer: the rollout fails, naming the field.
                raise ToolError(f"{self.name}: {exc.detail}", 422) from None
            self.log.warning("mcqa grading failed: %s", exc)
            return Grade(0.0, None, "error")
        except WorkerPoolClosed:
            raise
        except WorkerError as exc:  # out of memory, crashed worker
            self.log.warning("mcqa grading failed: %s", exc)
            return Grade(0.0, None, "error")
