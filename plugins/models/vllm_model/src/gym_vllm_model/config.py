"""Options of a ``vllm_model`` server instance, validated when a config is loaded.

Kept apart from the server so that registering the plugin imports nothing heavy. Each option's
description (``Meta(description=...)``) is what `gym plugin show vllm_model` prints.
"""

from __future__ import annotations

from typing import Annotated

from msgspec import Meta

from gym_core import ServerConfig

__all__ = ["VllmModelConfig"]


class VllmModelConfig(ServerConfig, kw_only=True):
    prefix: Annotated[str, Meta(description="put before every reply (e.g. prefix: 'echo: ')")] = ""
    model_name: Annotated[str, Meta(description="the model's name in answers and GET /v1/models")] = "vllm_model"
