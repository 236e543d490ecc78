"""The ``multi_step`` resources server: look up the value of each relevant synonym, then submit
the values in order.

The prompt lists term/synonym pairs; the user's question points at one term (the *minefield*:
looking it up instead of its synonyms is the trap). ``get_synonym_value`` gives a synonym's value,
``extract_synonym_values`` takes the final list, and ``verify`` scores the arguments of the last
``extract_synonym_values`` call found in the response (:mod:`gym_multi_step.verify`).

Each rollout's session records the lookups its tools served; ``verify`` reports how many there
were and whether the model looked up the minefield term itself (informational: the reward reads
only the response, as in the reference).
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

import msgspec

from gym_core import ResourcesServer, Session, tool
from gym_core.schemas import SeedSessionRequest, VerifyRequest, VerifyResponse

from gym_multi_step.config import MultiStepConfig
from gym_multi_step.verify import MalformedSubmission, Verdict, last_submission, lax_int, synonym_value, verdict_for

__all__ = ["MultiStepVerifyRequest", "MultiStepVerifyResponse", "MultiStepServer"]

# Submissions up to this size are scored on the event loop (well under a millisecond); larger ones
# in a thread, under the verify_timeout_s limit.
INLINE_ARGUMENT_CHARS = 32_768

# Integer row fields also accept what pydantic's lax mode turns into an int ("7", 7.0, true), as
# the reference's rows do; __post_init__ converts them.
LaxInt = bool | int | float | str


def _row_int(field: str, value: Any) -> int:
    number = lax_int(value)
    if number is None:
        raise ValueError(f"{field} must be an integer, got {value!r}")
    return number


class MultiStepVerifyRequest(VerifyRequest, kw_only=True):
    id: LaxInt
    expected_synonym_values: list[LaxInt]
    expected_synonyms: list[str]
    minefield_label: str
    minefield_label_value: LaxInt

    def __post_init__(self) -> None:
        self.id = _row_int("id", self.id)
        self.minefield_label_value = _row_int("minefield_label_value", self.minefield_label_value)
        self.expected_synonym_values = [
            _row_int(f"expected_synonym_values[{i}]", value) for i, value in enumerate(self.expected_synonym_values)
        ]
        if not self.expected_synonym_values:
            # The reference divides by its length (and fails on every response): a bad row.
            raise ValueError("expected_synonym_values must not be empty")


class MultiStepVerifyResponse(VerifyResponse, kw_only=True):
    parsed_synonym_values: list[int] | None
    accuracy: bool
    set_overlap: float
    original_term_minefield_hit: bool
    order_instruction_following_failure: bool
    num_lookups: int
    minefield_looked_up: bool
    reason: str | None = None  # only when the submission could not be read, or scoring timed out


class MultiStepServer(ResourcesServer):
    config: MultiStepConfig

    @staticmethod
    def _new_state() -> dict[str, Any]:
        return {"lookups": []}  # the synonyms get_synonym_value was asked for, in order

    def _state(self, session: Session) -> dict[str, Any]:
        return self.sessions.get_or_create(session.id, self._new_state)

    async def seed_session(self, session: Session, body: SeedSessionRequest) -> None:
        # The reference's tools are stateless and its seed does nothing; this one starts the
        # rollout's record of lookups afresh.
        self.sessions.set(session.id, self._new_state())

    @tool
    async def get_synonym_value(
        self,
        session: Session,
        synonym: Annotated[str, msgspec.Meta(description="The synonym to get the value for, exactly as listed.")],
    ) -> dict[str, int]:
        """Get the value of a synonym."""
        self._state(session)["lookups"].append(synonym)
        return {"synonym_value": synonym_value(synonym)}

    @tool
    async def extract_synonym_values(
        self,
        synonym_values: Annotated[
            list[int],
            msgspec.Meta(description="The values of the synonyms of the term the user query is about, in list order."),
        ],
    ) -> dict[str, bool]:
        """Submit the synonym values retrieved for the term that is relevant to the user query."""
        return {"success": True}

    async def verify(self, session: Session, body: MultiStepVerifyRequest) -> MultiStepVerifyResponse:
        arguments = last_submission(body.response)
        score = (body.expected_synonym_values, body.minefield_label, body.minefield_label_value, arguments)
        if arguments is None or len(arguments) <= INLINE_ARGUMENT_CHARS:
            verdict = verdict_for(*score)
        else:
            try:
                verdict = await asyncio.wait_for(asyncio.to_thread(verdict_for, *score), self.config.verify_timeout_s)
            except TimeoutError:
                # The thread finishes on its own (parsing and scoring are linear in the arguments).
                self.log.warning(
                    "multi_step: scoring %d characters of arguments took over %.1f s",
                    len(arguments),
                    self.config.verify_timeout_s,
                )
                verdict = Verdict.unreadable("timeout", "scoring timed out")
        if verdict.reason not in (None, "timeout") and self.config.fail_on_malformed_arguments:
            # The reference's behaviour: an unhandled error, HTTP 500, the rollout fails.
            raise MalformedSubmission(verdict.reason, verdict.detail or verdict.reason)
        state = self.sessions.get(session.id) if session.exists else None
        lookups = state["lookups"] if state else []
        return MultiStepVerifyResponse(
            reward=verdict.reward,
            parsed_synonym_values=verdict.parsed_synonym_values,
            accuracy=verdict.accuracy,
            set_overlap=verdict.set_overlap,
            original_term_minefield_hit=verdict.original_term_minefield_hit,
            order_instruction_following_failure=verdict.order_instruction_following_failure,
            num_lookups=len(lookups),
            minefield_looked_up=body.minefield_label in lookups,
            reason=verdict.reason,
        )
