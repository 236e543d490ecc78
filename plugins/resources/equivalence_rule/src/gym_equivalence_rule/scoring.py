"""Scoring a whole response against a reference string: exact match or difflib similarity.

Public API:

- :data:`GRADING_RULES` — the rule names: ``"exact"``, ``"seq_match"``, ``"weighted_seq_match"``;
- :func:`output_text` — the text a response is graded on (the Responses API's ``output_text``);
- :func:`normalize` — strip, lowercase, and collapse every whitespace run to one space;
- :func:`sequence_ratio` — ``difflib.SequenceMatcher(None, response, answer).ratio()``;
- :func:`weighted_sequence_ratio` — 0.85 × the full ratio + 0.15 × the ratio of the first ten
  characters of the answer with the same length of the response, clamped to [0, 1];
- :func:`score` — normalise both sides and apply a rule.

Scores deliberately come from the standard library's ``difflib`` (no third-party matcher): the
reward must equal the reference implementation's on the same rows, and difflib's results depend
on its own matching heuristics, *autojunk* included: when the answer (difflib's second sequence)
is at least 200 characters long, characters that make up more than 1% of it are "popular" and
never start a match (a match found otherwise may still extend over them). ``"x" + "a" * 300``
against ``"a" * 300`` therefore scores 0.0, not 0.998, and so can a long answer repeated after a
short preamble; :func:`sequence_ratio` keeps that on purpose. Faster matchers (rapidfuzz's
``ratio``, an exact longest-common-subsequence) give different numbers.

difflib is pure Python and quadratic (or worse) in the lengths compared, so the server runs the
similarity rules in a worker process under a time limit; these functions themselves do not time out.
"""

from __future__ import annotations

from difflib import SequenceMatcher
from typing import get_args

from gym_core.schemas import Message, OutputText, Response

from gym_equivalence_rule.config import GradingRule

__all__ = [
    "GRADING_RULES",
    "GradingRule",
    "PREFIX_CHARS",
    "FULL_WEIGHT",
    "PREFIX_WEIGHT",
    "output_text",
    "normalize",
    "sequence_ratio",
    "weighted_sequence_ratio",
    "score",
]

GRADING_RULES: tuple[GradingRule, ...] = get_args(GradingRule)

# weighted_seq_match: how much of the answer's start is compared on its own, and the weights.
PREFIX_CHARS = 10
FULL_WEIGHT = 0.85
PREFIX_WEIGHT = 0.15


def output_text(response: Response) -> str:
    """The ``text`` of every ``output_text`` part of every message item, concatenated in order with
    no separator (what the OpenAI SDK's ``Response.output_text`` gives).

    Reasoning, function calls and their outputs, and refusals are not part of it. An assistant
    message whose content is a plain string (which gym's lenient decoding accepts) counts as one
    ``output_text`` part.
    """
    parts: list[str] = []
    for item in response.output:
        if not isinstance(item, Message):
            continue
        if isinstance(item.content, str):
            if item.role == "assistant":
                parts.append(item.content)
            continue
        parts.extend(part.text for part in item.content if isinstance(part, OutputText))
    return "".join(parts)


def normalize(text: str) -> str:
    """``text`` stripped, lowercased, with every run of whitespace collapsed to one space."""
    # str.split() splits on the same characters as str.strip() and re's \s (str.isspace), so this
    # is strip → lower → re.sub(r"\s+", " ") in one C-level pass.
    return " ".join(text.lower().split())


def sequence_ratio(response: str, answer: str) -> float:
    """``difflib.SequenceMatcher(None, response, answer).ratio()``: 2·M / (|response| + |answer|),
    M the matched characters, with difflib's default autojunk heuristic on the answer; 1.0 for two
    empty strings."""
    return SequenceMatcher(None, response, answer).ratio()


def weighted_sequence_ratio(response: str, answer: str) -> float:
    """0.85 · ratio(response, answer) + 0.15 · ratio(response[:len(p)], p) with p = answer[:10],
    clamped to [0, 1]. Rewards an answer that starts right (MRCR answers begin with a hash that must
    be reproduced) beyond its share of the full similarity."""
    prefix = answer[:PREFIX_CHARS]
    full = sequence_ratio(response, answer)
    start = sequence_ratio(response[: len(prefix)], prefix)
    value = FULL_WEIGHT * full + PREFIX_WEIGHT * start
    return min(1.0, max(0.0, value))


def score(rule: GradingRule, response: str, answer: str) -> float:
    """The score of ``response`` against ``answer`` under ``rule``, both normalised first.

    ``exact``: 1.0 when the normalised strings are equal, else 0.0; ``seq_match``:
    :func:`sequence_ratio`; ``weighted_seq_match``: :func:`weighted_sequence_ratio`.
    Raises ValueError for an unknown rule.
    """
    response, answer = normalize(response), normalize(answer)
    if rule == "exact":
        return 1.0 if response == answer else 0.0
    if rule == "seq_match":
        return sequence_ratio(response, answer)
    if rule == "weighted_seq_match":
        return weighted_sequence_ratio(response, answer)
    raise ValueError(f"unknown grading rule {rule!r}; expected one of {', '.join(GRADING_RULES)}")
