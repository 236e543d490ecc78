"""The ``openai_model`` model server: gym's model API in front of any OpenAI-compatible endpoint.

``/v1/chat/completions`` is forwarded to the endpoint's ``/chat/completions``. ``/v1/responses``
is forwarded to its ``/responses`` (``api: responses``) or converted to a chat completion and back
(``api: chat_completions``, the default: vLLM, llama.cpp, SGLang and most others serve it).

Request fields gym's schemas do not model (``frequency_penalty``, ``logit_bias``, ``top_k``...)
are forwarded as the caller sent them; when converting, ``text.format`` becomes ``response_format``
(:mod:`gym_core.convert`), and Responses-only settings without a chat counterpart are left out.
Every upstream request names the configured ``model`` and carries ``extra_body`` and the API key;
slots, retries and typed failures are gym's policy for servers in front of an engine
(:mod:`gym_core.upstream`): at most ``queue_timeout_s`` for one of ``max_concurrency`` slots,
retried only on connection errors and 429/503 (nothing was generated), all attempts within ``timeout_s``.

Failures reach the caller as gym JSON errors with a typed ``type`` and the ``x-gym-final`` header
(this server spent the retries; gym's clients do not retry on top): ``model_overloaded`` (503, no
slot in time), ``upstream_timeout`` (504), ``upstream_unavailable`` and ``upstream_error`` (502:
unreachable, busy after every attempt, a 5xx, or an answer that is not a completion), and
``upstream_refused`` (424: the endpoint refused the request, 400/401/404...). The API key never
appears in an answer or a log line.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import msgspec
from litestar import Request

from gym_core import ModelServer
from gym_core.convert import chat_completion_to_response, create_params_to_chat, echo_params
from gym_core.schemas import ChatCompletion, ChatCompletionRequest, Response, ResponseCreateParams, decode_response
from gym_core.streaming import ResponseEventStream, chat_error_sse, response_error_sse, sse_data, sse_event
from gym_core.upstream import (
    Upstream,
    UpstreamStream,
    chat_as_response_events,
    chat_fields,
    chat_relay,
    raw_body_routes,
    relay,
    response_stream_events,
    without_credentials,
)

from gym_openai_model.config import OpenAIModelConfig

__all__ = ["OpenAIModel"]


class OpenAIModel(ModelServer):
    config: OpenAIModelConfig

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        cfg = self.config
        self.model_name = cfg.model
        self.base_url = cfg.base_url.rstrip("/")
        # With the global config, the run's token goes with calls to an upstream of the same run (a
        # gym model served as OpenAI-compatible), and only there; api_key, if set, replaces it.
        self.upstream = Upstream(
            self.name, name=f"upstream {without_credentials(self.base_url)}", timeout_s=cfg.timeout_s,
            max_attempts=cfg.max_attempts, max_concurrency=cfg.max_concurrency, queue_timeout_s=cfg.queue_timeout_s,
            headers={"authorization": f"Bearer {cfg.api_key}"} if cfg.api_key else None, secret=cfg.api_key,
            client_config=cfg.client, global_config=self.global_config,
        )  # fmt: skip
        # Lenient: other servers' numbers may arrive as strings or floats where OpenAI sends ints.
        self._completion_decoder = msgspec.json.Decoder(ChatCompletion, strict=False)

    async def shutdown(self) -> None:
        await self.upstream.close()

    def routes(self) -> list[Any]:
        # From the raw body: the fields gym's schemas do not model are forwarded.
        return raw_body_routes(
            self, super().routes(), chat=self._chat_route, responses=self._responses_route, streams=True
        )

    async def _chat_route(self, request: Request, chat: ChatCompletionRequest, fields: dict[str, Any]) -> Any:
        if chat.stream is True:
            return await self._stream_chat(chat, fields)
        return await self.chat_completions(chat, fields)

    async def _responses_route(self, request: Request, params: ResponseCreateParams, fields: dict[str, Any]) -> Any:
        if params.stream is True:
            return await self._stream_responses(params, fields)
        return await self.responses(params, fields)

    # --- stream: true ---

    async def _stream_chat(self, request: ChatCompletionRequest, fields: dict[str, Any]) -> Any:
        """The endpoint's chunks, relayed as they come."""
        stream = await self._open("/chat/completions", {**msgspec.to_builtins(request), **fields})
        return relay(self, stream, chat_relay(stream), chat_error_sse)

    async def _stream_responses(self, params: ResponseCreateParams, fields: dict[str, Any]) -> Any:
        """The endpoint's Responses events relayed as they come (``api: responses``), or its chat
        chunks as the events of the response they convert to (text and reasoning as they come,
        tool calls whole at the end)."""
        if self.config.api == "responses":
            stream = await self._open("/responses", {**_create_params_body(params), **fields})
            last = [-1]

            async def events() -> AsyncIterator[bytes]:
                async for _event, data in response_stream_events(stream):
                    number = data.get("sequence_number")
                    last[0] = number if isinstance(number, int) else last[0] + 1
                    yield sse_event(data) if isinstance(data.get("type"), str) else sse_data(data)

            def failed(message: str, kind: str, status: int) -> bytes:
                return response_error_sse(message, kind, status, last[0] + 1)

            return relay(self, stream, events(), failed)
        request = create_params_to_chat(params)
        extra = chat_fields(fields, request, owner=self.name, remedy=" (api: responses)")
        body = {**msgspec.to_builtins(request), **extra, "stream_options": {"include_usage": True}}
        stream = await self._open("/chat/completions", body)
        shell = Response(model=self.config.model)
        echo_params(shell, params)
        converter = ResponseEventStream(shell)

        async def finish(completion: dict[str, Any]) -> Response:
            return chat_completion_to_response(msgspec.convert(completion, ChatCompletion, strict=False), params)

        return relay(self, stream, chat_as_response_events(stream, converter, finish), converter.error)

    async def _open(self, path: str, body: dict[str, Any]) -> UpstreamStream:
        return await self.upstream.open_stream(
            self.base_url, path, {**body, **self.config.extra_body, "model": self.config.model, "stream": True}
        )

    # --- the model API ---

    async def chat_completions(
        self, request: ChatCompletionRequest, unmodelled: dict[str, Any] | None = None
    ) -> ChatCompletion:
        """Forward to the endpoint's ``/chat/completions``, with the request's ``unmodelled`` fields."""
        if self.config.extra_body or unmodelled:
            payload = await self._post("/chat/completions", {**msgspec.to_builtins(request), **(unmodelled or {})})
        else:  # the common case: encode the struct once, no detour through dicts
            payload = await self.upstream.post(
                self.base_url, "/chat/completions", msgspec.structs.replace(request, model=self.config.model)
            )
        completion = self.upstream.decode("/chat/completions", payload, self._completion_decoder.decode)
        if not completion.choices:  # e.g. 200 {"error": ...}: a failure, not an empty answer
            raise self.upstream.bad_answer("/chat/completions", "no choices", payload)
        return completion

    async def responses(self, params: ResponseCreateParams, unmodelled: dict[str, Any] | None = None) -> Response:
        """Forward to the endpoint's ``/responses``, or convert to ``/chat/completions`` and back."""
        unmodelled = unmodelled or {}
        if self.config.api == "chat_completions":
            request = create_params_to_chat(params)
            fields = chat_fields(unmodelled, request, owner=self.name, remedy=" (api: responses)")
            return chat_completion_to_response(await self.chat_completions(request, fields), params)
        payload = await self._post("/responses", {**_create_params_body(params), **unmodelled})
        response = self.upstream.decode("/responses", payload, decode_response)
        # A failed response, or a 200 that is no response at all ({"error": ...}, {}): not a model answer.
        empty = not response.output and response.status == "completed"
        if response.status == "failed" or response.error is not None or empty:
            raise self.upstream.bad_answer("/responses", f"status {response.status}", payload)
        return response

    async def _post(self, path: str, body: dict[str, Any]) -> bytes:
        return await self.upstream.post(
            self.base_url, path, {**body, **self.config.extra_body, "model": self.config.model}
        )


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
