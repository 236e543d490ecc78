"""Options of the ``openai_model`` model server."""

from __future__ import annotations

from typing import Annotated, Literal

from msgspec import Meta

from gym_core import UpstreamOptions

__all__ = ["OpenAIModelConfig"]


class OpenAIModelConfig(UpstreamOptions, kw_only=True):
    base_url: Annotated[
        str,
        Meta(
            pattern=r"^https?://",
            description="the endpoint's API root, before /chat/completions: http://127.0.0.1:8080/v1",
        ),
    ]
    api_key: Annotated[
        str | None,
        Meta(description="sent as 'Authorization: Bearer <api_key>'; keep it in env.yaml, not in a committed config"),
    ] = None
    model: Annotated[str, Meta(description="sent as 'model' on every upstream request, whatever the caller asked for")]
    api: Annotated[
        Literal["responses", "chat_completions"],
        Meta(
            description="how /v1/responses is served: forwarded to the endpoint's /responses, or converted to its"
            " /chat/completions and back (every endpoint has that)"
        ),
    ] = "chat_completions"
