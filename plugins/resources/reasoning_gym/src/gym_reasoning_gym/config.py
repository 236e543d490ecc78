"""Options of a ``reasoning_gym`` server instance, validated when a config is loaded.

Kept apart from the server so that registering the plugin imports nothing heavy. Each option's
description (``Meta(description=...)``) is what `gym plugin show reasoning_gym` prints.
"""

from __future__ import annotations

from typing import Annotated, Literal

from msgspec import Meta

from gym_core import ServerConfig

__all__ = ["ReasoningGymConfig"]


class ReasoningGymConfig(ServerConfig, kw_only=True):
    verify_timeout_s: Annotated[
        float,
        Meta(
            gt=0,
            description="hard limit on extracting and scoring one answer in a worker process (some "
            "scorers solve or simulate puzzles); past it the answer scores 0 with reason 'timeout'",
        ),
    ] = 10.0
    verify_workers: Annotated[int, Meta(ge=1, description="worker processes that score answers")] = 1
    worker_memory_mb: Annotated[
        int, Meta(ge=256, description="address-space limit of each scoring worker (the library alone takes ~300 MB)")
    ] = 2048
    several_answers: Annotated[
        Literal["reject", "reference"],
        Meta(
            description="reject: an answer whose <answer> tags (or, without tags, boxes) differ is not scored: 0, "
            "reason several_answers; reference: the last tag or first box is scored, as in the reference "
            "(GAMEABLE: boxing several guesses, the right one first, scores 1)"
        ),
    ] = "reject"
    restore_tuple_grids: Annotated[
        bool,
        Meta(
            description="arc_agi, rearc: turn metadata.output back into tuples before scoring, so a right grid "
            "scores 1.0 (the reference compares it, as read from JSON, with a tuple: 0.05)"
        ),
    ] = False
