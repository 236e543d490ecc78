"""The ``openai_model`` model server: gym's model API in front of any OpenAI-compatible endpoint.

``/v1/chat/completions`` is forwarded to the endpoint's ``/chat/completions``. ``/v1/responses``
is forwarded to its ``/responses`` (``api: responses``) or converted to a chat completion and back
(``api: chat_completions``, the default: vLLM, llama.cpp, SGLang and most others serve it).
Every upstream request names the configured ``model``, carries ``extra_body`` and the API key,
waits for one of ``max_concurrency`` slots, and goes through one pooled :class:`ServerClient`
(bounded retries on connection errors and 429/5xx, a timeout per attempt). Upstream failures reach
the caller as gym JSON errors naming the upstream URL and status: 502/504 when retrying may help,
424 when the upstream refused the request.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

import msgspec

from gym_core import ModelServer, ServerCallError, ServerClient
from gym_core.convert import chat_completion_to_response, create_params_to_chat
from gym_core.schemas import ChatCompletion, ChatCompletionRequest, Response, ResponseCreateParams, decode_response

from gym_openai_model.config import OpenAIModelConfig

__all__ = ["OpenAIModel"]

T = TypeVar("T")


class OpenAIModel(ModelServer):
    config: OpenAIModelConfig

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        cfg = self.config
        self.model_name = cfg.model
        self.base_url = cfg.base_url.rstrip("/")
        self.upstream = ServerClient(
            config=msgspec.structs.replace(cfg.client, timeout_s=cfg.timeout_s, max_attempts=cfg.max_attempts)
        )
        self._upstream_name = f"upstream {self.base_url}"
        self._headers = {"authorization": f"Bearer {cfg.api_key}"} if cfg.api_key else None
        self._slots = asyncio.Semaphore(cfg.max_concurrency)
        # Lenient: other servers' numbers may arrive as strings or floats where OpenAI sends ints.
        self._completion_decoder = msgspec.json.Decoder(ChatCompletion, strict=False)

    async def shutdown(self) -> None:
        await self.upstream.close()

    async def chat_completions(self, request: ChatCompletionRequest) -> ChatCompletion:
        if self.config.extra_body:
            payload = await self._post("/chat/completions", msgspec.to_builtins(request))
        else:  # the common case: encode the struct once, no detour through dicts
            payload = await self._send("/chat/completions", msgspec.structs.replace(request, model=self.config.model))
        return self._decode("/chat/completions", payload, self._completion_decoder.decode)

    async def responses(self, params: ResponseCreateParams) -> Response:
        if self.config.api == "chat_completions":
            completion = await self.chat_completions(create_params_to_chat(params))
            return chat_completion_to_response(completion, params)
        payload = await self._post("/responses", _create_params_body(params))
        return self._decode("/responses", payload, decode_response)

    async def _post(self, path: str, body: dict[str, Any]) -> bytes:
        return await self._send(path, {**body, **self.config.extra_body, "model": self.config.model})

    async def _send(self, path: str, body: Any) -> bytes:
        async with self._slots:
            return await self.upstream.request(
                "POST", self.base_url, path, body=body, headers=self._headers, server_name=self._upstream_name
            )

    def _decode(self, path: str, payload: bytes, decode: Callable[[bytes], T]) -> T:
        try:
            return decode(payload)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            start = payload[:200].decode(errors="replace")
            raise ServerCallError(self._upstream_name, path, f"unexpected answer ({exc}): {start}") from exc


def _create_params_body(params: ResponseCreateParams) -> dict[str, Any]:
    """The request as the upstream expects it: items gym does not model go back to their own shape.

    Null settings are not encoded (gym reads them as unset); the one null gym keeps, in output
    text parts of earlier turns, is replaced by what OpenAI accepts there.
    """
    body = msgspec.to_builtins(params)
    items = body.get("input")
    if isinstance(items, list):
        body["input"] = [_upstream_item(item) for item in items]
    return body


def _upstream_item(item: dict[str, Any]) -> dict[str, Any]:
    if item.get("type") == "other":
        return item["data"]
    content = item.get("content")
    if isinstance(content, list):
        for part in content:
            if part.get("type") == "output_text":
                if part.get("annotations") is None:
                    part["annotations"] = []
                if part.get("logprobs", ()) is None:
                    del part["logprobs"]
    return item
