"""The ``equivalence_llm_judge`` resources server: open-ended answers graded by an LLM judge against a
gold answer (environments spec §17, judge pattern §2). No tools.

``/verify``:

1. the question: the last user message, through ``question_extract_regex`` when configured;
2. the extraction regex: ``response_extract_regex``, or the row's ``template_metadata.output_regex``
   (``use_per_record_regex``), or none when the gold answer is longer than
   ``extraction_length_threshold`` (the *length skip*);
3. the generated answer: the last assistant message through that regex (``msg_extraction_failure``
   when there is no assistant text);
4. the judge is asked with the filled template, the three values as data (``verdict_mode: guarded``,
   the default: label and delimiter look-alikes neutralised by :func:`gym_core.judge.neutralise`;
   the shipped templates put them between data tags); its verdict is read from the last output item
   only, the label occurring last outside echoed data (``reference``: the first label, gameable);
5. not equal: with a per-row regex and ``check_full_generation_on_fail`` (and no length skip), the
   judge is asked again with the whole message: ``reward_if_full_generation_succeeds`` if equal;
6. equal: with ``check_twice_swap`` (and no length skip), asked again with the answers swapped:
   1.0 if equal too, else ``reward_if_swap_fails``.

The regexes run in the server for short texts, in a :class:`gym_core.workers.WorkerPool` under a hard
limit for long ones (a pathological one scores 0 with reason ``timeout``, and the judge is not asked).
A judge that cannot be asked raises :class:`gym_core.judge.JudgeError` out of ``verify``: gym answers
it 502 ``judge_failed`` and the rollout fails (it is retried, never scored 0).
"""

from __future__ import annotations

from typing import Any

from gym_core import ResourcesServer, Session
from gym_core.judge import Judge
from gym_core.schemas import VerifyRequest, VerifyResponse, last_assistant_text
from gym_core.workers import WorkerError, WorkerPool, WorkerPoolClosed, WorkerTimeout

from gym_equivalence_llm_judge.config import EquivalenceLlmJudgeConfig
from gym_equivalence_llm_judge.extraction import extract_inputs
from gym_equivalence_llm_judge.grading import (
    choose_regex,
    judge_prompt,
    last_user_text,
    read_verdict,
    resolve_expected_answer,
)

__all__ = ["EquivalenceLlmJudgeServer", "EquivalenceLlmJudgeVerifyRequest", "EquivalenceLlmJudgeVerifyResponse"]


class EquivalenceLlmJudgeVerifyRequest(VerifyRequest, kw_only=True):
    """The task fields ``verify`` reads; all optional (an absent gold answer is ``""``)."""

    expected_answer: str | int | float | None = None
    template_metadata: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None
    options: Any = None  # extra information, ignored
    uuid: Any = None  # extra information, ignored


class EquivalenceLlmJudgeVerifyResponse(VerifyResponse, kw_only=True, omit_defaults=False):
    """The verdict; every field always present (nulls included), so profiles can count them.

    - ``expected_answer``: the gold answer as resolved (``metadata.expected_answer`` fallback);
    - ``extracted_answer``: the generated answer the judge first saw; null when the response had no
      assistant text (the judge then saw ``msg_extraction_failure``) or the extraction timed out;
    - ``judge_evaluations``: each judge call, in order: ``{responses_create_params, response, verdict_label}``;
    - ``reason``: ``equal``, ``swap_failed``, ``not_equal``, ``full_generation_equal``,
      ``full_generation_not_equal``, ``timeout`` or ``error`` (the last two: no judge call, reward 0).
    """

    expected_answer: str
    extracted_answer: str | None = None
    judge_evaluations: list[dict[str, Any]] = []
    reason: str = ""


class EquivalenceLlmJudgeServer(ResourcesServer):
    config: EquivalenceLlmJudgeConfig

    async def startup(self) -> None:
        self.template = self.config.template
        self.judge = Judge.from_options(self, self.config)
        # Processes start on the first long text: most verifies never need one.
        self.pool = WorkerPool(
            self.config.verify_workers,
            time_limit_s=self.config.verify_timeout_s,
            memory_limit_mb=self.config.verify_memory_limit_mb,
            preload=["gym_equivalence_llm_judge.extraction"],
        )

    async def shutdown(self) -> None:
        await self.pool.aclose()

    async def verify(
        self, session: Session, body: EquivalenceLlmJudgeVerifyRequest
    ) -> EquivalenceLlmJudgeVerifyResponse:
        config = self.config
        expected = resolve_expected_answer(body.expected_answer, body.metadata)
        choice = choose_regex(
            config.response_extract_regex,
            body.template_metadata,
            expected,
            use_per_record_regex=config.use_per_record_regex,
            extraction_length_threshold=config.extraction_length_threshold,
        )
        generation = last_assistant_text(body.response)
        extracted_failed = not generation
        full_text = generation or config.msg_extraction_failure
        question_text = last_user_text(body.responses_create_params)

        try:
            question, generated = await self._extract(
                question_text, config.question_extract_regex, full_text, None if extracted_failed else choice.regex
            )
        except _ExtractionFailed as failed:
            return EquivalenceLlmJudgeVerifyResponse(reward=0.0, expected_answer=expected, reason=failed.reason)

        evaluations: list[dict[str, Any]] = []
        equal = await self._ask(question, expected, generated, evaluations)
        if not equal:
            if choice.length_skip or not (config.check_full_generation_on_fail and choice.per_row):
                reward, reason = 0.0, "not_equal"
            elif await self._ask(question, expected, full_text, evaluations):
                reward, reason = config.reward_if_full_generation_succeeds, "full_generation_equal"
            else:
                reward, reason = 0.0, "full_generation_not_equal"
        elif not config.check_twice_swap or choice.length_skip:
            reward, reason = 1.0, "equal"
        elif await self._ask(question, generated, expected, evaluations):  # the answers swapped
            reward, reason = 1.0, "equal"
        else:
            reward, reason = config.reward_if_swap_fails, "swap_failed"
        return EquivalenceLlmJudgeVerifyResponse(
            reward=reward,
            expected_answer=expected,
            extracted_answer=None if extracted_failed else generated,
            judge_evaluations=evaluations,
            reason=reason,
        )

    async def _ask(self, question: str, expected: str, generated: str, evaluations: list[dict[str, Any]]) -> bool:
        """One judge call (JudgeError propagates); appends its record to ``evaluations``."""
        labels = (self.config.judge_equal_label, self.config.judge_not_equal_label)
        data = self.judge.data
        prompt = judge_prompt(self.template, data(question, labels), data(expected, labels), data(generated, labels))
        reply = await self.judge.ask(prompt, system=self.config.judge_system_message or None)
        equal, label = read_verdict(reply.last_text, *labels, self.judge.verdict_mode)
        evaluations.append(reply.record(verdict_label=label))
        return equal

    async def _extract(
        self, question_text: str, question_regex: str | None, answer_text: str, answer_regex: str | None
    ) -> tuple[str, str]:
        """The question and the generated answer; in a worker when a regex meets a long text."""
        if not question_regex and not answer_regex:
            return question_text, answer_text
        limit = self.config.inline_max_chars
        long_question = question_regex is not None and len(question_text) > limit
        long_answer = answer_regex is not None and len(answer_text) > limit
        if not (long_question or long_answer):
            return extract_inputs(question_text, question_regex, answer_text, answer_regex)
        try:
            return await self.pool.run(extract_inputs, question_text, question_regex, answer_text, answer_regex)
        except WorkerPoolClosed:
            raise
        except WorkerTimeout:
            raise _ExtractionFailed("timeout") from None
        except WorkerError as exc:
            self.log.warning(
                "answer extraction failed (%d + %d characters): %s", len(question_text), len(answer_text), exc
            )
            raise _ExtractionFailed("error") from None


class _ExtractionFailed(Exception):
    def __init__(self, reason: str):
        self.reason = reason
        super().__init__(reason)
