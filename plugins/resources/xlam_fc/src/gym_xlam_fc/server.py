"""The ``xlam_fc`` resources server: no tools, a verifier of function calls.

Task rows follow the xLAM function-calling data (Salesforce/xlam-function-calling-60k) as NeMo Gym
serves it: ``responses_create_params`` (the query, with the tool schemas in ``tools``) and
``expected_answers``, the calls the model should make. The tools the row offers are not served
here: the model's calls are only compared with ``expected_answers`` (:mod:`gym_xlam_fc.verify`).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import msgspec

from gym_core import ResourcesServer, Session
from gym_core.schemas import Response, VerifyRequest, VerifyResponse, function_calls

from gym_xlam_fc.config import XlamFcConfig
from gym_xlam_fc.verify import predicted_calls, score_calls

__all__ = ["ExpectedCall", "XlamFcVerifyRequest", "XlamFcVerifyResponse", "XlamFcServer"]

# Responses up to this size are scored on the event loop (well under a millisecond); larger ones in
# a thread, under the verify_timeout_s limit.
INLINE_ARGUMENT_CHARS = 32_768
INLINE_CALLS = 256


class ExpectedCall(msgspec.Struct, kw_only=True):
    """One expected call. ``arguments`` may be an object or a JSON string holding one (missing or
    null: no argument is checked); a string is parsed when the row is decoded."""

    name: str
    arguments: dict[str, Any] | str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.arguments, str):
            try:
                parsed = json.loads(self.arguments)
            except (ValueError, RecursionError) as exc:
                raise ValueError(f"expected call {self.name!r}: arguments is not valid JSON ({exc})") from None
            if not isinstance(parsed, dict):
                raise ValueError(
                    f"expected call {self.name!r}: arguments must be a JSON object, got {type(parsed).__name__}"
                )
            self.arguments = parsed
        elif self.arguments is None:
            self.arguments = {}


class XlamFcVerifyRequest(VerifyRequest, kw_only=True):
    expected_answers: list[ExpectedCall] | None = msgspec.field(default_factory=list)


class XlamFcVerifyResponse(VerifyResponse, kw_only=True):
    num_expected: int
    num_predicted: int
    num_correct: int
    predicted_calls: list[dict[str, Any]]
    reason: str | None = None  # only when no verdict could be reached: "timeout"


def _verdict(expected: list[dict[str, Any]], response: Response) -> XlamFcVerifyResponse:
    predicted = predicted_calls(response)
    score = score_calls(expected, predicted)
    return XlamFcVerifyResponse(
        reward=score.reward,
        num_expected=score.num_expected,
        num_predicted=score.num_predicted,
        num_correct=score.num_correct,
        predicted_calls=predicted,
    )


class XlamFcServer(ResourcesServer):
    config: XlamFcConfig

    async def verify(self, session: Session, body: XlamFcVerifyRequest) -> XlamFcVerifyResponse:
        expected = [{"name": call.name, "arguments": call.arguments} for call in body.expected_answers or []]
        calls = function_calls(body.response)
        if len(calls) <= INLINE_CALLS and sum(len(call.arguments) for call in calls) <= INLINE_ARGUMENT_CHARS:
            return _verdict(expected, body.response)
        try:
            return await asyncio.wait_for(
                asyncio.to_thread(_verdict, expected, body.response), self.config.verify_timeout_s
            )
        except TimeoutError:
            # The thread finishes on its own (parsing and matching are linear in the output).
            self.log.warning("xlam_fc: scoring %d calls took over %.1f s", len(calls), self.config.verify_timeout_s)
            return XlamFcVerifyResponse(
                reward=0.0,
                num_expected=len(expected),
                num_predicted=len(calls),
                num_correct=0,
                predicted_calls=[],
                reason="timeout",
            )
