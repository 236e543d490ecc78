"""The ``azure_openai_model`` server: gym's model API in front of one Azure OpenAI deployment.

Every model call is a chat completion at
``{endpoint}/openai/deployments/{deployment}/chat/completions?api-version={api_version}`` with the
key in the ``api-key`` header, as Azure expects. ``/v1/chat/completions`` is forwarded;
``/v1/responses`` is converted to a chat completion and back (:mod:`gym_core.convert`), as the
deployment's chat API is the one every Azure model and API version has.

Each call waits at most ``queue_timeout_s`` for one of ``max_concurrency`` slots, and goes through
one pooled :class:`ServerClient`: retried only on connection errors and 429/503 (nothing was
generated), all attempts within ``timeout_s`` and the caller's own wait. Failures reach the caller as
gym JSON errors with a typed ``type`` and the ``x-gym-final`` header (this server spent the retries):
``model_overloaded`` (503, no slot in time), ``upstream_timeout`` (504), ``upstream_unavailable`` and
``upstream_error`` (502: unreachable, busy after every attempt, a 5xx, or an answer that is not a
completion), and ``upstream_refused`` (424: Azure refused the request: a wrong key, deployment or
api-version, a filtered prompt, a context too long). The API key never appears in an answer or a log line.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import msgspec

from gym_core import ModelServer, ServerClient
from gym_core.client import REQUEST_DEADLINE
from gym_core.convert import chat_completion_to_response, create_params_to_chat
from gym_core.errors import InfrastructureError, ServerCallError, ServerTimeoutError, ServerUnavailableError
from gym_core.schemas import ChatCompletion, ChatCompletionRequest, IncompleteDetails, Response, ResponseCreateParams

from gym_azure_openai_model.config import AzureOpenAIModelConfig

__all__ = ["AzureOpenAIModel", "AzureCallError"]

# Upstream answers worth another attempt: "busy, try later", with nothing generated. A 500 is not
# retried: the deployment may have generated (and billed) the answer before failing.
UPSTREAM_RETRY_STATUSES = frozenset({429, 503})


class AzureCallError(InfrastructureError):
    """A model call that failed upstream: answered with ``status`` and error type ``kind``, final."""

    def __init__(self, message: str, status: int, kind: str):
        self.status = status
        self.kind = kind
        super().__init__(message)


class AzureOpenAIModel(ModelServer):
    config: AzureOpenAIModelConfig

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        cfg = self.config
        self.model_name = cfg.model_name or cfg.deployment
        # The deployment and api-version are the whole URL: the body's `model` does not pick a model on Azure.
        self.path = f"/openai/deployments/{cfg.deployment}/chat/completions?api-version={cfg.api_version}"
        self.endpoint = cfg.endpoint.rstrip("/")
        # timeout_s bounds the whole call and so each attempt; a timed-out attempt is not retried:
        # the deployment may still be generating it.
        upstream_config = msgspec.structs.replace(
            cfg.client, timeout_s=cfg.timeout_s, deadline_s=cfg.timeout_s, max_attempts=cfg.max_attempts,
            retry_timeouts=False,
        )  # fmt: skip
        # No global config: the run's token is for the run's servers, never for Azure.
        self.upstream = ServerClient(config=upstream_config, retry_statuses=UPSTREAM_RETRY_STATUSES)
        self._upstream_name = f"azure {self.endpoint} deployment {cfg.deployment}"
        self._headers = {"api-key": cfg.api_key}
        self._slots = asyncio.Semaphore(cfg.max_concurrency)
        # Lenient: numbers as Azure sends them; its extra fields (content filter results) are ignored.
        self._completion_decoder = msgspec.json.Decoder(ChatCompletion, strict=False)

    async def shutdown(self) -> None:
        await self.upstream.close()

    async def chat_completions(self, request: ChatCompletionRequest) -> ChatCompletion:
        """Forward to the deployment's chat completions; the answer names this server's model."""
        # Token ids are gym's extension, which Azure refuses as an unknown argument.
        request = msgspec.structs.replace(request, model=self.config.deployment, return_token_ids=None)
        body: Any = {**msgspec.to_builtins(request), **self.config.extra_body} if self.config.extra_body else request
        payload = await self._send(body)
        try:
            completion = self._completion_decoder.decode(payload)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise self._bad_answer(f"unexpected answer ({exc})", payload) from None
        if not completion.choices:  # e.g. 200 {"error": ...}: a failure, not an empty answer
            raise self._bad_answer("no choices", payload)
        return completion

    async def responses(self, params: ResponseCreateParams) -> Response:
        """Convert to a chat completion of the deployment, and its answer back to a Response."""
        completion = await self.chat_completions(create_params_to_chat(params))
        response = chat_completion_to_response(completion, params)
        response.model = self.model_name
        if completion.choices[0].finish_reason == "content_filter":  # Azure's filter cut the answer short
            response.status = "incomplete"
            response.incomplete_details = IncompleteDetails(reason="content_filter")
        return response

    async def _send(self, body: Any) -> bytes:
        cfg = self.config
        # No wait outlives the caller's: it gets this server's typed error, and the slot is freed.
        deadline = REQUEST_DEADLINE.get()
        queue_wait = cfg.queue_timeout_s if deadline is None else min(cfg.queue_timeout_s, deadline - time.monotonic())
        try:
            async with asyncio.timeout(max(queue_wait, 0)):
                await self._slots.acquire()
        except TimeoutError:
            raise AzureCallError(
                f"{self.name}: no upstream slot free within {max(queue_wait, 0):.3g} s"
                f" (max_concurrency {cfg.max_concurrency}, all busy)", 503, "model_overloaded",
            ) from None  # fmt: skip
        try:
            return await self.upstream.request(
                "POST", self.endpoint, self.path, body=body, headers=self._headers, server_name=self._upstream_name
            )
        except ServerCallError as exc:
            raise self._failure(exc) from None
        finally:
            self._slots.release()

    def _failure(self, exc: ServerCallError) -> AzureCallError:
        message = self._redact(str(exc))
        if isinstance(exc, ServerTimeoutError):
            return AzureCallError(message, 504, "upstream_timeout")
        if isinstance(exc, ServerUnavailableError) or exc.status in UPSTREAM_RETRY_STATUSES:
            return AzureCallError(message, 502, "upstream_unavailable")
        if exc.status is not None and exc.status < 500:
            return AzureCallError(message, 424, "upstream_refused")  # retrying the same request would not help
        return AzureCallError(message, 502, "upstream_error")

    def _bad_answer(self, what: str, payload: bytes) -> AzureCallError:
        start = payload[:200].decode(errors="replace")
        return AzureCallError(self._redact(f"{self._upstream_name}: {what}: {start}"), 502, "upstream_error")

    def _redact(self, text: str) -> str:
        # An upstream (or a proxy before it) may echo the request's headers in an error; the key stays ours.
        return text.replace(self.config.api_key, "[api_key]")
