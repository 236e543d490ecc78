"""Options of a ``non_executing`` server instance, validated when a config is loaded.

Kept apart from the server so that registering the plugin imports nothing heavy. Each option's
description (``Meta(description=...)``) is what `gym plugin show non_executing` prints.
"""

from __future__ import annotations

from typing import Annotated

from msgspec import Meta

from gym_core import ModelRef, ResourcesRef, ServerConfig

__all__ = ["NonExecutingConfig"]


class NonExecutingConfig(ServerConfig, kw_only=True):
    model_server: Annotated[
        ModelRef, Meta(description="the model server instance that plays the policy (called once per rollout)")
    ]
    resources_server: Annotated[
        ResourcesRef,
        Meta(
            description="the environment: seeded, then /verify scores the model's response (its tool calls unexecuted)"
        ),
    ]
    # Kept so that configs written for the reference load; like the reference, this agent always verifies.
    skip_verification: Annotated[
        bool,
        Meta(
            description="accepted and ignored, as in the reference: this agent always calls /verify (a warning is logged when true)"
        ),
    ] = False
    skip_verification_reward: Annotated[float, Meta(description="accepted and ignored (see skip_verification)")] = 0.0
