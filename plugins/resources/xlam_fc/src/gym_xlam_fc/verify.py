"""Scoring a model's function calls against a task's expected calls (pure functions, no I/O).

Public API:

- :func:`parse_arguments` — a call's ``arguments`` string as JSON; ``{}`` when it does not parse;
- :func:`predicted_calls` — every ``function_call`` item of a response, in order, as
  ``{"name", "arguments"}`` with the arguments parsed;
- :func:`arguments_match` — does a predicted call carry every expected argument with an equal value;
- :func:`count_correct` — greedy matching of expected calls to predicted ones;
- :func:`score_calls` — the verdict: a :class:`CallScore`.

Equality is Python's ``==`` on parsed JSON, as in the reference: ``1 == 1.0``, ``True == 1``,
lists compare in order, objects regardless of key order, and ``"1" != 1``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gym_core.schemas import Response, function_calls

__all__ = ["CallScore", "parse_arguments", "predicted_calls", "arguments_match", "count_correct", "score_calls"]


def parse_arguments(text: str) -> Any:
    """``text`` parsed as JSON (any JSON value), or ``{}`` when it is not valid JSON.

    Nesting too deep for the parser counts as unparseable too, so no model output makes this raise.
    """
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return {}


def predicted_calls(response: Response) -> list[dict[str, Any]]:
    """Every function call of ``response.output`` (all turns), in order, as ``{"name", "arguments"}``."""
    return [{"name": call.name, "arguments": parse_arguments(call.arguments)} for call in function_calls(response)]


def arguments_match(expected: Mapping[str, Any], predicted: Any) -> bool:
    """``predicted`` holds every key of ``expected`` with an equal value; extra keys are allowed.

    Predicted arguments that are not a JSON object (a list, a number...) have no keys, so they
    match only an expected call without arguments.
    """
    if not expected:
        return True
    if not isinstance(predicted, dict):
        return False
    try:
        return all(key in predicted and predicted[key] == value for key, value in expected.items())
    except RecursionError:  # values nested deeper than Python compares: not provably equal
        return False


def count_correct(expected: Sequence[Mapping[str, Any]], predicted: Sequence[Mapping[str, Any]]) -> int:
    """How many expected calls find a match, greedily in expected order.

    Each expected call takes the first predicted call not taken yet with the same name whose
    arguments match (:func:`arguments_match`); each predicted call is taken at most once.
    """
    used = [False] * len(predicted)
    correct = 0
    for want in expected:
        for index, call in enumerate(predicted):
            if (
                not used[index]
                and call["name"] == want["name"]
                and arguments_match(want["arguments"], call["arguments"])
            ):
                used[index] = True
                correct += 1
                break
    return correct


@dataclass(frozen=True)
class CallScore:
    """The verdict on one response: binary ``reward`` and the counts behind it."""

    reward: float
    num_expected: int
    num_predicted: int
    num_correct: int


def score_calls(expected: Sequence[Mapping[str, Any]], predicted: Sequence[Mapping[str, Any]]) -> CallScore:
    """Reward 1.0 iff every expected call is matched and no other call was made.

    With no expected calls, the reward is 1.0 iff the model made no call at all. ``expected`` and
    ``predicted`` are ``{"name", "arguments"}`` mappings; expected arguments are objects.
    """
    if not expected:
        return CallScore(float(not predicted), 0, len(predicted), 0)
    correct = count_correct(expected, predicted)
    reward = float(correct == len(expected) == len(predicted))
    return CallScore(reward, len(expected), len(predicted), correct)
