"""Options of an ``arc_agi`` server instance, validated when a config is loaded.

Kept apart from the server so that registering the plugin imports nothing else. The reference
environment has no options; ``several_answers`` refuses a hedge it rewards, the others only bound
the cost of grading. Each option's description is
what `gym plugin show arc_agi` prints.
"""

from __future__ import annotations

from typing import Annotated, Literal

from msgspec import Meta

from gym_core import ServerConfig

__all__ = ["ArcAgiConfig"]


class ArcAgiConfig(ServerConfig, kw_only=True):
    several_answers: Annotated[
        Literal["reject", "reference"],
        Meta(
            description="reject: an answer whose boxed grids differ has no grid (reward 0, reason several_answers); "
            "reference: the first boxed grid counts, as in the reference (GAMEABLE: boxing several grids, the "
            "right one first, scores 1)"
        ),
    ] = "reject"
    verify_timeout_s: Annotated[
        float,
        Meta(gt=0, description="hard limit on grading one long answer; past it: reward 0, reason 'timeout'"),
    ] = 5.0
    verify_workers: Annotated[
        Annotated[int, Meta(ge=1)] | None,
        Meta(description="worker processes grading long responses; default: min(4, CPUs)"),
    ] = None
    verify_memory_limit_mb: Annotated[
        Annotated[int, Meta(ge=64)] | None,
        Meta(description="address-space limit of each grading worker (None: none); past it: reward 0, reason 'error'"),
    ] = 2048
