"""Options of a ``mini_swe_agent`` server instance, validated when a config is loaded.

Kept apart from the server so that registering the plugin imports nothing heavy. Each option's
description (``Meta(description=...)``) is what `gym plugin show mini_swe_agent` prints.
"""

from __future__ import annotations

from typing import Annotated

from msgspec import Meta

from gym_core import ModelRef, ResourcesRef, ServerConfig

__all__ = ["MiniSweAgentConfig"]


class MiniSweAgentConfig(ServerConfig, kw_only=True):
    model_server: Annotated[ModelRef, Meta(description="the model server instance that plays the policy")]
    resources_server: Annotated[ResourcesRef, Meta(description="the environment: seeded, then verify scores the answer")]
