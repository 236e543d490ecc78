"""Options of a ``tool_simulation`` server instance, validated when a config is loaded.

Kept apart from the server so that registering the plugin imports nothing heavy. Each option's
description (``Meta(description=...)``) is what `gym plugin show tool_simulation` prints.
"""

from __future__ import annotations

from typing import Annotated

from msgspec import Meta

from gym_core import ModelRef, ResourcesRef, ServerConfig

__all__ = ["ToolSimulationConfig"]


class ToolSimulationConfig(ServerConfig, kw_only=True):
    model_server: Annotated[
        ModelRef, Meta(description="the model server instance that plays the policy (called once per rollout)")
    ]
    resources_server: Annotated[
        ResourcesRef,
        Meta(description="the environment whose /verify judges the model's next step (tool_call_match); never seeded"),
    ]
    skip_verification: Annotated[
        bool,
        Meta(
            description="do not call /verify: every rollout gets skip_verification_reward and verification_skipped: true"
        ),
    ] = False
    skip_verification_reward: Annotated[
        float, Meta(description="the reward of a rollout when skip_verification is true")
    ] = 0.0
