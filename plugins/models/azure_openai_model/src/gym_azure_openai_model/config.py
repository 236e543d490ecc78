"""Options of an ``azure_openai_model`` server instance, validated when a config is loaded.

Kept apart from the server so that registering the plugin imports nothing heavy. Each option's
description (``Meta(description=...)``) is what `gym plugin show azure_openai_model` prints.
"""

from __future__ import annotations

from typing import Annotated

from msgspec import Meta

from gym_core import UpstreamOptions

__all__ = ["AzureOpenAIModelConfig"]


class AzureOpenAIModelConfig(UpstreamOptions, kw_only=True):
    endpoint: Annotated[
        str,
        Meta(pattern=r"^https?://[^/?#]+/?$",
             description="the Azure OpenAI resource's endpoint, scheme and host only: https://<resource>.openai.azure.com"),
    ]  # fmt: skip
    # Named like a secret: `gym config show` and the head server publish it as <redacted>.
    api_key: Annotated[
        str,
        Meta(min_length=1, description="sent as the 'api-key' header; keep it in env.yaml, not in a committed config"),
    ]
    # Azure's deployment names are letters, digits, '-', '_' and '.': nothing that could change the URL's path.
    deployment: Annotated[
        str,
        Meta(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$",
             description="the deployment to call (in the URL path: /openai/deployments/<deployment>/chat/completions)"),
    ]  # fmt: skip
    api_version: Annotated[
        str,
        Meta(pattern=r"^\d{4}-\d{2}-\d{2}(-preview)?$",
             description="sent as ?api-version= on every call, e.g. 2024-10-21 (GA) or 2025-04-01-preview"),
    ] = "2024-10-21"  # fmt: skip
    model_name: Annotated[
        str | None, Meta(description="the model's name in answers and GET /v1/models; default: the deployment")
    ] = None
    max_concurrency: Annotated[int, Meta(ge=1, description="upstream requests in flight at once; later ones wait")] = 8
