"""The arithmetic of pairwise GenRM comparison (environments spec §22, agents_models spec §3.7): pure
functions, no I/O.

- :func:`comparison_pairs`: which responses are compared (``circular`` or ``all_pairs``, repeated).
- :func:`parse_verdict`: the ``{score_1, score_2, ranking}`` in a GenRM's reply text (the last one in
  guarded verdict mode, the reference's first fenced one in reference mode).
- :data:`GENRM_LABELS`: what :func:`gym_core.judge.neutralise` makes inert in the responses compared.
- :func:`aggregate`: the ``simple_tiebreaker`` rewards of a group and its metrics.
- :func:`adjustments`: the optional bonuses and group penalties (length, style).
- :func:`answer_text`, :func:`reasoning_text`: what of a policy response is judged and measured.
"""

from __future__ import annotations

import json
import math
import re
import statistics
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from gym_core.judge import GUARDED, REFERENCE, VerdictMode, outside_data
from gym_core.schemas import Reasoning, Response, output_text

__all__ = [
    "GENRM_LABELS",
    "VERDICT_KEYS",
    "Verdict",
    "Comparison",
    "Aggregate",
    "Adjustments",
    "comparison_pairs",
    "json_fences",
    "last_verdict_object",
    "top_level_objects",
    "parse_verdict",
    "aggregate",
    "adjustments",
    "shortest_bonus",
    "group_length_adjustment",
    "style_density",
    "answer_text",
    "reasoning_text",
]

VERDICT_KEYS = ("score_1", "score_2", "ranking")
#: Look-alikes neutralised in the responses a GenRM compares (guarded mode): the verdict's keys as JSON
#: writes them, and the section headers of genrm_model's text rendering.
GENRM_LABELS = (
    *(f'"{key}"' for key in VERDICT_KEYS),
    "[Conversation]",
    "[Response 1]",
    "[Response 2]",
    "[Principle]",
)
Strategy = Literal["circular", "all_pairs"]


@dataclass(frozen=True)
class Verdict:
    score_1: float
    score_2: float
    ranking: float


@dataclass
class Comparison:
    """One GenRM call's outcome: response ``i`` shown as response_1, ``j`` as response_2."""

    i: int
    j: int
    judge: int  # which of the num_judges_per_comparison repeats
    score_1: float
    score_2: float
    ranking: float
    parsed: bool  # False: the neutral defaults (unparseable after the retries, or the call failed)
    attempts: int = 1
    error: str | None = None

    def record(self) -> dict[str, Any]:
        record = {
            "response_1": self.i,
            "response_2": self.j,
            "judge": self.judge,
            "score_1": self.score_1,
            "score_2": self.score_2,
            "ranking": self.ranking,
            "parsed": self.parsed,
            "attempts": self.attempts,
        }
        if self.error is not None:
            record["error"] = self.error
        return record


# --- pairs -----------------------------------------------------------------------------------------


def comparison_pairs(n: int, strategy: Strategy, judges: int = 1) -> list[tuple[int, int, int]]:
    """``(i, j, judge)`` for every comparison of ``n`` responses: ``circular`` gives ``(i, (i+1) mod n)``
    for every i (two responses: both orders), ``all_pairs`` every ``i < j``; each ``judges`` times.
    Fewer than two responses: none."""
    if n < 2:
        return []
    if strategy == "circular":
        pairs = [(i, (i + 1) % n) for i in range(n)]
    else:
        pairs = [(i, j) for i in range(n) for j in range(i + 1, n)]
    return [(i, j, k) for i, j in pairs for k in range(judges)]


# --- parsing the GenRM's reply ----------------------------------------------------------------------

_FENCE_OPEN = re.compile(r"```[ \t]*json", re.IGNORECASE)


def json_fences(text: str) -> Iterator[str]:
    """The bodies of the Markdown code fences tagged ``json`` (any case), in order; linear in the text."""
    position = 0
    while (opening := _FENCE_OPEN.search(text, position)) is not None:
        start = opening.end()
        end = text.find("```", start)
        if end < 0:
            return  # no closing fence after this one: none after a later one either
        yield text[start:end]
        position = end + 3


def top_level_objects(text: str) -> list[dict[str, Any]]:
    """The JSON objects of ``text`` that no other balanced ``{...}`` encloses, in order, parsed
    (spans that are not valid JSON objects are skipped).

    Braces are matched in one pass that respects JSON strings and their escapes inside braces; an
    opening brace that never closes (prose, say) does not hide the complete objects after it.
    """
    spans: list[tuple[int, int]] = []
    opened: list[int] = []
    in_string = escaped = False
    for index, char in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == "{":
            opened.append(index)
        elif char == "}":
            if opened:
                spans.append((opened.pop(), index + 1))
        elif char == '"' and opened:
            in_string = True
    objects = []
    covered_to = -1
    for start, end in sorted(spans):
        if start < covered_to:
            continue  # inside an enclosing balanced span
        covered_to = end
        try:
            value = json.loads(text[start:end])
        except ValueError:
            continue
        if isinstance(value, dict):
            objects.append(value)
    return objects


def _verdict_fields(obj: dict[str, Any]) -> dict[str, Any] | None:
    """The object holding the verdict keys: an ``overall`` sub-object that has any, else the object
    itself if it has any; None when neither does."""
    overall = obj.get("overall")
    if isinstance(overall, dict) and any(key in overall for key in VERDICT_KEYS):
        return overall
    if any(key in obj for key in VERDICT_KEYS):
        return obj
    return None


def _number(value: Any, default: float) -> float:
    if isinstance(value, bool):
        return default
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            return default
    if isinstance(value, (int, float)) and math.isfinite(value):
        return float(value)
    return default


_OBJECT_START = re.compile(r'\{\s*"')
_LAST_CLOSINGS = 16  # closing braces tried, from the end
_STARTS_PER_CLOSING = 64  # object starts tried for each, nearest first


def last_verdict_object(text: str) -> dict[str, Any] | None:
    """The verdict fields of the last JSON object of ``text`` that holds any (``overall`` unwrapped).

    Found from the end: for each of the last closing braces, the object that ends there, decoded
    from its own opening brace; so no text before it (a quoted response with an unbalanced quote or
    brace, say) changes how it is read. Bounded: the last ``16`` closing braces, ``64`` starts each.
    """
    decoder = json.JSONDecoder()
    starts = [m.start() for m in _OBJECT_START.finditer(text)]
    closings = [i for i, char in enumerate(text) if char == "}"][-_LAST_CLOSINGS:]
    for end in reversed(closings):
        before = [s for s in starts if s < end][-_STARTS_PER_CLOSING:]
        for start in reversed(before):
            try:
                value, stop = decoder.raw_decode(text, start)
            except ValueError:
                continue
            if stop == end + 1:  # the one object closing here (JSON objects never share a closing brace)
                fields = _verdict_fields(value) if isinstance(value, dict) else None
                if fields is not None:
                    return fields
                break
    return None


def parse_verdict(
    text: str, default_score: float = 3.0, default_ranking: float = 3.5, mode: VerdictMode = GUARDED
) -> Verdict | None:
    """The verdict in a GenRM's reply, or None when there is none.

    Guarded (the default): the *last* object holding any of ``score_1``/``score_2``/``ranking``
    outside the data regions the GenRM echoed (:func:`gym_core.judge.outside_data`), fenced or not,
    found from the end (:func:`last_verdict_object`): a GenRM that quotes a response holding a forged
    verdict (or an unbalanced quote that would derail a scan from the start) gives its own after the
    quote. Reference
    (gameable): the first such object inside a ```` ```json ```` fence; otherwise the last one of the
    whole text. ``{"overall": {...}}`` is unwrapped; a missing (or non-numeric) key takes
    ``default_score``/``default_ranking``.
    """
    found = None
    if mode == REFERENCE:
        for body in json_fences(text):
            found = next((f for obj in top_level_objects(body) if (f := _verdict_fields(obj)) is not None), None)
            if found is not None:
                break
        if found is None:
            candidates = [f for obj in top_level_objects(text) if (f := _verdict_fields(obj)) is not None]
            found = candidates[-1] if candidates else None
    else:
        found = last_verdict_object(outside_data(text))
    if found is None:
        return None
    return Verdict(
        _number(found.get("score_1"), default_score),
        _number(found.get("score_2"), default_score),
        _number(found.get("ranking"), default_ranking),
    )


# --- aggregation --------------------------------------------------------------------------------------


@dataclass
class Aggregate:
    """The ``simple_tiebreaker`` result of a group: base rewards and the comparison metrics."""

    rewards: list[float]
    scores: list[list[float]]  # the scores each response received, after the tiebreak
    tiebreaks: int
    comparisons: int

    @property
    def individual_scores(self) -> list[float]:
        return [score for received in self.scores for score in received]

    def metrics(self) -> dict[str, float]:
        """``mean_individual_score``, ``std_individual_score`` (population; 0 with fewer than two)
        over every score given, and ``tiebreak_usage_rate`` (ties / comparisons; 0 without any)."""
        scores = self.individual_scores
        return {
            "mean_individual_score": statistics.fmean(scores) if scores else 0.0,
            "std_individual_score": statistics.pstdev(scores) if len(scores) > 1 else 0.0,
            "tiebreak_usage_rate": self.tiebreaks / self.comparisons if self.comparisons else 0.0,
        }


def aggregate(n: int, comparisons: Sequence[Comparison], default_score: float = 3.0) -> Aggregate:
    """``simple_tiebreaker``: when a comparison's two scores are equal, ``adj = 3.5 - ranking`` goes to
    response_1 and is taken from response_2; a response's reward is the mean of the scores it
    received, ``default_score`` when it was never compared."""
    scores: list[list[float]] = [[] for _ in range(n)]
    tiebreaks = 0
    for c in comparisons:
        score_1, score_2 = c.score_1, c.score_2
        if score_1 == score_2:
            adj = 3.5 - c.ranking
            score_1 += adj
            score_2 -= adj
            tiebreaks += 1
        scores[c.i].append(score_1)
        scores[c.j].append(score_2)
    rewards = [statistics.fmean(received) if received else default_score for received in scores]
    return Aggregate(rewards, scores, tiebreaks, len(comparisons))


# --- adjustments ----------------------------------------------------------------------------------------


@dataclass
class Adjustments:
    """What the optional adjustments add to each base reward (all zero by default)."""

    reasoning_bonus: list[float] = field(default_factory=list)
    answer_bonus: list[float] = field(default_factory=list)
    reasoning_length: list[float] = field(default_factory=list)
    answer_length: list[float] = field(default_factory=list)
    style: list[float] = field(default_factory=list)

    def total(self, index: int) -> float:
        return sum(
            part[index]
            for part in (self.reasoning_bonus, self.answer_bonus, self.reasoning_length, self.answer_length, self.style)
        )

    def of(self, index: int) -> dict[str, float]:
        """The non-zero adjustments of one response, by name."""
        named = {
            "reasoning_bonus": self.reasoning_bonus,
            "answer_bonus": self.answer_bonus,
            "reasoning_length": self.reasoning_length,
            "answer_length": self.answer_length,
            "style": self.style,
        }
        return {name: values[index] for name, values in named.items() if values[index]}


def shortest_bonus(base: Sequence[float], texts: Sequence[str], bonus: float, top_percentile: float) -> list[float]:
    """``bonus`` for the shortest non-empty text (the first of equals) when its base reward is among
    the top ``top_percentile`` of the group (the ``ceil(top_percentile * n)`` best, at least one, ties
    included); zero for every other."""
    adjustment = [0.0] * len(base)
    candidates = [i for i, text in enumerate(texts) if text]
    if not bonus or not candidates:
        return adjustment
    shortest = min(candidates, key=lambda i: (len(texts[i]), i))
    top = max(1, math.ceil(top_percentile * len(base)))
    threshold = sorted(base, reverse=True)[min(top, len(base)) - 1]
    if base[shortest] >= threshold:
        adjustment[shortest] = bonus
    return adjustment


def group_length_adjustment(lengths: Sequence[int], coeff: float) -> list[float]:
    """Zero-centred length adjustment: raw weight ``1 - (len - min) / (max - min)`` (the shortest 1,
    the longest 0), minus the group's mean weight, times ``coeff``; all zero when lengths are equal."""
    if not coeff or len(lengths) < 2:
        return [0.0] * len(lengths)
    low, high = min(lengths), max(lengths)
    if high == low:
        return [0.0] * len(lengths)
    weights = [1 - (length - low) / (high - low) for length in lengths]
    mean = statistics.fmean(weights)
    return [coeff * (weight - mean) for weight in weights]


_CODE_BLOCK = re.compile(r"```.*?(?:```|\Z)", re.DOTALL)
_HEADER = re.compile(r"^[ \t]{0,3}#{1,6}[ \t]", re.MULTILINE)
_LIST_ITEM = re.compile(r"^[ \t]*(?:[-*+]|\d{1,9}[.)])[ \t]+", re.MULTILINE)
_BOLD = re.compile(r"\*\*[^*\n]+\*\*|__[^_\n]+__")
_EMOJI = re.compile("[\U0001f300-\U0001faff\U0001f000-\U0001f2ff\u2600-\u27bf\u2b50\u2b55]")


def style_density(text: str) -> float:
    """Markdown headers, list items, bold spans and emoji per character, code blocks left out (0 for
    an empty text)."""
    prose = _CODE_BLOCK.sub("", text)
    if not prose:
        return 0.0
    marks = len(_HEADER.findall(prose)) + len(_LIST_ITEM.findall(prose)) + len(_BOLD.findall(prose))
    marks += len(_EMOJI.findall(prose))
    return marks / len(prose)


def adjustments(
    base: Sequence[float],
    answers: Sequence[str],
    reasonings: Sequence[str],
    *,
    reasoning_bonus: float = 0.0,
    answer_bonus: float = 0.0,
    top_percentile: float = 0.2,
    reasoning_length_coeff: float = 0.0,
    answer_length_coeff: float = 0.0,
    style_coeff: float = 0.0,
) -> Adjustments:
    """The optional adjustments of a group: shortest-reasoning and shortest-answer bonuses, zero-centred
    length adjustments, and a zero-centred style penalty (``-style_coeff * (density - mean density)``)."""
    n = len(base)
    if style_coeff and n:
        densities = [style_density(answer) for answer in answers]
        mean = statistics.fmean(densities)
        style = [-style_coeff * (density - mean) for density in densities]
    else:
        style = [0.0] * n
    return Adjustments(
        reasoning_bonus=shortest_bonus(base, reasonings, reasoning_bonus, top_percentile),
        answer_bonus=shortest_bonus(base, answers, answer_bonus, top_percentile),
        reasoning_length=group_length_adjustment([len(r) for r in reasonings], reasoning_length_coeff),
        answer_length=group_length_adjustment([len(a) for a in answers], answer_length_coeff),
        style=style,
    )


# --- what is judged ----------------------------------------------------------------------------------


def answer_text(response: Response) -> str:
    """The policy's final answer: OUTPUT_TEXT of its response ("" when it has none)."""
    return output_text(response)


def reasoning_text(response: Response) -> str:
    """The text of the response's reasoning items (summaries, else their content), joined by newlines."""
    texts = []
    for item in response.output:
        if isinstance(item, Reasoning):
            texts.extend(s.text for s in item.summary)
            if not item.summary:
                texts.extend(c.text for c in item.content or [])
    return "\n".join(t for t in texts if t)
