"""Options of a ``xlam_fc`` server instance, validated when a config is loaded.

Kept apart from the server so that registering the plugin imports nothing heavy. Each option's
description (``Meta(description=...)``) is what `gym plugin show xlam_fc` prints.
"""

from __future__ import annotations

from typing import Annotated

from msgspec import Meta

from gym_core import ServerConfig

__all__ = ["XlamFcConfig"]


class XlamFcConfig(ServerConfig, kw_only=True):
    verify_timeout_s: Annotated[
        float,
        Meta(
            gt=0, description="hard limit on scoring one large response (off the event loop); past it the reward is 0"
        ),
    ] = 10.0
