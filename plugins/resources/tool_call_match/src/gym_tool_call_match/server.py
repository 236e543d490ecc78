"""The ``tool_call_match`` resources server: no tools, a verifier of the model's next step.

A row holds a partial trajectory (``responses_create_params.input``, earlier tool calls and their
results included) and the step the model should take next: one call (``expected_call``), one of
several acceptable calls (``acceptable_calls``), or, in the reference's shape, ``expected_action``
(a ``function_call``, a ``function_call_batch`` of parallel calls, or a ``message`` to the user).
``verify`` compares the function calls of the response with it (:mod:`gym_tool_call_match.match`).
Nothing is executed and no session is used.
"""

from __future__ import annotations

import json
from typing import Any, Literal

import msgspec

from gym_core import ResourcesServer, Session
from gym_core.schemas import VerifyRequest, VerifyResponse, assistant_text, function_calls

from gym_tool_call_match.config import ToolCallMatchConfig
from gym_tool_call_match.match import Call, Rules, Score, parse_arguments, score_calls

__all__ = [
    "ExpectedCall",
    "ExpectedAction",
    "ToolCallMatchVerifyRequest",
    "ToolCallMatchVerifyResponse",
    "ToolCallMatchServer",
]


class ExpectedCall(msgspec.Struct, kw_only=True):
    """One expected call. ``arguments``: an object, or a JSON string holding one; missing or null
    means the call takes no arguments (``{}``)."""

    name: str
    arguments: dict[str, Any] | str | None = None

    def __post_init__(self) -> None:
        self.arguments = _arguments_object(self.arguments, f"expected call {self.name!r}")

    def call(self) -> Call:
        return Call(self.name, self.arguments)


def _arguments_object(arguments: dict[str, Any] | str | None, what: str) -> dict[str, Any]:
    if arguments is None:
        return {}
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except (ValueError, RecursionError) as exc:
            raise ValueError(f"{what}: arguments is not valid JSON ({exc})") from None
        if not isinstance(arguments, dict):
            raise ValueError(f"{what}: arguments must be a JSON object, got {type(arguments).__name__}")
    return arguments


class ExpectedAction(msgspec.Struct, kw_only=True):
    """The reference's shape: ``{"type": "function_call", "name", "arguments"}``,
    ``{"type": "function_call_batch", "calls": [...]}`` or ``{"type": "message", "content"?}``."""

    type: Literal["function_call", "function_call_batch", "message"]
    name: str | None = None
    arguments: dict[str, Any] | str | None = None
    calls: list[ExpectedCall] | None = None
    content: Any = None  # the reference message's text: shown, never compared

    def __post_init__(self) -> None:
        if self.type == "function_call":
            if not self.name:
                raise ValueError("expected_action of type function_call needs a name")
            self.arguments = _arguments_object(self.arguments, f"expected_action {self.name!r}")
        elif self.type == "function_call_batch" and not self.calls:
            raise ValueError("expected_action of type function_call_batch needs a non-empty calls list")


class ToolCallMatchVerifyRequest(VerifyRequest, kw_only=True):
    expected_call: ExpectedCall | None = None
    acceptable_calls: list[ExpectedCall] | None = None
    expected_action: ExpectedAction | None = None

    def __post_init__(self) -> None:
        given = [
            name for name in ("expected_call", "acceptable_calls", "expected_action") if getattr(self, name) is not None
        ]
        if len(given) != 1:
            raise ValueError(
                "a tool_call_match row needs exactly one of expected_call, acceptable_calls, expected_action; "
                f"it has {', '.join(given) or 'none'}"
            )
        if self.acceptable_calls is not None and not self.acceptable_calls:
            raise ValueError("acceptable_calls is empty: list at least one call")

    def alternatives(self) -> list[list[Call]] | None:
        """The acceptable batches of calls (a single call is a batch of one); None: a message is expected."""
        if self.expected_call is not None:
            return [[self.expected_call.call()]]
        if self.acceptable_calls is not None:
            return [[call.call()] for call in self.acceptable_calls]
        action = self.expected_action
        assert action is not None
        if action.type == "message":
            return None
        if action.type == "function_call":
            return [[Call(action.name or "", action.arguments)]]
        return [[call.call() for call in action.calls or []]]


class ToolCallMatchVerifyResponse(VerifyResponse, kw_only=True):
    reason: str
    expected_type: str  # function_call | function_call_batch | message
    expected_calls: list[dict[str, Any]]
    predicted_calls: list[dict[str, Any]]
    num_predicted_calls: int
    name_match: bool
    alternative: int | None = None  # acceptable_calls: the index of the alternative judged
    mismatches: list[str] = msgspec.field(default_factory=list)


class ToolCallMatchServer(ResourcesServer):
    config: ToolCallMatchConfig

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        cfg = self.config
        self.rules = Rules(
            extra_arguments=cfg.extra_arguments,
            ignore_null_arguments=cfg.ignore_null_arguments,
            string_match=cfg.string_match,
            numeric_strings=cfg.numeric_strings,
            number_tolerance=cfg.number_tolerance,
            list_order=cfg.list_order,
        )

    async def verify(self, session: Session, body: ToolCallMatchVerifyRequest) -> ToolCallMatchVerifyResponse:
        predicted = [Call(c.name, *parse_arguments(c.arguments)) for c in function_calls(body.response)]
        shown = [call.as_dict() for call in predicted]
        alternatives = body.alternatives()
        if alternatives is None:  # the right next step is to answer the user, not to call a tool
            reason = "called_a_tool" if predicted else ("match" if assistant_text(body.response) else "no_message")
            return ToolCallMatchVerifyResponse(
                reward=float(reason == "match"),
                reason=reason,
                expected_type="message",
                expected_calls=[],
                predicted_calls=shown,
                num_predicted_calls=len(predicted),
                name_match=not predicted,
            )
        scores = [
            score_calls(alt, predicted, self.rules, partial_credit=self.config.partial_credit) for alt in alternatives
        ]
        # The alternative judged: the best reward, then the most exact matches, then a name match; first on ties.
        best = max(range(len(scores)), key=lambda i: (scores[i].reward, scores[i].matched, scores[i].name_match, -i))
        score: Score = scores[best]
        if body.expected_action is not None:
            expected_type = body.expected_action.type
        else:
            expected_type = "function_call"
        return ToolCallMatchVerifyResponse(
            reward=score.reward,
            reason=score.reason,
            expected_type=expected_type,
            expected_calls=[call.as_dict() for call in alternatives[best]],
            predicted_calls=shown,
            num_predicted_calls=len(predicted),
            name_match=score.name_match,
            alternative=best if body.acceptable_calls is not None else None,
            mismatches=score.differences,
        )
