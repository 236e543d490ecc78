"""The ``genrm_compare`` resources server: relative rewards from pairwise comparisons by a generative
reward model (environments spec §22; agents_models spec §3.7).

- ``POST /compare`` (batch): ``{conversation_history, response_objs, principle?}`` →
  ``{rewards, comparison_results, metrics}``.
- ``POST /verify`` (cohorts): rollouts of one prompt are buffered under a cohort key until
  ``num_rollouts_per_prompt`` have arrived; comparisons start as soon as both of their responses are
  there; when the cohort is full every waiting verify gets its own reward. With
  ``num_rollouts_per_prompt`` 1 a verify gets ``default_score`` at once.

Each comparison asks the judge (a ``genrm_model`` instance) through :class:`gym_core.judge.Judge`
with ``input`` = the conversation and ``metadata`` = ``{response_1, response_2[, principle]}``.
With ``verdict_mode: guarded`` (the default) the responses go in neutralised
(:func:`gym_core.judge.neutralise` with :data:`~gym_genrm_compare.compare.GENRM_LABELS`: a forged
``{"score_1": 1, "score_2": 5}`` or ``[Response 2]`` header is inert) and the verdict read is the last
one in the reply; ``reference`` sends them verbatim and reads the first fenced verdict (gameable).
Unlike every other judged environment, a comparison never fails the rollout: a judge that cannot be
asked (``JudgeError``), or any other error, gives the neutral defaults (3.0, 3.0, 3.5), as does a
reply with no verdict after ``genrm_parse_retries`` more calls.

Waits are bounded: a cohort that has not filled within ``cohort_timeout_s`` of its first verify is
closed (``cohort_timeout_action``: compare the rollouts that arrived, or fail them with 504
``cohort_timeout``), each verify is also bounded by its caller's deadline (gym-core), and judge
calls by the judge's own limits. A closed cohort is dropped from memory as soon as it is decided;
at most ``max_open_cohorts`` wait at once.
"""

from __future__ import annotations

import asyncio
import contextvars
import copy
import hashlib
from dataclasses import dataclass, field
from typing import Any

import msgspec

from gym_core import ResourcesServer, Session
from gym_core.errors import InfrastructureError
from gym_core.judge import Judge, JudgeError
from gym_core.schemas import (
    Item,
    Response,
    VerifyRequest,
    VerifyResponse,
    decode_create_params,
)

from gym_genrm_compare.compare import (
    GENRM_LABELS,
    Adjustments,
    Aggregate,
    Comparison,
    adjustments,
    aggregate,
    answer_text,
    comparison_pairs,
    parse_verdict,
    reasoning_text,
)
from gym_genrm_compare.config import GenrmCompareConfig

__all__ = [
    "GenrmCompareServer",
    "GenrmCompareVerifyRequest",
    "GenrmCompareVerifyResponse",
    "CompareRequest",
    "CohortTimeout",
    "CohortsFull",
    "cohort_key",
]

NO_ANSWER = "None"  # what the GenRM is shown for a response without output text (the reference's literal)


class CohortTimeout(InfrastructureError):
    """The cohort did not fill within cohort_timeout_s and cohort_timeout_action is ``fail``."""

    status = 504
    kind = "cohort_timeout"


class CohortsFull(InfrastructureError):
    """``max_open_cohorts`` cohorts are waiting already."""

    status = 503
    kind = "cohorts_full"


class GenrmCompareVerifyRequest(VerifyRequest, kw_only=True):
    """The row: ``responses_create_params`` (its ``input`` is the conversation judged), and optionally
    ``principle`` (sent when ``use_principle``), ``prompt_id`` and ``_ng_task_index`` (cohort keys)."""

    principle: str | None = None
    prompt_id: str | int | None = None
    ng_task_index: int | str | None = msgspec.field(default=None, name="_ng_task_index")


class GenrmCompareVerifyResponse(VerifyResponse, kw_only=True, omit_defaults=False):
    base_reward: float  # the simple_tiebreaker reward, before the optional adjustments
    adjustments: dict[str, float] = msgspec.field(default_factory=dict)  # the non-zero ones, by name
    genrm_scores: list[float] = msgspec.field(default_factory=list)  # the scores this response received
    num_comparisons: int = 0  # this response's comparisons
    num_default_comparisons: int = 0  # ...of which fell back to the neutral defaults
    cohort_size: int = 1  # responses compared together
    cohort_index: int = 0  # this response's place in its cohort (arrival order)
    cohort_complete: bool = True  # False: the cohort timed out and was compared as it was
    mean_individual_score: float | None = None  # the cohort's metrics (None: nothing compared)
    std_individual_score: float | None = None
    tiebreak_usage_rate: float | None = None


class CompareRequest(msgspec.Struct, kw_only=True):
    """``POST /compare``: a conversation and the responses to compare."""

    conversation_history: list[dict[str, Any]] | str
    response_objs: list[Response]
    principle: str | None = None


class CompareResponse(msgspec.Struct, kw_only=True):
    rewards: list[float]
    comparison_results: list[dict[str, Any]]
    metrics: dict[str, float]


@dataclass
class Candidate:
    """One response of a group, as judged and measured."""

    answer: str  # OUTPUT_TEXT ("" when none; shown to the GenRM as "None")
    reasoning: str


@dataclass
class Cohort:
    key: str
    conversation: list[Any]
    principle: str | None
    candidates: list[Candidate] = field(default_factory=list)
    comparisons: dict[tuple[int, int, int], asyncio.Task[Comparison]] = field(default_factory=dict)
    done: asyncio.Future[list[GenrmCompareVerifyResponse] | None] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )
    closed: bool = False
    complete: bool = False
    timer: asyncio.TimerHandle | None = None


def cohort_key(body: GenrmCompareVerifyRequest) -> str:
    """The cohort of a verify: ``task_idx::<_ng_task_index>::<hash>``, else ``prompt_id::<id>::<hash>``,
    else ``<hash>``, where hash is the SHA-256 of the request's input and the row's principle."""
    params = body.responses_create_params
    digest = hashlib.sha256(
        msgspec.json.encode({"input": params.input, "principle": body.principle}, order="deterministic")
    ).hexdigest()
    if body.ng_task_index is not None:
        return f"task_idx::{body.ng_task_index}::{digest}"
    if body.prompt_id is not None:
        return f"prompt_id::{body.prompt_id}::{digest}"
    return digest


def _conversation(items: str | list[Item]) -> list[Any]:
    if isinstance(items, str):
        return [{"role": "user", "content": items}]
    return msgspec.to_builtins(items)


class GenrmCompareServer(ResourcesServer):
    config: GenrmCompareConfig
    # Scores of 1-5 moved by the tiebreak (up to ±2.5) and by adjustments; a GenRM's scores are not
    # clamped (as in the reference), so no bound is promised.
    reward_range = (float("-inf"), float("inf"))

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.cohorts: dict[str, Cohort] = {}  # open cohorts only: a decided one is dropped
        self._background: set[asyncio.Task[Any]] = set()
        self._compare_decoder = msgspec.json.Decoder(CompareRequest)
        self.comparisons_made = 0
        self.comparisons_defaulted = 0

    async def startup(self) -> None:
        self.judge = Judge.from_options(self, self.config)

    async def shutdown(self) -> None:
        for cohort in list(self.cohorts.values()):
            self._close(cohort)
        for task in list(self._background):
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)

    def routes(self) -> list[Any]:
        async def compare(request: Any) -> Any:
            return await self.compare(self._compare_decoder.decode(await request.body()))

        return [*super().routes(), self.post_json("/compare", compare)]

    # --- one comparison ---

    def _principle(self, row_principle: str | None) -> str | None:
        return (row_principle or self.config.default_principle) if self.config.use_principle else None

    async def _compare(
        self,
        conversation: list[Any],
        first: Candidate,
        second: Candidate,
        principle: str | None,
        i: int,
        j: int,
        k: int,
    ) -> Comparison:
        """One GenRM comparison; the neutral defaults when it cannot be had (never raises)."""
        cfg = self.config
        # The policy's answers as data: verdict keys and section headers in them neutralised (guarded mode).
        metadata = {
            "response_1": self.judge.data(first.answer, GENRM_LABELS) or NO_ANSWER,
            "response_2": self.judge.data(second.answer, GENRM_LABELS) or NO_ANSWER,
        }
        if principle:
            metadata["principle"] = principle
        defaults = Comparison(i, j, k, cfg.default_score, cfg.default_score, cfg.default_ranking, parsed=False)
        attempts = 0
        try:
            for attempt in range(1 + cfg.genrm_parse_retries):
                if attempt:
                    await asyncio.sleep(cfg.genrm_parse_retry_sleep_s)
                params = copy.deepcopy(self.judge.params)
                params["input"] = conversation
                params["metadata"] = metadata
                attempts += 1
                reply = await self.judge.send(params)
                verdict = await asyncio.to_thread(
                    parse_verdict, reply.text, cfg.default_score, cfg.default_ranking, self.judge.verdict_mode
                )
                if verdict is not None:
                    return Comparison(
                        i, j, k, verdict.score_1, verdict.score_2, verdict.ranking, parsed=True, attempts=attempts
                    )
            defaults.error = f"no verdict in {attempts} replies"
        except JudgeError as exc:
            defaults.error = str(exc)
        except Exception as exc:  # the spec's rule: any failure of a comparison gives the defaults
            self.log.warning("comparison (%d, %d) failed: %s: %s", i, j, type(exc).__name__, exc)
            defaults.error = f"{type(exc).__name__}: {exc}"
        defaults.attempts = attempts
        return defaults

    def _count(self, comparisons: list[Comparison]) -> None:
        self.comparisons_made += len(comparisons)
        self.comparisons_defaulted += sum(1 for c in comparisons if not c.parsed)

    def _rewards(self, candidates: list[Candidate], comparisons: list[Comparison]) -> tuple[Aggregate, Adjustments]:
        cfg = self.config
        result = aggregate(len(candidates), comparisons, cfg.default_score)
        extra = adjustments(
            result.rewards, [c.answer for c in candidates], [c.reasoning for c in candidates],
            reasoning_bonus=cfg.reasoning_bonus, answer_bonus=cfg.answer_bonus, top_percentile=cfg.top_percentile,
            reasoning_length_coeff=cfg.group_reasoning_length_penalty_coeff,
            answer_length_coeff=cfg.group_answer_length_penalty_coeff, style_coeff=cfg.group_style_penalty_coeff,
        )  # fmt: skip
        return result, extra

    # --- /compare ---

    async def compare(self, body: CompareRequest) -> CompareResponse:
        """Every comparison of the batch (``comparison_strategy``, ``num_judges_per_comparison``), then
        the aggregated rewards, in the order of ``response_objs``."""
        conversation = _conversation(decode_create_params({"input": body.conversation_history}).input)
        candidates = [Candidate(answer_text(r), reasoning_text(r)) for r in body.response_objs]
        principle = self._principle(body.principle)
        pairs = comparison_pairs(
            len(candidates), self.config.comparison_strategy, self.config.num_judges_per_comparison
        )
        comparisons = list(await asyncio.gather(*(
            self._compare(conversation, candidates[i], candidates[j], principle, i, j, k) for i, j, k in pairs
        )))  # fmt: skip
        self._count(comparisons)
        result, extra = await asyncio.to_thread(self._rewards, candidates, comparisons)
        return CompareResponse(
            rewards=[result.rewards[n] + extra.total(n) for n in range(len(candidates))],
            comparison_results=[c.record() for c in comparisons],
            metrics=result.metrics(),
        )

    # --- /verify, in cohorts ---

    async def verify(self, session: Session, body: GenrmCompareVerifyRequest) -> GenrmCompareVerifyResponse:
        cfg = self.config
        if cfg.num_rollouts_per_prompt <= 1:
            return GenrmCompareVerifyResponse(reward=cfg.default_score, base_reward=cfg.default_score)
        key = cohort_key(body)
        cohort = self.cohorts.get(key)
        if cohort is None:
            if len(self.cohorts) >= cfg.max_open_cohorts:
                raise CohortsFull(f"{self.name}: {len(self.cohorts)} cohorts are waiting already (max_open_cohorts)")
            cohort = Cohort(key, _conversation(body.responses_create_params.input), self._principle(body.principle))
            cohort.timer = asyncio.get_running_loop().call_later(
                cfg.cohort_timeout_s, self._time_out, cohort, context=contextvars.Context()
            )
            self.cohorts[key] = cohort
        index = len(cohort.candidates)
        cohort.candidates.append(Candidate(answer_text(body.response), reasoning_text(body.response)))
        # The comparisons this arrival makes possible: both of their responses are here now.
        for i, j, k in comparison_pairs(
            cfg.num_rollouts_per_prompt, cfg.comparison_strategy, cfg.num_judges_per_comparison
        ):
            if max(i, j) == index:
                self._start_comparison(cohort, i, j, k)
        if len(cohort.candidates) == cfg.num_rollouts_per_prompt:
            cohort.complete = True
            self._close(cohort)
        # Shielded: a caller that gives up (its deadline) leaves the cohort to the others.
        verdicts = await asyncio.shield(cohort.done)
        if verdicts is None:
            raise CohortTimeout(
                f"{self.name}: cohort {key[:80]} had {len(cohort.candidates)} of {cfg.num_rollouts_per_prompt} rollouts "
                f"after cohort_timeout_s ({cfg.cohort_timeout_s:g} s); cohort_timeout_action is fail"
            )
        return verdicts[index]

    def _start_comparison(self, cohort: Cohort, i: int, j: int, k: int) -> None:
        if (i, j, k) in cohort.comparisons:
            return
        first, second = cohort.candidates[i], cohort.candidates[j]
        cohort.comparisons[(i, j, k)] = self._in_background(
            self._compare(cohort.conversation, first, second, cohort.principle, i, j, k)
        )

    def _in_background(self, coro: Any) -> asyncio.Task[Any]:
        """A task of the cohort, not of the verify that started it: in a context of its own, so that
        no one caller's deadline (gym-core's REQUEST_DEADLINE) cuts short what every waiter needs."""
        task = asyncio.create_task(coro, context=contextvars.Context())
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    def _time_out(self, cohort: Cohort) -> None:
        if not cohort.closed:
            self.log.info(
                "cohort %s timed out with %d of %d rollouts",
                cohort.key[:80],
                len(cohort.candidates),
                self.config.num_rollouts_per_prompt,
            )
            self._close(cohort)

    def _close(self, cohort: Cohort) -> None:
        """No more arrivals: drop the cohort from the open ones and decide it in the background."""
        cohort.closed = True
        if cohort.timer is not None:
            cohort.timer.cancel()
        if self.cohorts.get(cohort.key) is cohort:
            del self.cohorts[cohort.key]
        self._in_background(self._decide(cohort))

    async def _decide(self, cohort: Cohort) -> None:
        try:
            verdicts = await self._verdicts(cohort)
        except asyncio.CancelledError:  # the server is stopping
            cohort.done.cancel()
            raise
        except Exception as exc:  # a bug: every waiting verify answers 500 (the traceback in this log)
            self.log.exception("deciding cohort %s failed", cohort.key[:80])
            cohort.done.set_exception(exc)
            return
        cohort.done.set_result(verdicts)

    async def _verdicts(self, cohort: Cohort) -> list[GenrmCompareVerifyResponse] | None:
        cfg = self.config
        n = len(cohort.candidates)
        if not cohort.complete and cfg.cohort_timeout_action == "fail":
            for task in cohort.comparisons.values():
                task.cancel()
            return None
        # A cohort cut short is compared as a group of the n that arrived: the pairs of n.
        wanted = comparison_pairs(n, cfg.comparison_strategy, cfg.num_judges_per_comparison)
        for pair in set(cohort.comparisons) - set(wanted):
            cohort.comparisons.pop(pair).cancel()
        for i, j, k in wanted:
            self._start_comparison(cohort, i, j, k)
        comparisons = list(await asyncio.gather(*(cohort.comparisons[pair] for pair in wanted)))
        self._count(comparisons)
        result, extra = await asyncio.to_thread(self._rewards, cohort.candidates, comparisons)
        metrics: dict[str, Any] = result.metrics() if comparisons else {}
        verdicts = []
        for index in range(n):
            mine = [c for c in comparisons if index in (c.i, c.j)]
            verdicts.append(GenrmCompareVerifyResponse(
                reward=result.rewards[index] + extra.total(index),
                base_reward=result.rewards[index],
                adjustments=extra.of(index),
                genrm_scores=result.scores[index],
                num_comparisons=len(mine),
                num_default_comparisons=sum(1 for c in mine if not c.parsed),
                cohort_size=n,
                cohort_index=index,
                cohort_complete=cohort.complete,
                **metrics,
            ))  # fmt: skip
        return verdicts
