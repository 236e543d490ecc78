"""Grading a free-form answer against a reference string: extraction, then exact or lenient comparison.

Pure functions of strings (standard library only), so that they run the same in the server process
and in a :class:`gym_core.workers.WorkerPool` worker. The behaviour follows §4 of the environment
spec, quirks included (they are listed in the package README).

Public API:

- :func:`extract_answer` (and one function per mode: :func:`extract_boxed`,
  :func:`extract_final_answer`, :func:`extract_last_line`, :func:`extract_full_response`): the
  candidate answer in a model's text, or None;
- :func:`lenient_match`: the lenient grading of two answers, ``(reward, stage)``;
- :func:`grade`: extraction plus grading of one response, a :class:`Grade`;
- the normalisation stages, each a ``str -> str`` function: :func:`preprocess`,
  :func:`float_form`, :func:`remove_thousands_separators`, :func:`strip_latex`,
  :func:`normalize_list`, :func:`replace_us_states`, :func:`map_unicode_math`,
  :func:`delete_units`; and :func:`soft_numeric_score`.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

__all__ = [
    "EXTRACTION_MODES",
    "NEAR_MATCH_REWARD",
    "Grade",
    "grade",
    "extract_answer",
    "boxed_answers",
    "extract_boxed",
    "extract_final_answer",
    "extract_last_line",
    "extract_full_response",
    "lenient_match",
    "preprocess",
    "float_form",
    "remove_thousands_separators",
    "strip_latex",
    "normalize_list",
    "replace_us_states",
    "map_unicode_math",
    "delete_units",
    "soft_numeric_score",
]

EXTRACTION_MODES = ("boxed", "final_answer", "last_line", "full_response")

# The reward of an answer that is only numerically close (or equal only once units are dropped).
NEAR_MATCH_REWARD = 0.98


# --------------------------------------------------------------------------------------------
# Extraction
# --------------------------------------------------------------------------------------------

_BOXED_OPENER = "\\boxed{"
_TEXT_WRAPPER_RE = re.compile(r"\\text\{\s*(.*?)\s*\}", re.DOTALL)
_FINAL_ANSWER_RE = re.compile(r"(?:final\s+answer|answer)\s*[:：]\s*(.+)", re.IGNORECASE)
_TRAILING_PERIOD_RE = re.compile(r"\.\s*$")


def _matching_braces(text: str) -> dict[int, int]:
    """For each ``{`` that gets closed, the index of its ``}``: plain counting, no escapes."""
    stack: list[int] = []
    closes: dict[int, int] = {}
    for index, char in enumerate(text):
        if char == "{":
            stack.append(index)
        elif char == "}" and stack:
            closes[stack.pop()] = index
    return closes


def extract_boxed(text: str) -> str | None:
    """The stripped content of the last ``\\boxed{`` that closes, ``\\text{}`` wrappers removed.

    Braces are counted from the opener (``\\{`` counts like ``{``); a box that never closes is
    skipped for the one before it. While the whole answer is one ``\\text{...}`` (a full match of
    ``\\text\\{\\s*(.*?)\\s*\\}``), it is replaced by its content. Returns None when no box closes
    or the content is empty.
    """
    if _BOXED_OPENER not in text:
        return None
    closes = _matching_braces(text)
    position = text.rfind(_BOXED_OPENER)
    while position != -1:
        brace = position + len(_BOXED_OPENER) - 1
        if brace in closes:
            answer = text[brace + 1 : closes[brace]].strip()
            while (wrapped := _TEXT_WRAPPER_RE.fullmatch(answer)) is not None:
                answer = wrapped.group(1).strip()
            return answer or None
        position = text.rfind(_BOXED_OPENER, 0, position)
    return None


def boxed_answers(text: str) -> list[str]:
    """The stripped content of every ``\\boxed{`` that closes, in order (nested ones too)."""
    closes = _matching_braces(text)
    answers = []
    position = text.find(_BOXED_OPENER)
    while position != -1:
        brace = position + len(_BOXED_OPENER) - 1
        if brace in closes:
            answers.append(text[brace + 1 : closes[brace]].strip())
        position = text.find(_BOXED_OPENER, position + 1)
    return answers


def several_answers(text: str, mode: str) -> bool:
    """Whether the answer hedges: boxes decide it (``boxed``, or ``final_answer`` with no
    ``answer:`` line) and two of them say different things once normalised (``\\boxed{0} \\boxed{12}``).
    The same answer boxed twice, or a box inside another, is one answer."""
    if mode not in ("boxed", "final_answer") or (mode == "final_answer" and _FINAL_ANSWER_RE.search(text)):
        return False
    forms = {_final_form(preprocess(answer)) for answer in boxed_answers(text) if answer}
    return len(forms) > 1


def extract_final_answer(text: str) -> str | None:
    """The rest of the line after the last ``answer:`` or ``final answer:`` (any case, ``:`` or
    ``：``), stripped, trailing full stops removed; the boxed answer when there is no such line."""
    last = None
    for match in _FINAL_ANSWER_RE.finditer(text):
        last = match
    if last is None:
        return extract_boxed(text)
    answer = last.group(1).strip()
    period = _TRAILING_PERIOD_RE.search(answer)
    if period is not None:
        answer = answer[: period.start()]
    return answer.rstrip(".") or None


def extract_last_line(text: str) -> str | None:
    """The last line that is not blank, stripped."""
    for line in reversed(text.splitlines()):
        if line.strip():
            return line.strip()
    return None


def extract_full_response(text: str) -> str | None:
    """The whole text, stripped; None when it is empty."""
    return text.strip() or None


_EXTRACTORS = {
    "boxed": extract_boxed,
    "final_answer": extract_final_answer,
    "last_line": extract_last_line,
    "full_response": extract_full_response,
}


def extract_answer(text: str, mode: str = "final_answer") -> str | None:
    """The candidate answer of ``text`` by extraction ``mode`` (one of :data:`EXTRACTION_MODES`);
    None when there is none (an empty answer counts as none). Raises ValueError on an unknown mode."""
    try:
        extractor = _EXTRACTORS[mode]
    except KeyError:
        raise ValueError(f"unknown extraction mode {mode!r}; expected one of {', '.join(EXTRACTION_MODES)}") from None
    return extractor(text)


# --------------------------------------------------------------------------------------------
# Normalisation stages (each str -> str)
# --------------------------------------------------------------------------------------------

_WHITESPACE_RE = re.compile(r"\s+")


def _collapse_whitespace(s: str) -> str:
    return _WHITESPACE_RE.sub(" ", s).strip()


def preprocess(s: str) -> str:
    """NFKC, one pair of matching surrounding quotes removed, lowercase, trailing ``.!?`` removed
    (unless nothing would be left)."""
    s = unicodedata.normalize("NFKC", s)
    if len(s) >= 2 and s[0] == s[-1] and s[0] in "\"'":
        s = s[1:-1]
    s = s.lower()
    return s.rstrip(".!?") or s


def float_form(s: str) -> str:
    """``s`` without ``\\%``, ``\\$`` and ``$``, as Python prints it as a float (``"80"`` →
    ``"80.0"``); ``s`` unchanged when that is not a number."""
    bare = s.replace("\\%", "").replace("\\$", "").replace("$", "").strip()
    try:
        return str(float(bare))
    except (ValueError, OverflowError):
        return s


_THOUSANDS_RE = re.compile(r"(\d+),(\d+)")


def remove_thousands_separators(s: str) -> str:
    """``(\\d+),(\\d+)`` → ``\\1\\2`` in one pass (so ``1,234,567`` → ``1234,567``), ``\\%`` → ``%``."""
    return _THOUSANDS_RE.sub(r"\1\2", s).replace("\\%", "%")


_LATEX_WRAPPERS = (
    "boxed", "text", "textbf", "textit", "texttt", "mathrm", "mathbf",
    "mathit", "mathsf", "mathbb", "mathcal", "emph", "url",
)  # fmt: skip
_LATEX_WRAPPER_RE = re.compile(r"\\(?:" + "|".join(_LATEX_WRAPPERS) + r")\{")
_MATH_DELIMITERS_RE = re.compile(r"\\[()\[\]]|\$")


def strip_latex(s: str) -> str:
    """``\\text{x}``, ``\\boxed{x}``... (see ``_LATEX_WRAPPERS``) replaced by ``x`` (brace-balanced;
    an unclosed one is left as it is), ``\\(``, ``\\)``, ``\\[``, ``\\]`` and ``$`` deleted,
    whitespace collapsed."""
    position = 0
    closes: dict[int, int] | None = None  # brace matching of the current s, recomputed after each removal
    while (opener := _LATEX_WRAPPER_RE.search(s, position)) is not None:
        if closes is None:
            closes = _matching_braces(s)
        brace = opener.end() - 1
        if brace not in closes:
            position = opener.end()
            continue
        close = closes[brace]
        s = s[: opener.start()] + s[brace + 1 : close] + s[close + 1 :]
        closes = None
        position = opener.start()  # the content may start with another wrapper
    return _collapse_whitespace(_MATH_DELIMITERS_RE.sub("", s))


def normalize_list(s: str) -> str:
    """``,`` and ``;`` and the substrings ``and`` and ``or`` (even inside words) replaced by spaces,
    whitespace collapsed; ``s`` unchanged when that would make it shorter than 0.9 × its length."""
    spaced = s.replace(",", " ").replace(";", " ").replace("and", " ").replace("or", " ")
    if len(spaced) < 0.9 * len(s):
        return s
    return _collapse_whitespace(spaced)


_TWO_WORD_STATES = {
    "district of columbia": "DC", "new hampshire": "NH", "new jersey": "NJ", "new mexico": "NM",
    "new york": "NY", "north carolina": "NC", "north dakota": "ND", "rhode island": "RI",
    "south carolina": "SC", "south dakota": "SD", "west virginia": "WV",
}  # fmt: skip
_ONE_WORD_STATES = {
    "alabama": "AL", "alaska": "AK", "arizona": "AZ", "arkansas": "AR", "california": "CA",
    "colorado": "CO", "connecticut": "CT", "delaware": "DE", "florida": "FL", "georgia": "GA",
    "hawaii": "HI", "idaho": "ID", "illinois": "IL", "indiana": "IN", "iowa": "IA", "kansas": "KS",
    "kentucky": "KY", "louisiana": "LA", "maine": "ME", "maryland": "MD", "massachusetts": "MA",
    "michigan": "MI", "minnesota": "MN", "mississippi": "MS", "missouri": "MO", "montana": "MT",
    "nebraska": "NE", "nevada": "NV", "ohio": "OH", "oklahoma": "OK", "oregon": "OR",
    "pennsylvania": "PA", "tennessee": "TN", "texas": "TX", "utah": "UT", "vermont": "VT",
    "virginia": "VA", "washington": "WA", "wisconsin": "WI", "wyoming": "WY",
}  # fmt: skip
# Longer names first, so that "west virginia" and "arkansas" are replaced before "virginia" and "kansas".
_STATES = (*_TWO_WORD_STATES.items(), *sorted(_ONE_WORD_STATES.items()))


def replace_us_states(s: str) -> str:
    """US state names (lowercase, as substrings) replaced by their upper-case 2-letter codes, then
    :func:`normalize_list`, then lowercase (so the code ``OR`` survives the removal of ``or``)."""
    for name, code in _STATES:
        s = s.replace(name, code)
    return normalize_list(s).lower()


_UNICODE_MATH = str.maketrans(
    {
        "°": "^\\circ", "²": "^2", "³": "^3", "¹": "^1", "√": "\\sqrt", "π": "\\pi",
        "×": "\\times", "÷": "\\div", "±": "\\pm", "∞": "\\infty", "≤": "\\le", "≥": "\\ge",
        "≠": "\\ne", "·": "\\cdot", "−": "-", "–": "-",
        "＋": "+", "－": "-", "＊": "*", "／": "/", "＝": "=", "＜": "<", "＞": ">", "（": "(", "）": ")",
    }
)  # fmt: skip


def map_unicode_math(s: str) -> str:
    """Unicode mathematical characters as LaTeX or ASCII (``°`` → ``^\\circ``, ``√`` → ``\\sqrt``,
    ``π`` → ``\\pi``, ``²`` → ``^2``, ``−`` → ``-``, full-width operators → ASCII)."""
    return s.translate(_UNICODE_MATH)


_UNITS_RE = re.compile(r"\^\{?\\circ\}?|\\circ|°|cm[²³]?|mm|km|m[²³]?|kg")


def delete_units(s: str) -> str:
    """Every match of ``\\^\\{?\\\\circ\\}?|\\\\circ|°|cm[²³]?|mm|km|m[²³]?|kg`` deleted: degrees and a
    few units, and also every bare ``m`` (``"meters"`` → ``"eters"``), as the reference does."""
    return _UNITS_RE.sub("", s)


_SOFT_DELETED = str.maketrans("", "", "$£€%,")


def _soft_number(s: str) -> float:
    s = delete_units(map_unicode_math(s.translate(_SOFT_DELETED)))
    return float(s.replace("\\%", "").replace("\\$", ""))


def soft_numeric_score(predicted: str, expected: str) -> float:
    """``max(0, 1 - |p - g| / max(|g|, 1e-9))²`` for the two answers read as numbers once
    ``$ £ € % ,``, unicode maths and units are removed; 0.0 when either is not a number."""
    try:
        p, g = _soft_number(predicted), _soft_number(expected)
    except (ValueError, OverflowError):
        return 0.0
    try:
        closeness = 1 - abs(p - g) / max(abs(g), 1e-9)
    except OverflowError:
        return 0.0
    # A NaN stays out: max(0.0, nan) is 0.0.
    return max(0.0, closeness) ** 2


def _final_form(s: str) -> str:
    return delete_units(map_unicode_math(strip_latex(s))).strip()


# Stages of lenient grading after plain equality, in order: name and the transform of both sides.
_STAGES = (
    ("float", float_form),
    ("thousands", remove_thousands_separators),
    ("latex", strip_latex),
    ("list", normalize_list),
    ("us_states", replace_us_states),
)


def lenient_match(predicted: str, expected: str) -> tuple[float, str | None]:
    """Lenient grading of ``predicted`` against ``expected``: ``(reward, stage)``.

    Both are preprocessed (:func:`preprocess`), then the first stage that makes them equal decides:
    ``"exact"``, ``"float"``, ``"thousands"``, ``"latex"``, ``"list"``, ``"us_states"`` give 1.0;
    ``"soft_numeric"`` (:func:`soft_numeric_score` > 0.98) gives 0.98; then ``"final"`` (LaTeX,
    unicode maths and units removed, equal) gives 1.0 and ``"final_soft_numeric"`` 0.98. Otherwise
    ``(0.0, None)``.
    """
    p, g = preprocess(predicted), preprocess(expected)
    if p == g:
        return 1.0, "exact"
    for name, transform in _STAGES:
        if transform(p) == transform(g):
            return 1.0, name
    if soft_numeric_score(p, g) > NEAR_MATCH_REWARD:
        return NEAR_MATCH_REWARD, "soft_numeric"
    p, g = _final_form(p), _final_form(g)
    if p == g:
        return 1.0, "final"
    if soft_numeric_score(p, g) > NEAR_MATCH_REWARD:
        return NEAR_MATCH_REWARD, "final_soft_numeric"
    return 0.0, None


# --------------------------------------------------------------------------------------------
# One verdict
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Grade:
    """The verdict on one response.

    ``reason``: ``"match"`` (1.0), ``"near_match"`` (0.98), ``"mismatch"``, ``"no_answer"``
    (nothing extracted) or ``"empty_expected_answer"``; the server adds ``"timeout"`` and
    ``"error"``. ``matched_by``: the stage that matched (see :func:`lenient_match`;
    ``"case_sensitive"`` for an exact comparison), None when nothing did.
    """

    reward: float
    extracted_answer: str | None
    reason: str
    matched_by: str | None = None


def grade(
    text: str,
    expected_answer: str,
    extraction_mode: str = "final_answer",
    case_sensitive: bool = False,
    several: str = "reject",
) -> Grade:
    """Extract the answer of ``text`` and grade it against ``expected_answer``.

    Case-sensitive: 1.0 when both stripped are equal, else 0.0. Otherwise :func:`lenient_match`.
    Nothing extracted, or an empty ``expected_answer``, scores 0.0. With ``several="reject"`` (the
    default) an answer whose boxes differ (:func:`several_answers`) scores 0.0 (reason
    ``several_answers``); ``"reference"`` grades the last box, as the reference does.
    """
    extracted = extract_answer(text, extraction_mode)
    if extracted is None:
        return Grade(0.0, None, "no_answer")
    if several == "reject" and several_answers(text, extraction_mode):
        return Grade(0.0, None, "several_answers")
    if not expected_answer:
        return Grade(0.0, extracted, "empty_expected_answer")
    if case_sensitive:
        if extracted.strip() == expected_answer.strip():
            return Grade(1.0, extracted, "match", "case_sensitive")
        return Grade(0.0, extracted, "mismatch")
    reward, stage = lenient_match(extracted, expected_answer)
    if reward == 1.0:
        return Grade(reward, extracted, "match", stage)
    if reward > 0.0:
        return Grade(reward, extracted, "near_match", stage)
    return Grade(0.0, extracted, "mismatch")
