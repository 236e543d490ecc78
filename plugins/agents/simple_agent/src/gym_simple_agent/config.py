"""Options of the ``simple_agent`` agent server (light: imported when plugins are listed)."""

from __future__ import annotations

from typing import Annotated

from msgspec import Meta

from gym_core import ModelRef, ResourcesRef, ServerConfig

__all__ = ["SimpleAgentConfig"]


class SimpleAgentConfig(ServerConfig, kw_only=True):
    model_server: Annotated[ModelRef, Meta(description="the model server instance that plays the policy")]
    resources_server: Annotated[
        ResourcesRef, Meta(description="the environment: seeded, its tools called, then verify")
    ]
    max_steps: Annotated[int, Meta(ge=1, description="most model calls in one rollout")] = 10
    offer_resources_tools: Annotated[
        bool, Meta(description="offer the resources server's tools when the task's params name none")
    ] = True
