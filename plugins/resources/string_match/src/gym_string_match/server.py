"""The ``string_match`` resources server: no tools, a verifier of free-form text answers.

A row carries ``expected_answer`` and optionally ``extraction_mode`` (``boxed``, ``final_answer``,
``last_line``, ``full_response``; default ``final_answer``) and ``case_sensitive`` (default false).
``/verify`` extracts the candidate from the assistant messages and grades it
(:mod:`gym_string_match.grading`): reward 1.0, 0.98 (numerically close, or equal once units are
dropped) or 0.0, with ``expected_answer``, ``extracted_answer`` (null when nothing was extracted),
``reason`` and ``matched_by``.

Short responses are graded in the server process (bounded cost); longer ones in a
:class:`gym_core.workers.WorkerPool` under a hard time limit, so that a pathological answer (say
thousands of unclosed ``\\text{``) scores 0 with reason ``timeout`` instead of stalling the server.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from gym_core import ResourcesServer, Session
from gym_core.schemas import Message, Response, VerifyRequest, VerifyResponse
from gym_core.workers import WorkerError, WorkerPool, WorkerPoolClosed, WorkerTimeout

from gym_string_match.config import StringMatchConfig
from gym_string_match.grading import Grade, grade

__all__ = ["StringMatchServer", "StringMatchVerifyRequest", "StringMatchVerifyResponse", "assistant_text", "as_bool"]

ExtractionMode = Literal["boxed", "final_answer", "last_line", "full_response"]

# Strings pydantic's lax mode reads as booleans (the reference validates rows with pydantic).
_TRUE = frozenset({"1", "on", "t", "true", "y", "yes"})
_FALSE = frozenset({"0", "off", "f", "false", "n", "no"})


def as_bool(value: bool | int | float | str | None, field: str, default: bool = False) -> bool:
    """``value`` read as pydantic's lax mode reads a bool (``"True"``, ``"0"``, ``1``...); None
    gives ``default``. Raises ``msgspec.ValidationError`` (an HTTP 422 naming ``field``) otherwise."""
    if value is None:
        return default
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
        return value.strip().lower() in _TRUE
    raise msgspec.ValidationError(f"Expected a boolean, got {value!r} - at `$.{field}`")


def assistant_text(response: Response) -> str:
    """ASSISTANT_TEXT_NL: the ``text`` of every content part of every assistant message, joined by
    newlines (empty parts included), stripped. Refusals, reasoning and tool calls are left out."""
    texts: list[str] = []
    for item in response.output:
        if isinstance(item, Message) and item.role == "assistant":
            if isinstance(item.content, str):
                texts.append(item.content)
            else:
                texts.extend(part.text for part in item.content if isinstance(getattr(part, "text", None), str))
    return "\n".join(texts).strip()


class StringMatchVerifyRequest(VerifyRequest, kw_only=True):
    expected_answer: str
    # null reads as the default, like an absent field.
    extraction_mode: ExtractionMode | None = None
    case_sensitive: bool | int | float | str | None = None
    metadata: Any = None  # ignored


class StringMatchVerifyResponse(VerifyResponse, kw_only=True, omit_defaults=False):
    """Always carries extracted_answer, null included: profiles count missing answers."""

    expected_answer: str
    extracted_answer: str | None = None
    reason: str = ""
    matched_by: str | None = None


class StringMatchServer(ResourcesServer):
    config: StringMatchConfig

    async def startup(self) -> None:
        self.pool = WorkerPool(
            self.config.verify_workers,
            time_limit_s=self.config.verify_timeout_s,
            memory_limit_mb=self.config.verify_memory_limit_mb,
            preload=["gym_string_match.grading"],
        )
        await self.pool.start()

    async def shutdown(self) -> None:
        await self.pool.aclose()

    async def verify(self, session: Session, body: StringMatchVerifyRequest) -> StringMatchVerifyResponse:
        case_sensitive = as_bool(body.case_sensitive, "case_sensitive")
        mode = body.extraction_mode or "final_answer"
        text = assistant_text(body.response)
        expected = body.expected_answer
        if len(text) + len(expected) <= self.config.inline_max_chars:
            verdict = grade(text, expected, mode, case_sensitive, self.config.several_answers)
        else:
            verdict = await self._grade_in_worker(text, expected, mode, case_sensitive)
        return StringMatchVerifyResponse(
            reward=verdict.reward,
            expected_answer=expected,
            extracted_answer=verdict.extracted_answer,
            reason=verdict.reason,
            matched_by=verdict.matched_by,
        )

    async def _grade_in_worker(self, text: str, expected: str, mode: str, case_sensitive: bool) -> Grade:
        try:
            return await self.pool.run(grade, text, expected, mode, case_sensitive, self.config.several_answers)
        except WorkerPoolClosed:
            raise
        except WorkerTimeout:
            return Grade(0.0, None, "timeout")
        except WorkerError as exc:
            self.log.warning("grading failed for a response of %d characters: %s", len(text), exc)
            return Grade(0.0, None, "error")
