"""The ``equivalence_rule`` resources server: no tools, the whole response compared with a reference.

Task rows: ``responses_create_params`` and ``expected_answer`` (a string); any other key
(``question``, ``dataset``, ``source``, ``hashid``, ``context_length``...) is accepted and ignored
by the verifier (gym's rollout rows keep every task field anyway). ``/verify`` grades the
response's ``output_text`` with the instance's ``grading_rule`` (see :mod:`gym_equivalence_rule.scoring`)
and answers ``reward``, ``equivalence_score`` (the same number) and a ``reason``.

Scoring runs in a :class:`gym_core.workers.WorkerPool` under ``verify_timeout_s``: difflib is pure
Python and can take seconds on long, repetitive texts, which must neither stall the event loop nor
the server. Only an ``exact`` comparison of short texts (a C-speed string equality) runs inline.
"""

from __future__ import annotations

import os

from gym_core import ResourcesServer, Session
from gym_core.schemas import VerifyRequest, VerifyResponse
from gym_core.workers import WorkerError, WorkerPool, WorkerPoolClosed, WorkerTimeout

from gym_equivalence_rule.config import EquivalenceRuleConfig
from gym_equivalence_rule.scoring import output_text, score

__all__ = ["EquivalenceRuleServer", "EquivalenceRuleVerifyRequest", "EquivalenceRuleVerifyResponse", "reason_for"]

# Up to this many characters (response plus answer), an `exact` comparison is cheaper inline than
# a round trip to a worker, and takes well under a millisecond.
INLINE_EXACT_CHARS = 100_000


class EquivalenceRuleVerifyRequest(VerifyRequest, kw_only=True):
    expected_answer: str


class EquivalenceRuleVerifyResponse(VerifyResponse, kw_only=True, omit_defaults=False):
    """``equivalence_score`` equals ``reward``; ``reason`` says how it came about."""

    equivalence_score: float
    reason: str


def reason_for(value: float, response: str, answer: str) -> str:
    """``"match"`` (1.0), ``"partial"`` (between 0 and 1) or ``"no_match"`` (0.0); ``"empty_response"``
    when the response has no text but the answer has (its score is then 0.0 under every rule)."""
    if not response.strip() and answer.strip():
        return "empty_response"
    if value >= 1.0:
        return "match"
    return "partial" if value > 0.0 else "no_match"


class EquivalenceRuleServer(ResourcesServer):
    config: EquivalenceRuleConfig

    async def startup(self) -> None:
        size = self.config.verify_workers or min(4, os.cpu_count() or 1)
        self.pool = WorkerPool(
            size,
            time_limit_s=self.config.verify_timeout_s,
            memory_limit_mb=self.config.verify_memory_limit_mb,
            preload=["gym_equivalence_rule.scoring"],
        )
        if self.config.grading_rule != "exact":
            await self.pool.start()  # every verify needs a worker: have them warm before /ready

    async def shutdown(self) -> None:
        self.pool.close()

    async def verify(self, session: Session, body: EquivalenceRuleVerifyRequest) -> EquivalenceRuleVerifyResponse:
        rule = self.config.grading_rule
        response, answer = output_text(body.response), body.expected_answer
        if rule == "exact" and len(response) + len(answer) <= INLINE_EXACT_CHARS:
            value = score(rule, response, answer)
        else:
            try:
                value = await self.pool.run(score, rule, response, answer)
            except WorkerPoolClosed:
                raise  # the server is shutting down: not a verdict on the response
            except WorkerTimeout:
                return EquivalenceRuleVerifyResponse(reward=0.0, equivalence_score=0.0, reason="timeout")
            except WorkerError as exc:
                self.log.warning("scoring failed (%d response characters): %s", len(response), exc)
                return EquivalenceRuleVerifyResponse(reward=0.0, equivalence_score=0.0, reason="error")
        return EquivalenceRuleVerifyResponse(
            reward=value, equivalence_score=value, reason=reason_for(value, response, answer)
        )
