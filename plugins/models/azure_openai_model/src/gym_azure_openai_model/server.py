"""The ``azure_openai_model`` server: gym's model API in front of one Azure OpenAI deployment.

Every model call is a chat completion at
``{endpoint}/openai/deployments/{deployment}/chat/completions?api-version={api_version}`` with the
key in the ``api-key`` header, as Azure expects. ``/v1/chat/completions`` is forwarded;
``/v1/responses`` is converted to a chat completion and back (:mod:`gym_core.convert`), as the
deployment's chat API is the one every Azure model and API version has. Request fields gym's
schemas do not model (``frequency_penalty``, ``logit_bias``, ``user``...) are forwarded as the
caller sent them (Azure refuses those it does not know: 424); when converting, Responses-only
settings without a chat counterpart are left out.

Slots, retries and typed failures are gym's policy for servers in front of an engine
(:mod:`gym_core.upstream`): at most ``queue_timeout_s`` for one of ``max_concurrency`` slots,
retried only on connection errors and 429/503 (nothing was generated; a 500 is not retried, the
deployment may have generated and billed the answer), all attempts within ``timeout_s`` and the
caller's own wait. Failures reach the caller as gym JSON errors with a typed ``type`` and the
``x-gym-final`` header (this server spent the retries): ``model_overloaded`` (503, no slot in time),
``upstream_timeout`` (504), ``upstream_unavailable`` and ``upstream_error`` (502: unreachable, busy
after every attempt, a 5xx, or an answer that is not a completion), and ``upstream_refused`` (424:
Azure refused the request: a wrong key, deployment or api-version, a filtered prompt, a context too
long). The API key never appears in an answer or a log line.
"""

from __future__ import annotations

from typing import Any

import msgspec
from litestar import Request

from gym_core import ModelServer
from gym_core.convert import chat_completion_to_response, create_params_to_chat, echo_params
from gym_core.schemas import ChatCompletion, ChatCompletionRequest, IncompleteDetails, Response, ResponseCreateParams
from gym_core.streaming import ResponseEventStream, chat_error_sse
from gym_core.upstream import (
    Upstream,
    UpstreamStream,
    chat_as_response_events,
    chat_fields,
    chat_relay,
    raw_body_routes,
    relay,
    without_credentials,
)

from gym_azure_openai_model.config import AzureOpenAIModelConfig

__all__ = ["AzureOpenAIModel"]


class AzureOpenAIModel(ModelServer):
    config: AzureOpenAIModelConfig

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        cfg = self.config
        self.model_name = cfg.model_name or cfg.deployment
        # The deployment and api-version are the whole URL: the body's `model` does not pick a model on Azure.
        self.path = f"/openai/deployments/{cfg.deployment}/chat/completions?api-version={cfg.api_version}"
        self.endpoint = cfg.endpoint.rstrip("/")
        # No global config: the run's token is for the run's servers, never for Azure.
        self.upstream = Upstream(
            self.name, name=f"azure {without_credentials(self.endpoint)} deployment {cfg.deployment}",
            timeout_s=cfg.timeout_s, max_attempts=cfg.max_attempts, max_concurrency=cfg.max_concurrency,
            queue_timeout_s=cfg.queue_timeout_s, headers={"api-key": cfg.api_key}, secret=cfg.api_key,
            client_config=cfg.client,
        )  # fmt: skip
        # Lenient: numbers as Azure sends them; its extra fields (content filter results) are ignored.
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
            stream = await self._open(chat, fields)
            return relay(self, stream, chat_relay(stream), chat_error_sse)
        return await self.chat_completions(chat, fields)

    async def _responses_route(self, request: Request, params: ResponseCreateParams, fields: dict[str, Any]) -> Any:
        if params.stream is not True:
            return await self.responses(params, fields)
        # The deployment's chunks as the events of the response they convert to: text and
        # reasoning as they come, tool calls whole at the end.
        chat = create_params_to_chat(params)
        extra = chat_fields(fields, chat, owner=self.name)
        stream = await self._open(chat, {**extra, "stream_options": {"include_usage": True}})
        shell = Response(model=self.model_name)
        echo_params(shell, params)
        converter = ResponseEventStream(shell)

        async def finish(completion: dict[str, Any]) -> Response:
            return self._to_response(msgspec.convert(completion, ChatCompletion, strict=False), params)

        return relay(self, stream, chat_as_response_events(stream, converter, finish), converter.error)

    async def _open(self, request: ChatCompletionRequest, fields: dict[str, Any]) -> UpstreamStream:
        """The deployment's stream of chat chunks for ``request`` (``stream: true``)."""
        request = msgspec.structs.replace(request, model=self.config.deployment, return_token_ids=None, stream=True)
        body = {**msgspec.to_builtins(request), **fields, **self.config.extra_body}
        return await self.upstream.open_stream(self.endpoint, self.path, body)

    async def chat_completions(
        self, request: ChatCompletionRequest, unmodelled: dict[str, Any] | None = None
    ) -> ChatCompletion:
        """Forward to the deployment's chat completions, with the request's ``unmodelled`` fields."""
        # Token ids are gym's extension, which Azure refuses as an unknown argument.
        request = msgspec.structs.replace(request, model=self.config.deployment, return_token_ids=None)
        extra = {**(unmodelled or {}), **self.config.extra_body}
        body: Any = {**msgspec.to_builtins(request), **extra} if extra else request
        payload = await self.upstream.post(self.endpoint, self.path, body)
        completion = self.upstream.decode(self.path, payload, self._completion_decoder.decode)
        if not completion.choices:  # e.g. 200 {"error": ...}: a failure, not an empty answer
            raise self.upstream.bad_answer(self.path, "no choices", payload)
        return completion

    async def responses(self, params: ResponseCreateParams, unmodelled: dict[str, Any] | None = None) -> Response:
        """Convert to a chat completion of the deployment, and its answer back to a Response."""
        request = create_params_to_chat(params)
        completion = await self.chat_completions(request, chat_fields(unmodelled or {}, request, owner=self.name))
        return self._to_response(completion, params)

    def _to_response(self, completion: ChatCompletion, params: ResponseCreateParams) -> Response:
        response = chat_completion_to_response(completion, params)
        response.model = self.model_name
        if completion.choices[0].finish_reason == "content_filter":  # Azure's filter cut the answer short
            response.status = "incomplete"
            response.incomplete_details = IncompleteDetails(reason="content_filter")
        return response
