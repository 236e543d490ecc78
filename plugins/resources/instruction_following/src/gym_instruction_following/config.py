"""Options of an ``instruction_following`` server instance, validated when a config is loaded.

Kept apart from the server so that registering the plugin imports nothing heavy. Each option's
description (``Meta(description=...)``) is what `gym plugin show instruction_following` prints.
"""

from __future__ import annotations

from typing import Annotated, Literal

from msgspec import Meta

from gym_core import ServerConfig

__all__ = ["InstructionFollowingConfig"]


class InstructionFollowingConfig(ServerConfig, kw_only=True):
    keyword_stuffing: Annotated[
        Literal["reject", "reference"],
        Meta(
            description="reject: a response with no word of its own, only words of the instructions' parameters "
            "(keywords, phrases, markers: 'P.S. P.S.'), follows no instruction: reward 0, reason keyword_stuffing; "
            "reference: checked like any other, as in the reference (GAMEABLE: the parameters alone satisfy "
            "the instructions that name them)"
        ),
    ] = "reject"
    unknown_instruction_ids: Annotated[
        Literal["error", "fail"],
        Meta(
            description="a row naming an instruction id this server does not know: 'error' rejects it with a 422 "
            "naming the id (the rollout fails); 'fail' counts that instruction as not followed, as the reference does"
        ),
    ] = "error"
    verify_timeout_s: Annotated[
        float,
        Meta(
            gt=0,
            description="hard limit on checking one response in a worker process; past it every instruction "
            "counts as not followed, reward 0 with reason 'timeout'",
        ),
    ] = 10.0
    verify_workers: Annotated[
        int,
        Meta(
            ge=1,
            description="worker processes that run the checks (regexes from rows on model output)",
        ),
    ] = 1
