"""Grading a multiple-choice answer: extract one option letter from the model's text and compare it
with the gold letter (spec §5).

Public API (pure functions, no I/O):

- :func:`output_text` — OUTPUT_TEXT of a response: every ``output_text`` part of every message;
- :func:`allowed_options` — the ``(letter, text)`` pairs of a row's options that count;
- :func:`last_boxed` — the content of the last ``\\boxed{`` (brace counting);
- :func:`extract_with_regexes` — the row's ``template_metadata.output_regex`` extraction;
- :func:`extract_strict_boxed`, :func:`extract_lenient_boxed`, :func:`extract_answer_colon`,
  :func:`extract_answer_colon_md` — the four grading modes;
- :func:`grade` — the whole verdict (:class:`Grade`: reward, extracted letter, reason); module
  level and picklable, so the server can run it in a :class:`gym_core.workers.WorkerPool`.

Reasons: ``"correct"``, ``"wrong"``, ``"empty_response"`` (no output text), ``"no_answer"`` (no
letter extracted), ``"several_answers"`` (boxes naming different options), ``"no_expected_answer"``
(the row has no gold letter); the server adds
``"timeout"`` and ``"error"``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "GRADING_MODES",
    "Grade",
    "OutputRegexError",
    "allowed_options",
    "boxed_contents",
    "extract_answer",
    "extract_answer_colon",
    "extract_answer_colon_md",
    "extract_lenient_boxed",
    "extract_strict_boxed",
    "extract_with_regexes",
    "grade",
    "last_boxed",
    "map_foreign_letters",
    "normalize_gold",
    "normalize_text",
    "output_text",
    "several_answers",
    "unwrap_text",
]

GRADING_MODES = ("strict_single_letter_boxed", "lenient_boxed", "lenient_answer_colon", "lenient_answer_colon_md")
DEFAULT_MODE = "strict_single_letter_boxed"


class OutputRegexError(ValueError):
    """A row's ``output_regex`` has two or more capture groups and matched: the row is malformed
    (the reference crashes with HTTP 500 on it; gym answers 422 naming the field)."""


@dataclass(frozen=True)
class Grade:
    reward: float
    extracted_answer: str | None
    reason: str


# --- text views and small normalisations --------------------------------------------------------


def output_text(response: Any) -> str:
    """OUTPUT_TEXT: the ``text`` of every ``output_text`` part of every message item, concatenated
    with no separator (what the OpenAI SDK's ``Response.output_text`` gives). Reasoning items,
    function calls and refusals are left out. An assistant message whose content is a plain string
    (a lenient form gym accepts) counts as one text part."""
    from gym_core.schemas import Message, OutputText

    texts: list[str] = []
    for item in response.output:
        if not isinstance(item, Message):
            continue
        if isinstance(item.content, str):
            if item.role == "assistant":
                texts.append(item.content)
            continue
        texts.extend(part.text for part in item.content if isinstance(part, OutputText))
    return "".join(texts)


# Letters of other scripts that models write for A-D; each becomes " A".." D" (with the space).
_FOREIGN_LETTERS = str.maketrans(
    {
        "أ": " A", "ب": " B", "ج": " C", "د": " D",  # Arabic
        "অ": " A", "ব": " B", "ড": " C", "ঢ": " D",  # Bengali
        "Ａ": " A", "Ｂ": " B", "Ｃ": " C", "Ｄ": " D",  # full width
    }
)  # fmt: skip


def map_foreign_letters(s: str) -> str:
    """Replace the Arabic, Bengali and full-width letters for A–D with ``" A"``…``" D"``."""
    return s.translate(_FOREIGN_LETTERS)


_WS_RE = re.compile(r"\s+")


def normalize_text(s: str) -> str:
    """Lowercase, collapse whitespace runs to one space, strip: how option texts are compared."""
    return _WS_RE.sub(" ", s.lower()).strip()


_TEXT_WRAPPER_RE = re.compile(r"\\text\{\s*(.*?)\s*\}", re.DOTALL)


def unwrap_text(s: str) -> str:
    """Strip ``s`` and remove whole-string ``\\text{…}`` wrappers, repeatedly. A string that merely
    starts with ``\\text{`` and ends with ``}`` counts as one wrapper (``\\text{A} or \\text{B}``
    gives ``A} or \\text{B``), as in the reference."""
    s = s.strip()
    while (m := _TEXT_WRAPPER_RE.fullmatch(s)) is not None:
        s = m.group(1).strip()
    return s


def allowed_options(options: Sequence[Mapping[str, str | None]] | None) -> list[tuple[str, str]]:
    """The ``(LETTER, text)`` pairs that count, in row order: keys that are one alphabetic
    character (any script) with non-null text; letters uppercased."""
    pairs: list[tuple[str, str]] = []
    for option in options or ():
        for key, text in option.items():
            if len(key) == 1 and key.isalpha() and text is not None:
                pairs.append((key.upper(), text))
    return pairs


def _letter_of_text(candidate: str, options: Sequence[tuple[str, str]]) -> str | None:
    wanted = normalize_text(candidate)
    for letter, text in options:
        if normalize_text(text) == wanted:
            return letter
    return None


# --- template_metadata.output_regex ---------------------------------------------------------------


def extract_with_regexes(
    text: str, patterns: str | Iterable[Any] | None, options: Sequence[tuple[str, str]]
) -> str | None:
    """The row's own extraction: each pattern in order (case-insensitive find-all, last match, its
    one capture group or the whole match), the first that yields a letter wins.

    A capture that is one alphabetic character after normalisation (foreign letters mapped, strip,
    uppercase) is the letter, **even one that is not an option**; otherwise a capture equal to an
    option's text (normalised) gives that option's letter. Invalid patterns, and entries that are
    not strings, are skipped. Raises :class:`OutputRegexError` for a pattern with two or more
    groups that matches.
    """
    if patterns is None:
        return None
    for pattern in [patterns] if isinstance(patterns, str) else patterns:
        if not isinstance(pattern, str):
            continue
        try:
            compiled = re.compile(pattern, re.IGNORECASE)
        except (re.error, RecursionError, OverflowError):
            continue
        matches = compiled.findall(text)
        if not matches:
            continue
        if compiled.groups >= 2:
            raise OutputRegexError(
                f"template_metadata.output_regex {pattern!r} has {compiled.groups} capture groups; it needs at most one"
            )
        candidate = map_foreign_letters(matches[-1]).strip().upper()
        if len(candidate) == 1 and candidate.isalpha():
            return candidate
        letter = _letter_of_text(candidate, options)
        if letter is not None:
            return letter
    return None


# --- the grading modes ----------------------------------------------------------------------------

_BOXED = "\\boxed{"


def last_boxed(text: str) -> str | None:
    """The content of the **last** ``\\boxed{`` in ``text``, its closing brace found by counting
    braces; None when there is no box or the last one never closes (earlier boxes are not tried)."""
    start = text.rfind(_BOXED)
    if start < 0:
        return None
    begin = start + len(_BOXED)
    depth = 1
    for i in range(begin, len(text)):
        char = text[i]
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                return text[begin:i]
    return None


_LONE_LETTER_RE = re.compile(r"^[^A-Za-z]*([A-Z])[^A-Za-z]*$")  # "C", "[C]", "(B)."
_LABEL_LETTER_RE = re.compile(r"^\s*([A-Z])\s*[:).\-]")  # "E: text", "B) ..."


def extract_strict_boxed(text: str, allowed: Iterable[str]) -> str | None:
    """``strict_single_letter_boxed``: an uppercase option letter alone in the last box (non-letter
    padding allowed: ``[C]``, ``(B)``), or leading a label (``E: text``). Lowercase letters and
    letters that are not options give None."""
    content = last_boxed(text)
    if content is None:
        return None
    content = unwrap_text(content)
    m = _LONE_LETTER_RE.match(content) or _LABEL_LETTER_RE.match(content)
    if m is None:
        return None
    letter = m.group(1)
    return letter if letter in set(allowed) else None


def extract_lenient_boxed(text: str, options: Sequence[tuple[str, str]]) -> str | None:
    """``lenient_boxed``: the strict mode, else the option whose text is a substring of the last
    box's content (raw or ``\\text``-unwrapped, normalised), when exactly one letter matches."""
    letter = extract_strict_boxed(text, [letter for letter, _ in options])
    if letter is not None:
        return letter
    content = last_boxed(text)
    if content is None:
        return None
    views = (normalize_text(content), normalize_text(unwrap_text(content)))
    found = {letter for letter, option in options if any(normalize_text(option) in view for view in views)}
    return found.pop() if len(found) == 1 else None


_ANSWER_COLON_RE = re.compile(r"answer\s*:\s*(.+)", re.IGNORECASE)


def extract_answer_colon(text: str, options: Sequence[tuple[str, str]]) -> str | None:
    """``lenient_answer_colon``: the **first** ``Answer: …`` line; an option letter alone (either
    case), else the letter of the option whose text it equals (normalised)."""
    m = _ANSWER_COLON_RE.search(text)
    if m is None:
        return None
    candidate = unwrap_text(m.group(1)).strip()
    if len(candidate) == 1 and candidate.isalpha():
        letter = candidate.upper()
        if letter in {letter for letter, _ in options}:
            return letter
    return _letter_of_text(candidate, options)


_MD_ANSWER_RE = re.compile(r"(?im)[*_]{0,2}Answer[*_]{0,2}\s*:[*_\s]{0,2}(.+)")
_MD_STRIP = "*_` \t\n\r.,;:"
# Two isolated letters in a row, separated by whitespace, "/ | & , ;" or " or " / " and ".
_LETTER_PAIR_RE = re.compile(r"(?<![A-Za-z])([A-Z])(?=(?:\s*[/|&,;]\s*| or | and |\s+)([A-Z])(?![A-Za-z]))")
_LEADING_LETTER_RE = re.compile(r"([A-Za-z])(?![A-Za-z0-9])")
_STANDALONE_UPPER_RE = re.compile(r"\b[A-Z]\b")


def _is_ambiguous_list(candidate: str, allowed: set[str]) -> bool:
    return any(
        a != b and a in allowed and b in allowed for a, b in (m.groups() for m in _LETTER_PAIR_RE.finditer(candidate))
    )


def extract_answer_colon_md(text: str, allowed: Iterable[str]) -> str | None:
    """``lenient_answer_colon_md``: ``Answer:`` lines (markdown emphasis allowed), last first.

    Each candidate is normalised (foreign letters mapped, ``*_`` and punctuation stripped at both
    ends) and skipped when it lists two different option letters (``A or B``, ``A/B``, ``A, B``).
    Its letter is the candidate itself when one character, else a leading letter not followed by a
    letter or digit, else the last standalone uppercase letter; the first candidate whose letter
    is an option wins.
    """
    allowed = set(allowed)
    for raw in reversed(_MD_ANSWER_RE.findall(text)):
        candidate = map_foreign_letters(raw).strip(_MD_STRIP)
        if not candidate or _is_ambiguous_list(candidate, allowed):
            continue
        if len(candidate) == 1:
            letter = candidate.upper()
        elif (m := _LEADING_LETTER_RE.match(candidate)) is not None:
            letter = m.group(1).upper()
        else:
            standalone = _STANDALONE_UPPER_RE.findall(candidate)
            letter = standalone[-1] if standalone else None
        if letter is not None and letter in allowed:
            return letter
    return None


# --- the verdict ----------------------------------------------------------------------------------


def extract_answer(
    text: str,
    options: Sequence[Mapping[str, str | None]] | None,
    grading_mode: str = DEFAULT_MODE,
    output_regex: str | Iterable[Any] | None = None,
) -> str | None:
    """The predicted letter of ``text`` (already stripped): the row's regexes first, then the mode."""
    pairs = allowed_options(options)
    letter = extract_with_regexes(text, output_regex, pairs)
    if letter is not None:
        return letter
    letters = [letter for letter, _ in pairs]
    if grading_mode == "strict_single_letter_boxed":
        return extract_strict_boxed(text, letters)
    if grading_mode == "lenient_boxed":
        return extract_lenient_boxed(text, pairs)
    if grading_mode == "lenient_answer_colon":
        return extract_answer_colon(text, pairs)
    if grading_mode == "lenient_answer_colon_md":
        return extract_answer_colon_md(text, letters)
    raise ValueError(f"unknown grading_mode {grading_mode!r}; one of {', '.join(GRADING_MODES)}")


def normalize_gold(expected_answer: str | None) -> str:
    """The gold letter: ``expected_answer`` stripped and uppercased ("" when missing)."""
    return (expected_answer or "").strip().upper()


def boxed_contents(text: str) -> list[str]:
    """The content of every closed ``\\boxed{`` of ``text``, in order (braces counted)."""
    contents: list[str] = []
    start = text.find(_BOXED)
    while start >= 0:
        begin = start + len(_BOXED)
        depth = 1
        for i in range(begin, len(text)):
            if text[i] == "{":
                depth += 1
            elif text[i] == "}":
                depth -= 1
                if depth == 0:
                    contents.append(text[begin:i])
                    break
        start = text.find(_BOXED, begin)
    return contents


def several_answers(text: str, options: Sequence[Mapping[str, str | None]] | None, grading_mode: str) -> bool:
    """Whether a boxed mode's answer hedges: its boxes name two different options
    (``\\boxed{A} \\boxed{B}``), or one box lists two different option letters (``\\boxed{A, B}``)."""
    if grading_mode not in ("strict_single_letter_boxed", "lenient_boxed"):
        return False
    pairs = allowed_options(options)
    letters = [letter for letter, _ in pairs]
    named: set[str] = set()
    for content in boxed_contents(text):
        if _is_ambiguous_list(map_foreign_letters(unwrap_text(content)), set(letters)):
            return True
        box = _BOXED + content + "}"
        letter = extract_strict_boxed(box, letters) if grading_mode == "strict_single_letter_boxed" else None
        letter = letter or (extract_lenient_boxed(box, pairs) if grading_mode == "lenient_boxed" else None)
        if letter is not None:
            named.add(letter)
    return len(named) > 1


def grade(
    text: str,
    options: Sequence[Mapping[str, str | None]] | None,
    expected_answer: str | None,
    grading_mode: str = DEFAULT_MODE,
    output_regex: str | Iterable[Any] | None = None,
    several: str = "reject",
) -> Grade:
    """Reward 1.0 when the letter extracted from ``text`` (OUTPUT_TEXT) equals the gold letter.

    With ``several="reject"`` (the default), a boxed mode's answer that names several different
    options (:func:`several_answers`) has none (reason ``several_answers``); ``"reference"`` grades
    the last box alone, as the reference does (a hedge over every option then scores).
    Raises :class:`OutputRegexError` for a malformed ``output_regex`` (see there).
    """
    text = text.strip()
    if not text:
        return Grade(0.0, None, "empty_response")
    letter = extract_answer(text, options, grading_mode, output_regex)
    if letter is not None and several == "reject" and several_answers(text, options, grading_mode):
        return Grade(0.0, None, "several_answers")
    if letter is None:
        return Grade(0.0, None, "no_answer")
    gold = normalize_gold(expected_answer)
    if not gold:
        return Grade(0.0, letter, "no_expected_answer")
    return Grade(1.0, letter, "correct") if letter == gold else Grade(0.0, letter, "wrong")
