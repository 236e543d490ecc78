"""Options of a ``sokoban`` server instance (light: imported when plugins are listed).

They are the defaults of the spec's ``env_config``; a row may override ``dim_room``,
``num_boxes``, ``max_steps`` and ``search_depth`` within the same bounds.
"""

from __future__ import annotations

from typing import Annotated, Literal

from msgspec import Meta

from gym_core import ServerConfig

__all__ = ["SokobanConfig", "Side", "MAX_BOXES", "MAX_EPISODE_STEPS"]

MAX_BOXES = 4
MAX_EPISODE_STEPS = 1000
# A side of 3 is one inner row or column between the walls; NeMo Gym's own example row plays
# [6, 4]. A room too small for any level of its boxes (4x4, say) is a 422 from the generator.
Side = Annotated[int, Meta(ge=3, le=12)]


class SokobanConfig(ServerConfig, kw_only=True):
    dim_room: Annotated[
        tuple[Side, Side],
        Meta(description="rows and columns of a level, walls included (each 3-12; need not be square)"),
    ] = (6, 6)
    num_boxes: Annotated[int, Meta(ge=1, le=MAX_BOXES, description="boxes (and targets) in a level")] = 1
    max_steps: Annotated[
        int,
        Meta(
            ge=1,
            le=MAX_EPISODE_STEPS,
            description="moves in one episode; the move that reaches it ends the episode (truncated)",
        ),
    ] = 100
    max_episode_steps: Annotated[
        int, Meta(ge=1, le=MAX_EPISODE_STEPS, description="the most moves a row's max_steps may ask for")
    ] = MAX_EPISODE_STEPS
    invalid_move: Annotated[
        Literal["fail", "penalty"],
        Meta(
            description="a reply naming no move: fail (a 400 that fails the rollout, the spec's) or penalty "
            "(a step without a move: -0.1, action_is_valid false)"
        ),
    ] = "fail"
    search_depth: Annotated[
        int, Meta(ge=1, le=300, description="depth of the reverse-play search that scrambles the solved level")
    ] = 100
