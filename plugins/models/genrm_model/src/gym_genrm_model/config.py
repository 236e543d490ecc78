"""Options of a ``genrm_model`` server instance, validated when a config is loaded.

Kept apart from the server so that registering the plugin imports nothing heavy. Each option's
description (``Meta(description=...)``) is what `gym plugin show genrm_model` prints.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

from gym_core import ServerConfig
from gym_core.options import ModelRef

__all__ = ["GenrmModelConfig", "DEFAULT_TEXT_TEMPLATE", "DEFAULT_PRINCIPLE_TEMPLATE", "Rendering"]

Rendering = Literal["text", "native"]

# Our own wording. Placeholders: {conversation}, {response_1}, {response_2}, {principle} (the
# principle_template filled in, or nothing). Any other brace is literal text.
DEFAULT_TEXT_TEMPLATE = """\
You are an impartial judge. Compare two candidate responses to the last turn of the conversation below.

[Conversation]
{conversation}

[Response 1]
{response_1}

[Response 2]
{response_2}
{principle}
Give each response a score from 1 (poor) to 5 (excellent) for how helpful, correct and clear it is. \
Then rank the pair from 1 to 6: 1 = response 1 is much better, 2 = better, 3 = slightly better, \
4 = response 2 is slightly better, 5 = better, 6 = much better.
Answer with one JSON object and nothing else: {"score_1": <1-5>, "score_2": <1-5>, "ranking": <1-6>}"""

DEFAULT_PRINCIPLE_TEMPLATE = "\n[Principle]\nJudge the responses by this principle: {principle}\n"


class GenrmModelConfig(ServerConfig, kw_only=True):
    upstream_model_server: Annotated[
        ModelRef | None,
        Meta(
            description="the gym model server instance that runs the reward model (local_llama, scripted, "
            "openai_model...); set this or base_url"
        ),
    ] = None
    base_url: Annotated[
        Annotated[str, Meta(pattern=r"^https?://")] | None,
        Meta(
            description="an OpenAI-compatible endpoint's API root, before /chat/completions (a vLLM serving the "
            "GenRM: http://127.0.0.1:8000/v1); set this or upstream_model_server"
        ),
    ] = None
    api_key: Annotated[
        str | None,
        Meta(
            description="sent to base_url as 'Authorization: Bearer <api_key>'; keep it in env.yaml (or use "
            "api_key_env), never in a committed config; never shown in an answer or a log line"
        ),
    ] = None
    api_key_env: Annotated[
        str | None,
        Meta(
            description="the environment variable holding the key for base_url, read at start-up (when api_key "
            "is not set)"
        ),
    ] = None
    model: Annotated[
        str | None,
        Meta(
            description="the model name sent upstream (required with base_url; with upstream_model_server: "
            "left to that server unless set)"
        ),
    ] = None
    model_name: Annotated[str, Meta(description="this server's model name in answers and GET /v1/models")] = "genrm"
    rendering: Annotated[
        Rendering,
        Meta(
            description="native: principle/response_1/response_2 appended as chat messages with those roles "
            "(for GenRM chat templates that know them, e.g. behind vLLM); text: the conversation and both "
            "responses rendered into one user message with text_template (any chat model)"
        ),
    ] = "text"
    supports_principle_role: Annotated[
        bool,
        Meta(
            description="pass metadata.principle to the model (native: a 'principle' message; text: the "
            "principle_template block); false: the principle is ignored"
        ),
    ] = True
    text_template: Annotated[
        str,
        Meta(
            description="text rendering's user message; placeholders {conversation}, {response_1}, {response_2}, "
            "{principle}; other braces are literal"
        ),
    ] = DEFAULT_TEXT_TEMPLATE
    principle_template: Annotated[
        str,
        Meta(
            description="what {principle} becomes in text_template when a principle is given (placeholder "
            "{principle}); nothing otherwise"
        ),
    ] = DEFAULT_PRINCIPLE_TEMPLATE
    max_concurrency: Annotated[int, Meta(ge=1, description="upstream calls in flight at once; later ones wait")] = 64
    timeout_s: Annotated[
        float,
        Meta(gt=0, description="limit of one upstream call, retries and their backoff included, seconds; then 504"),
    ] = 600.0
    max_attempts: Annotated[
        int, Meta(ge=1, description="tries of one upstream call on connection errors and 429/502/503/504 answers")
    ] = 3
    extra_body: Annotated[
        dict[str, Any], Meta(description="merged into every upstream chat request body, over the caller's fields")
    ] = msgspec.field(default_factory=dict)

    def __post_init__(self) -> None:
        if (self.upstream_model_server is None) == (self.base_url is None):
            raise ValueError(
                "set exactly one of upstream_model_server (a gym model server instance) and base_url "
                "(an OpenAI-compatible endpoint)"
            )
        if self.base_url is not None and not self.model:
            raise ValueError("model: the model name to send to base_url is required with base_url")
        if self.upstream_model_server is not None and (self.api_key or self.api_key_env):
            raise ValueError("api_key/api_key_env go with base_url; a gym upstream_model_server gets the run's token")
