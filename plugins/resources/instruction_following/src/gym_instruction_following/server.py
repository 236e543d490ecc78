"""The ``instruction_following`` resources server: no tools, a verifier of IFEval/IFBench-style
instructions (spec §8).

Task rows: ``id``, and ``verifier_metadata`` holding ``instruction_id_list``, ``prompt``,
``kwargs`` (parallel to the ids) and ``grading_mode`` (``binary``, the default, or ``fraction``).
Legacy rows with these keys at the top level are accepted: each moves into ``verifier_metadata``
unless already there. The text checked is the first content part of the last output item.

The checks (:mod:`gym_instruction_following.checks`) run regexes, some of them from the row, on the
model's output, so they run in a :class:`gym_core.workers.WorkerPool` under ``verify_timeout_s``:
past it no instruction counts as followed and the reward is 0 with reason ``"timeout"``.
"""

from __future__ import annotations

import re
from typing import Any, Literal

import msgspec
from msgspec import UNSET, UnsetType

from gym_core import ResourcesServer, Session, ToolError
from gym_core.schemas import Message, Reasoning, Response, VerifyRequest, VerifyResponse
from gym_core.workers import WorkerError, WorkerPool, WorkerPoolClosed, WorkerTimeout

from gym_instruction_following.checks import INSTRUCTIONS, grade
from gym_instruction_following.config import InstructionFollowingConfig

__all__ = [
    "InstructionFollowingServer",
    "InstructionFollowingVerifyRequest",
    "InstructionFollowingVerifyResponse",
    "VerifierMetadata",
    "checked_text",
]

GradingMode = Literal["binary", "fraction"]
REQUIRED_KEYS = ("instruction_id_list", "prompt", "kwargs")


class VerifierMetadata(msgspec.Struct, kw_only=True, omit_defaults=True):
    """What the checks need; unset keys may come from the row's top level (legacy rows)."""

    instruction_id_list: list[str] | UnsetType = UNSET
    prompt: str | UnsetType = UNSET
    kwargs: list[dict[str, Any] | None] | UnsetType = UNSET
    grading_mode: GradingMode | None | UnsetType = UNSET


class InstructionFollowingVerifyRequest(VerifyRequest, kw_only=True):
    id: int
    verifier_metadata: VerifierMetadata | None = None
    # The legacy row format: the same keys at the top level.
    instruction_id_list: list[str] | UnsetType = UNSET
    prompt: str | UnsetType = UNSET
    kwargs: list[dict[str, Any] | None] | UnsetType = UNSET
    grading_mode: GradingMode | None | UnsetType = UNSET


class InstructionFollowingVerifyResponse(VerifyResponse, kw_only=True, omit_defaults=False):
    id: int
    verifier_metadata: VerifierMetadata
    follow_all_instructions: bool
    follow_instruction_list: list[bool]
    # Why each instruction could not be checked (a missing parameter, say), None where it ran.
    instruction_errors: list[str | None]
    # "" normally; "timeout" or "error" when the checks could not run at all; "keyword_stuffing"
    # when the response held only words of the instructions' parameters (none of them followed).
    reason: str = ""


def checked_text(response: Response) -> str:
    """The text the checks read: the text of the first content part of the last output item, ``""``
    when that item has no content (a function call) or its first part has no text."""
    if not response.output:
        return ""
    last = response.output[-1]
    if not isinstance(last, (Message, Reasoning)) or not last.content:
        return ""
    if isinstance(last.content, str):  # a message given as a bare string: that string is its only part
        return last.content
    text = getattr(last.content[0], "text", None)
    return text if isinstance(text, str) else ""


_WORD = re.compile(r"\w+")


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def stuffed(text: str, kwargs: list[dict[str, Any] | None]) -> bool:
    """Whether ``text`` has words, and every one of them is a word of the instructions' string
    parameters (keywords, phrases, markers): it says nothing of its own."""
    words = {w.casefold() for w in _WORD.findall(text)}
    own = {w.casefold() for s in _strings(kwargs) for w in _WORD.findall(s)}
    return bool(words) and bool(own) and words <= own


def merged_metadata(body: InstructionFollowingVerifyRequest) -> VerifierMetadata:
    """``verifier_metadata`` with the legacy top-level keys moved in where it lacks them; a 422
    naming the key when a required one is missing from both."""
    nested = body.verifier_metadata or VerifierMetadata()
    merged = {}
    for key in (*REQUIRED_KEYS, "grading_mode"):
        value = getattr(nested, key)
        merged[key] = getattr(body, key) if value is UNSET else value
    missing = [key for key in REQUIRED_KEYS if merged[key] is UNSET]
    if missing:
        raise ToolError(
            "instruction_following: the row has no "
            + ", ".join(f"verifier_metadata.{key}" for key in missing)
            + " (nor the legacy top-level key)",
            422,
        )
    return VerifierMetadata(**merged)


class InstructionFollowingServer(ResourcesServer):
    config: InstructionFollowingConfig

    async def startup(self) -> None:
        # Preloaded: NLTK's tokenizers and langdetect's profiles load once, before the server is ready.
        self.pool = WorkerPool(
            self.config.verify_workers,
            time_limit_s=self.config.verify_timeout_s,
            memory_limit_mb=1024,
            preload=["gym_instruction_following.checks"],
        )
        await self.pool.start()

    async def shutdown(self) -> None:
        await self.pool.aclose()

    async def verify(
        self, session: Session, body: InstructionFollowingVerifyRequest
    ) -> InstructionFollowingVerifyResponse:
        metadata = merged_metadata(body)
        ids, kwargs = metadata.instruction_id_list, metadata.kwargs
        if self.config.unknown_instruction_ids == "error":
            unknown = sorted({iid for iid in ids[: len(kwargs)] if iid not in INSTRUCTIONS})
            if unknown:
                raise ToolError(
                    f"instruction_following: unknown instruction id(s) {', '.join(map(repr, unknown))} in "
                    "verifier_metadata.instruction_id_list",
                    422,
                )
        pairs = min(len(ids), len(kwargs))
        reason = ""
        text = checked_text(body.response)
        try:
            if self.config.keyword_stuffing == "reject" and stuffed(text, kwargs):
                followed, errors, reason = [False] * pairs, [None] * pairs, "keyword_stuffing"
            else:
                results = await self.pool.run(grade, text, ids, kwargs)
                followed = [r.followed for r in results]
                errors = [r.error for r in results]
        except WorkerTimeout:
            followed, errors, reason = [False] * pairs, ["timeout"] * pairs, "timeout"
        except WorkerPoolClosed:
            raise
        except WorkerError as exc:  # out of memory, a crashed worker
            self.log.warning("instruction_following checks failed: %s", exc)
            followed, errors, reason = [False] * pairs, ["error"] * pairs, "error"
        mode = metadata.grading_mode or "binary"
        if mode == "binary":
            reward = float(all(followed))
        else:
            reward = sum(followed) / len(followed) if followed else 0.0
        return InstructionFollowingVerifyResponse(
            reward=reward,
            id=body.id,
            verifier_metadata=metadata,
            follow_all_instructions=all(followed),
            follow_instruction_list=followed,
            instruction_errors=errors,
            reason=reason,
        )
