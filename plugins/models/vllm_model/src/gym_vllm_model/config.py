"""Options of a ``vllm_model`` server instance, validated when a config is loaded.

Kept apart from the server so that registering the plugin imports nothing heavy. Each option's
description (``Meta(description=...)``) is what `gym plugin show vllm_model` prints.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
from msgspec import Meta

from gym_core import ServerConfig

__all__ = ["VllmModelConfig", "BaseURL"]

BaseURL = Annotated[str, Meta(pattern=r"^https?://", description="a vLLM server's API root, with /v1")]


class VllmModelConfig(ServerConfig, kw_only=True):
    base_url: Annotated[
        BaseURL | Annotated[list[BaseURL], Meta(min_length=1)],
        Meta(
            description="the vLLM server(s), each its API root with /v1 (http://gpu-node:8000/v1); with several, each"
            " session is pinned to one replica by a SHA-256 hash of its session id, and moves to the next on failure"
        ),
    ]
    model: Annotated[str, Meta(description="sent as 'model' on every upstream request and reported in responses")]
    api_key: Annotated[
        str | None,
        Meta(description="sent as 'Authorization: Bearer <api_key>'; keep it in env.yaml, not in a committed config"),
    ] = None
    return_token_id_information: Annotated[
        bool,
        Meta(
            description="training mode: always ask vLLM for token ids and log-probs and return them on the last output"
            " item of each call (a request's return_token_ids: true asks for them too)"
        ),
    ] = False
    request_prompt_and_generation_token_ids: Annotated[
        bool,
        Meta(
            description="in training mode, ask vLLM for inline prompt_token_ids/token_ids (return_token_ids)"
            " instead of calling its /tokenize for the prompt ids"
        ),
    ] = False
    uses_reasoning_parser: Annotated[
        bool,
        Meta(
            description="vLLM runs a reasoning parser: its reasoning fields and <think>...</think> text become"
            " reasoning items, and reasoning items of earlier turns are sent back as reasoning fields"
        ),
    ] = True
    uses_interleaved_reasoning: Annotated[
        bool,
        Meta(
            description="send the reasoning of earlier assistant turns back (as reasoning_content and"
            " reasoning); false drops it"
        ),
    ] = True
    preserve_reasoning_in_assistant_content: Annotated[
        bool,
        Meta(
            description="send earlier assistant turns with their reasoning inline as <think>...</think>, byte for"
            " byte, instead of splitting it out"
        ),
    ] = False
    replace_developer_role_with_system: Annotated[
        bool, Meta(description="rename 'developer' messages to 'system' (for chat templates without that role)")
    ] = False
    sequential_reasoning_allowed: Annotated[
        bool,
        Meta(
            description="false: a history ending with an assistant turn with no content and no tool calls is"
            " answered as an incomplete response (content_filter) without calling vLLM"
        ),
    ] = True
    chat_template_kwargs: Annotated[
        dict[str, Any] | None,
        Meta(
            description="chat_template_kwargs sent to vLLM ({enable_thinking: false}...); a"
            " request's metadata.chat_template_kwargs (a JSON object as a string) is merged over it"
        ),
    ] = None
    sampling_overrides: Annotated[
        dict[str, Any] | None,
        Meta(
            description="sampling settings forced on every upstream request, over the caller's"
            " and extra_body (on-policy pinning: {temperature: 1.0, top_p: 1.0})"
        ),
    ] = None
    extra_body: Annotated[
        dict[str, Any],
        Meta(
            description="merged under every upstream request (the request wins): top_k,"
            " repetition_penalty, guided_json...; a request's metadata.extra_body (JSON) is merged over it"
        ),
    ] = msgspec.field(default_factory=dict)
    default_headers: Annotated[dict[str, str], Meta(description="extra headers on every upstream request")] = (
        msgspec.field(default_factory=dict)
    )
    timeout_s: Annotated[
        float,
        Meta(gt=0, description="limit of one model call upstream, failover and retries included, seconds; then 504"),
    ] = 300.0
    max_attempts: Annotated[
        int, Meta(ge=1, description="tries of one call on one replica (connection errors, 429/503) before failing over")
    ] = 2
    replica_cooldown_s: Annotated[
        float, Meta(ge=0, description="after a replica failed, new sessions skip it for this long, seconds")
    ] = 30.0
    max_concurrency: Annotated[
        int, Meta(ge=1, description="upstream requests in flight at once from this server; later ones wait")
    ] = 256
    queue_timeout_s: Annotated[
        float,
        Meta(
            gt=0,
            description="longest wait for one of max_concurrency slots (within timeout_s), seconds; then"
            " 503 model_overloaded",
        ),
    ] = 240.0
