"""The ``genrm_model`` model server: a generative reward model (GenRM) that compares two responses.

A request is an ordinary ``POST /v1/responses`` whose ``input`` is the conversation being judged
and whose ``metadata`` carries ``response_1``, ``response_2`` and optionally ``principle`` (string
values). ``metadata`` is never forwarded; instead the pair is rendered for the reward model:

- ``rendering: native`` (agents_models spec §3.7): after the conversation's chat messages come
  ``{role: "principle"}`` (when ``supports_principle_role`` and the principle is non-empty),
  ``{role: "response_1"}`` and ``{role: "response_2"}`` (each when its key is present). These are
  not OpenAI roles: the GenRM's own chat template renders them (vLLM serving a GenRM).
- ``rendering: text`` (default): for chat models that do not know those roles (the local SmolLM2),
  the conversation and both responses are written into one user message with ``text_template``,
  which asks for the JSON ``{"score_1", "score_2", "ranking"}``. Both responses are then required.

A request without ``response_1``/``response_2`` is forwarded as it is (minus ``metadata``): the
server then answers like any chat model, so an environment may use it as an ordinary judge.

The model runs behind either another gym model server (``upstream_model_server``: its
``/v1/chat/completions``) or any OpenAI-compatible endpoint (``base_url`` + ``/chat/completions``,
with ``api_key``); the reply is an ordinary Response (``reasoning_content`` becomes a reasoning item).
Upstream failures reach the caller as gym's typed errors (502/504/424, final); the API key never
appears in an answer or a log line.
"""

from __future__ import annotations

import asyncio
import os
import re
from typing import Any

import msgspec

from gym_core import ModelServer
from gym_core.convert import chat_completion_to_response, create_params_to_chat
from gym_core.errors import InfrastructureError, ServerCallError, ServerHTTPError
from gym_core.schemas import (
    ChatCompletion,
    ChatCompletionRequest,
    ChatMessage,
    FunctionCall,
    FunctionCallOutput,
    Message,
    Reasoning,
    Response,
    ResponseCreateParams,
)

from gym_genrm_model.config import GenrmModelConfig

__all__ = [
    "GenrmModel",
    "PAIR_KEYS",
    "native_messages",
    "render_conversation",
    "render_text_prompt",
    "rendered_request",
]

PAIR_KEYS = ("response_1", "response_2")
_PLACEHOLDER = re.compile(r"\{(conversation|response_1|response_2|principle)\}")
_ROLE_NAMES = {"user": "User", "assistant": "Assistant", "system": "System", "developer": "Developer"}


class ModelOverloaded(InfrastructureError):
    """No upstream slot came free within ``timeout_s``: 503, final."""

    status = 503
    kind = "model_overloaded"


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(t for part in content if isinstance(t := getattr(part, "text", None), str))


def render_conversation(params: ResponseCreateParams) -> str:
    """The conversation of a request as plain text, one ``Role: text`` block per turn.

    ``instructions`` come first as a system turn; tool calls and their outputs are written out;
    reasoning items are left out (the judge sees what the user saw)."""
    blocks: list[str] = []
    if params.instructions:
        blocks.append(f"System: {params.instructions}")
    items = [Message(role="user", content=params.input)] if isinstance(params.input, str) else params.input
    for item in items:
        if isinstance(item, Message):
            blocks.append(f"{_ROLE_NAMES.get(item.role, item.role)}: {_content_text(item.content)}")
        elif isinstance(item, FunctionCall):
            blocks.append(f"Assistant (tool call): {item.name}({item.arguments})")
        elif isinstance(item, FunctionCallOutput):
            blocks.append(f"Tool result: {_content_text(item.output)}")
        elif isinstance(item, Reasoning):
            continue
    return "\n\n".join(blocks)


def render_text_prompt(
    template: str, conversation: str, response_1: str, response_2: str, principle_block: str = ""
) -> str:
    """``template`` with its placeholders filled in one pass (a response that contains
    ``{response_2}`` stays as it is written)."""
    values = {
        "conversation": conversation,
        "response_1": response_1,
        "response_2": response_2,
        "principle": principle_block,
    }
    return _PLACEHOLDER.sub(lambda m: values[m.group(1)], template)


def native_messages(metadata: dict[str, str], supports_principle_role: bool) -> list[ChatMessage]:
    """The custom-role messages appended after the conversation (§3.7), in order."""
    messages = []
    principle = metadata.get("principle")
    if supports_principle_role and principle:
        messages.append(ChatMessage(role="principle", content=principle))
    for key in PAIR_KEYS:
        if key in metadata:
            messages.append(ChatMessage(role=key, content=metadata[key]))
    return messages


def rendered_request(config: GenrmModelConfig, params: ResponseCreateParams) -> ChatCompletionRequest:
    """The chat request sent upstream for a Responses request: ``metadata`` removed, the pair rendered."""
    metadata = dict(params.metadata or {})
    params = msgspec.structs.replace(params, metadata=None)
    pair = any(key in metadata for key in PAIR_KEYS)
    if config.rendering == "native":
        request = create_params_to_chat(params)
        request.messages.extend(native_messages(metadata, config.supports_principle_role))
        return request
    if not pair:
        return create_params_to_chat(params)
    missing = [key for key in PAIR_KEYS if key not in metadata]
    if missing:
        raise msgspec.ValidationError(
            f"metadata has no {' or '.join(missing)}: a pairwise comparison needs both responses"
        )
    principle = metadata.get("principle") if config.supports_principle_role else None
    block = render_text_prompt(config.principle_template, "", "", "", principle) if principle else ""
    prompt = render_text_prompt(
        config.text_template, render_conversation(params), metadata["response_1"], metadata["response_2"], block
    )
    # The judge answers; the conversation's tools and instructions are in the prompt's text, not offered.
    judged = msgspec.structs.replace(
        params, input=[Message(role="user", content=prompt)], instructions=None, tools=None, tool_choice=None,
        parallel_tool_calls=None,
    )  # fmt: skip
    return create_params_to_chat(judged)


class GenrmModel(ModelServer):
    config: GenrmModelConfig
    # What create_params_to_chat carries upstream (stream: gym_core.streaming); any other parameter
    # would be dropped, so it is a 400 naming it (README.md's table).
    honours = frozenset(
        {
            "temperature", "top_p", "max_tokens", "seed", "tools", "tool_choice", "parallel_tool_calls",
            "response_format", "verbosity", "reasoning_effort", "logprobs", "top_logprobs", "stream",
        }
    )  # fmt: skip

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        cfg = self.config
        self.model_name = cfg.model_name
        self._slots = asyncio.Semaphore(cfg.max_concurrency)
        self._completion_decoder = msgspec.json.Decoder(ChatCompletion, strict=False)
        self._api_key = cfg.api_key or (os.environ.get(cfg.api_key_env) if cfg.api_key_env else None)
        if cfg.base_url is not None:
            self._target = cfg.base_url.rstrip("/")
            self._path = "/chat/completions"
            self._target_name = f"upstream {_without_credentials(self._target)}"
        else:
            self._target = self._target_name = cfg.upstream_model_server or ""
            self._path = "/v1/chat/completions"
        self._headers = {"authorization": f"Bearer {self._api_key}"} if self._api_key else None

    async def startup(self) -> None:
        cfg = self.config
        if cfg.base_url is not None and cfg.api_key_env and not self._api_key:
            raise ValueError(f"api_key_env: the environment variable {cfg.api_key_env} is not set")
        # timeout_s bounds the whole call; a timed-out attempt is not retried (the upstream may still
        # be generating it).
        self.upstream = self.own_client(msgspec.structs.replace(
            cfg.client, timeout_s=cfg.timeout_s, deadline_s=cfg.timeout_s, max_attempts=cfg.max_attempts,
            retry_timeouts=False,
        ))  # fmt: skip

    async def responses(self, params: ResponseCreateParams) -> Response:
        request = rendered_request(self.config, params)
        body = msgspec.to_builtins(request)
        body.update(self.config.extra_body)
        if self.config.model:
            body["model"] = self.config.model
        payload = await self._send(body)
        try:
            completion = self._completion_decoder.decode(payload)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise self._bad_answer(f"not a chat completion ({exc})", payload) from None
        if not completion.choices:
            raise self._bad_answer("no choices", payload)
        response = chat_completion_to_response(completion, msgspec.structs.replace(params, metadata=None))
        response.model = response.model or self.model_name
        return response

    async def _send(self, body: dict[str, Any]) -> bytes:
        try:
            async with asyncio.timeout(self.config.timeout_s):
                await self._slots.acquire()
        except TimeoutError:
            raise ModelOverloaded(
                f"{self.name}: no upstream slot free within {self.config.timeout_s:g} s "
                f"(max_concurrency {self.config.max_concurrency})"
            ) from None
        try:
            return await self.upstream.request(
                "POST", self._target, self._path, body=body, headers=self._headers, server_name=self._target_name
            )
        except ServerCallError as exc:
            raise self._redacted(exc) from None
        finally:
            self._slots.release()

    def _bad_answer(self, what: str, payload: bytes) -> ServerHTTPError:
        start = self._redact(payload[:200].decode(errors="replace"))
        # A 502 "upstream_error": the upstream answered, but not with a completion.
        return ServerHTTPError(
            self._target_name, self._path, f"{what}: {start}", status=502, error_type="upstream_error"
        )

    def _redacted(self, exc: ServerCallError) -> ServerCallError:
        if not self._api_key or self._api_key not in str(exc):
            return exc
        kwargs: dict[str, Any] = {"status": exc.status, "attempts": exc.attempts}
        if isinstance(exc, ServerHTTPError):
            kwargs["error_type"] = exc.error_type
        return type(exc)(exc.server, exc.path, self._redact(exc.detail), **kwargs)

    def _redact(self, text: str) -> str:
        # An upstream may echo the request's headers in an error; the key stays ours.
        return text.replace(self._api_key, "[api_key]") if self._api_key else text


def _without_credentials(url: str) -> str:
    scheme, sep, rest = url.partition("://")
    host, slash, path = rest.partition("/")
    return f"{scheme}{sep}{host.rpartition('@')[2]}{slash}{path}"
