"""Options of a ``string_match`` server instance, validated when a config is loaded.

Kept apart from the server so that registering the plugin imports nothing heavy. Each option's
description (``Meta(description=...)``) is what `gym plugin show string_match` prints. Only
``several_answers`` changes a reward: how an answer is graded is chosen per row (``extraction_mode``,
``case_sensitive``).
"""

from __future__ import annotations

from typing import Annotated, Literal

from msgspec import Meta

from gym_core import ServerConfig

__all__ = ["StringMatchConfig"]


class StringMatchConfig(ServerConfig, kw_only=True):
    several_answers: Annotated[
        Literal["reject", "reference"],
        Meta(
            description="reject: an answer whose boxes say different things (\\boxed{0} \\boxed{12}) scores 0, "
            "reason several_answers; reference: the last box counts, as in the reference (GAMEABLE: boxing every "
            "candidate scores 1)"
        ),
    ] = "reject"
    verify_timeout_s: Annotated[
        float,
        Meta(gt=0, description="hard limit per grading in a worker: past it the answer scores 0 with reason 'timeout'"),
    ] = 5.0
    verify_workers: Annotated[
        int, Meta(ge=1, description="worker processes grading long responses (short ones are graded in the server)")
    ] = 2
    verify_memory_limit_mb: Annotated[
        Annotated[int, Meta(ge=64)] | None,
        Meta(description="address-space limit of each worker (None: no limit); a grading past it scores 0 ('error')"),
    ] = 2048
    inline_max_chars: Annotated[
        int,
        Meta(
            ge=0,
            description="responses (plus expected answer) up to this many characters are graded in the server "
            "process, where even a pathological one costs well under a millisecond; longer ones go to a worker "
            "(0: always a worker)",
        ),
    ] = 256
