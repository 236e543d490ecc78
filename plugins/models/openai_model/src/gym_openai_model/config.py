"""Options of the ``openai_model`` model server."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from gym_core import ServerConfig

__all__ = ["OpenAIModelConfig"]

Positive = Annotated[int, msgspec.Meta(ge=1)]


class OpenAIModelConfig(ServerConfig, kw_only=True):
    # The endpoint's API root, the part before /chat/completions: http://127.0.0.1:8080/v1.
    base_url: Annotated[str, msgspec.Meta(pattern=r"^https?://")]
    # Sent as `Authorization: Bearer <api_key>`; keep it in env.yaml, not in a committed config.
    api_key: str | None = None
    # Sent as `model` on every upstream request, whatever the caller asked for.
    model: str
    # How /v1/responses is served: forwarded to the endpoint's /responses ("responses"), or
    # converted to its /chat/completions and back ("chat_completions", which every endpoint has).
    api: Literal["responses", "chat_completions"] = "chat_completions"
    # Upstream requests in flight at once; later ones wait for a free slot.
    max_concurrency: Positive = 64
    timeout_s: Annotated[float, msgspec.Meta(gt=0)] = 600.0
    # Tries of one upstream request on connection errors and 429/502/503/504 answers.
    max_attempts: Positive = 3
    # Merged into every upstream request body, over the caller's fields (top-level keys).
    extra_body: dict[str, Any] = msgspec.field(default_factory=dict)
