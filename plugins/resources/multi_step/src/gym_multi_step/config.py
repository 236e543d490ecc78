"""Options of a ``multi_step`` server instance, validated when a config is loaded.

Kept apart from the server so that registering the plugin imports nothing heavy. Each option's
description (``Meta(description=...)``) is what `gym plugin show multi_step` prints.
"""

from __future__ import annotations

from typing import Annotated

from msgspec import Meta

from gym_core import ServerConfig

__all__ = ["MultiStepConfig"]


class MultiStepConfig(ServerConfig, kw_only=True):
    verify_timeout_s: Annotated[
        float,
        Meta(
            gt=0, description="hard limit on scoring one large submission (off the event loop); past it the reward is 0"
        ),
    ] = 10.0
    fail_on_malformed_arguments: Annotated[
        bool,
        Meta(
            description=(
                "answer /verify with HTTP 500, as the reference does, when the last extract_synonym_values call "
                "cannot be read (the rollout then fails); by default it gets reward 0 with a reason"
            )
        ),
    ] = False
