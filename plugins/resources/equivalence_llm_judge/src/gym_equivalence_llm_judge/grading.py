"""The pure parts of an equivalence_llm_judge verdict (environments spec §17): what the judge is asked
and how its reply is read. No I/O here; the server makes the judge calls.

- :func:`last_user_text`: the text the question is extracted from (:mod:`.extraction`);
- :func:`resolve_expected_answer`: the gold answer (``expected_answer``, else ``metadata.expected_answer``);
- :func:`choose_regex`: which extraction regex applies to a row, and whether the length threshold skips it;
- :func:`judge_prompt`: the filled template;
- :func:`read_verdict`: the verdict and the label that decided it, from the judge reply's last content part
  (in the judge's verdict mode).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from gym_core.judge import GUARDED, VerdictMode, find_label
from gym_core.schemas import last_user_text

__all__ = [
    "RegexChoice",
    "choose_regex",
    "judge_prompt",
    "last_user_text",
    "read_verdict",
    "resolve_expected_answer",
]


def resolve_expected_answer(expected_answer: Any, metadata: Any) -> str:
    """The gold answer: ``expected_answer`` when not empty, else ``metadata["expected_answer"]``,
    else ``""``. Numbers are written as text."""
    if expected_answer is not None and str(expected_answer) != "":
        return str(expected_answer)
    if isinstance(metadata, Mapping):
        fallback = metadata.get("expected_answer")
        if fallback is not None:
            return str(fallback)
    return ""


class RegexChoice(NamedTuple):
    """The regex that extracts the generated answer (None: the whole message), whether it is the
    row's own (``per_row``), and whether the length threshold switched the row's regex off
    (``length_skip``: then the judge is asked once, with no rescue and no swap)."""

    regex: str | None
    per_row: bool
    length_skip: bool


def choose_regex(
    config_regex: str | None,
    template_metadata: Any,
    expected_answer: str,
    *,
    use_per_record_regex: bool,
    extraction_length_threshold: int | None,
) -> RegexChoice:
    """The extraction regex for a row: the config's ``response_extract_regex``, replaced by the row's
    ``template_metadata.output_regex`` when ``use_per_record_regex`` (and the row has one); and with a
    row's regex, none at all when ``expected_answer`` is longer than ``extraction_length_threshold``."""
    row_regex = template_metadata.get("output_regex") if isinstance(template_metadata, Mapping) else None
    if not (use_per_record_regex and isinstance(row_regex, str) and row_regex):
        return RegexChoice(config_regex or None, per_row=False, length_skip=False)
    if extraction_length_threshold is not None and len(expected_answer) > extraction_length_threshold:
        return RegexChoice(None, per_row=True, length_skip=True)
    return RegexChoice(row_regex, per_row=True, length_skip=False)


def judge_prompt(template: str, question: str, expected_answer: str, generated_answer: str) -> str:
    """The template filled by ``str.format`` (values are inserted as they are, braces included)."""
    return template.format(question=question, expected_answer=expected_answer, generated_answer=generated_answer)


def read_verdict(
    last_text: str | None, equal_label: str, not_equal_label: str, mode: VerdictMode = GUARDED
) -> tuple[bool, str | None]:
    """``(equal, label)`` from the text of the judge reply's last content part (None when the last
    output item is not a message: not equal), by :func:`gym_core.judge.find_label`: in guarded mode
    the label occurring last outside echoed data tags, in reference mode the first label (§2's rule,
    gameable). ``label`` is the label that decided, None when neither occurs."""
    label = find_label(last_text, (equal_label, not_equal_label), mode)
    return label == equal_label, label
