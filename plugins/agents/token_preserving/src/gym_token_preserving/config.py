"""Options of a ``token_preserving`` server instance, validated when a config is loaded.

Kept apart from the server so that registering the plugin imports nothing heavy. Each option's
description (``Meta(description=...)``) is what `gym plugin show token_preserving` prints.
"""

from __future__ import annotations

from typing import Annotated

from msgspec import Meta

from gym_core import ModelRef, ResourcesRef, ServerConfig

__all__ = ["TokenPreservingConfig"]


class TokenPreservingConfig(ServerConfig, kw_only=True):
    model_server: Annotated[ModelRef, Meta(description="the model server instance that plays the policy")]
    resources_server: Annotated[
        ResourcesRef, Meta(description="the environment: seeded, its tools called, then verify scores the rollout")
    ]
    max_steps: Annotated[int, Meta(ge=1, description="most model calls in one rollout")] = 10
    offer_resources_tools: Annotated[
        bool, Meta(description="offer the resources server's tools when the task's params name none")
    ] = True
    require_token_ids: Annotated[
        bool,
        Meta(
            description="fail the rollout when a model call returns no token ids, or a prompt that does not "
            "begin with the previous turn's prompt + generated ids (false: record and go on)"
        ),
    ] = True
