"""The regex extractions of an equivalence_llm_judge verdict (environments spec §17, steps 1 and 3):
the question out of the last user message, the generated answer out of the last assistant message.

Standard library only: a worker process (:class:`gym_core.workers.WorkerPool`) imports this module to
run :func:`extract_inputs` on long texts under a hard time limit.
"""

from __future__ import annotations

import re

__all__ = ["extract_answer", "extract_inputs", "extract_question", "last_match"]

_FLAGS = re.MULTILINE | re.DOTALL


def last_match(pattern: str, text: str) -> str | None:
    """The last match of ``pattern`` (MULTILINE|DOTALL) in ``text``: its first group that is not blank,
    stripped, else the whole match, stripped. None when nothing matches. Raises ``re.error`` for an
    invalid pattern."""
    match = None
    for match in re.finditer(pattern, text, _FLAGS):  # noqa: B007 - the last one is wanted
        pass
    if match is None:
        return None
    for group in match.groups():
        if group is not None and group.strip():
            return group.strip()
    return match.group(0).strip()


def extract_question(text: str, regex: str | None) -> str:
    """The question: ``text`` (the last user message), or the last match of ``regex`` in it when one
    is configured and matches."""
    if not regex:
        return text
    found = last_match(regex, text)
    return text if found is None else found


def extract_answer(text: str, regex: str | None) -> str:
    """The generated answer in ``text`` (the last assistant message, not empty): the last match of
    ``regex``; the whole text when there is no regex, no match, or the regex is invalid."""
    if not regex:
        return text
    try:
        found = last_match(regex, text)
    except re.error:
        return text
    return text if found is None else found


def extract_inputs(
    question_text: str, question_regex: str | None, answer_text: str, answer_regex: str | None
) -> tuple[str, str]:
    """``(extract_question(question_text, question_regex), extract_answer(answer_text, answer_regex))``:
    every regex of one verify, in one call (a worker runs it for long texts)."""
    return extract_question(question_text, question_regex), extract_answer(answer_text, answer_regex)
