"""Calls from a model server to the inference engine behind it: one policy for every such server.

A model server that fronts an engine (``openai_model``, ``azure_openai_model``, ``vllm_model``) is
the one layer that retries its upstream; what reaches its caller is final. This module holds how:

- **Slots.** At most ``max_concurrency`` requests in flight; a request waits for a slot at most
  ``queue_timeout_s``, never past the call's deadline or the caller's (:data:`REQUEST_DEADLINE`),
  then fails 503 ``model_overloaded``.
- **Retries.** Only connection errors and the statuses in ``retry_statuses`` are tried again, with
  the client's backoff, up to ``max_attempts`` and within ``timeout_s``. The default,
  :data:`BUSY_STATUSES` (429, 503), means "busy, try later": nothing was generated. A 5xx is not
  retried by default (the answer may have been generated, and billed, before the failure), nor is a
  timed-out attempt (the engine may still be generating it). A server whose engine is its own
  (nothing billed) may pass more statuses; ``vllm_model`` moves to another replica instead.
- **Typed failures** (:class:`UpstreamError`, answered with its ``status``, error type ``kind`` and
  the ``x-gym-final`` header by every gym server): ``upstream_timeout``, ``upstream_unavailable``,
  ``upstream_refused``, ``upstream_error`` (:func:`upstream_failure` is the mapping) and
  ``model_overloaded``. Their statuses, and what each layer does with them, are rows of the failure
  table (:mod:`gym_core.failures`, rendered in docs/reliability.md).
- **Secrets.** The API key (``secret``) is replaced by ``[api_key]`` in every message (an upstream,
  or a proxy before it, may echo the request's headers); credentials in a URL are left out of the
  names errors use (:func:`without_credentials`). The run's own token goes upstream only when a
  ``global_config`` is given and the upstream is one of the run's servers (:class:`ServerClient`).
- **Fields gym does not model.** :func:`raw_body_routes` serves ``/v1/chat/completions`` and
  ``/v1/responses`` from the raw body, so that a request's top-level fields gym's schemas do not
  model (``frequency_penalty``, ``logit_bias``, ``top_k``...) reach the engine as sent
  (:func:`unmodelled`); :func:`chat_fields` says which of a ``/v1/responses`` request's go on the
  chat completion it is converted to.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Collection, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec
from litestar.exceptions import HTTPException

from gym_core.client import REQUEST_DEADLINE, ServerClient
from gym_core.errors import (
    InfrastructureError,
    ServerCallError,
    ServerHTTPError,
    ServerTimeoutError,
    ServerUnavailableError,
)
from gym_core.failures import (
    BUSY_STATUSES,
    MODEL_OVERLOADED,
    UPSTREAM_ERROR,
    UPSTREAM_REFUSED,
    UPSTREAM_TIMEOUT,
    UPSTREAM_UNAVAILABLE,
)
from gym_core.openai_params import check_ranges
from gym_core.options import ClientConfig
from gym_core.schemas import ChatCompletionRequest, ResponseCreateParams, decode_create_params

if TYPE_CHECKING:
    from litestar import Request

    from gym_core.config import GlobalConfig
    from gym_core.servers import ModelServer

__all__ = [
    "Upstream",
    "UpstreamError",
    "upstream_failure",
    "BUSY_STATUSES",
    "CHAT_FIELDS",
    "RESPONSES_FIELDS",
    "RESPONSES_ONLY",
    "NEEDS_RESPONSES_API",
    "unmodelled",
    "chat_fields",
    "raw_body_routes",
    "refuse_streaming",
    "without_credentials",
]

T = TypeVar("T")

# The top-level fields gym's request schemas model; any other is the caller's, passed on as sent.
CHAT_FIELDS = frozenset(f.encode_name for f in msgspec.structs.fields(ChatCompletionRequest))
RESPONSES_FIELDS = frozenset(f.encode_name for f in msgspec.structs.fields(ResponseCreateParams))
# Responses API settings that chat completions do not have: not sent when converting to chat.
RESPONSES_ONLY = frozenset({"include", "truncation", "background", "max_tool_calls", "prompt", "stream_options"})
# ... and those whose meaning would be lost without them: refused (400) rather than dropped.
NEEDS_RESPONSES_API = ("previous_response_id", "conversation")


class UpstreamError(InfrastructureError):
    """A call to the engine that failed: answered ``status`` with error type ``kind``, final.

    ``upstream_status`` and ``detail`` are the engine's own status and message (redacted), when it
    answered one, for a server that reads some refusals otherwise (vLLM's context-length 400).
    """

    def __init__(self, message: str, status: int, kind: str, *, upstream_status: int | None = None, detail: str = ""):
        self.status = status
        self.kind = kind
        self.upstream_status = upstream_status
        self.detail = detail
        super().__init__(message)


def upstream_failure(exc: ServerCallError, retry_statuses: Collection[int] = BUSY_STATUSES,
                     redact: Callable[[str], str] = str) -> UpstreamError:  # fmt: skip
    """The typed failure a model server answers for a failed upstream call: ``upstream_timeout`` (no
    answer in time), ``upstream_unavailable`` (unreachable, or busy at every attempt: a status in
    ``retry_statuses``), ``upstream_refused`` (any other 4xx), else ``upstream_error``."""
    message = redact(str(exc))
    if isinstance(exc, ServerTimeoutError):
        failure = UPSTREAM_TIMEOUT
    elif isinstance(exc, ServerUnavailableError) or exc.status in retry_statuses:
        failure = UPSTREAM_UNAVAILABLE
    elif exc.status is not None and exc.status < 500:
        failure = UPSTREAM_REFUSED  # retrying the same request would not help
    else:
        failure = UPSTREAM_ERROR
    detail = redact(exc.detail) if isinstance(exc, ServerHTTPError) else ""
    return UpstreamError(message, failure.status, failure.type, upstream_status=exc.status, detail=detail)


class Upstream:
    """The calls one model server (``owner``, its instance name) makes to the engine it fronts.

    ``name`` is how errors name the engine (``"upstream http://host/v1"``); ``headers`` go with every
    request (the API key's header), and ``secret`` (the key) never appears in an error. One pooled
    client; see the module's docstring for the slots, retries and failures. ``client_config`` is the
    server's own (pool sizes, backoff); its timeouts and attempts are replaced by these.
    """

    def __init__(
        self,
        owner: str,
        *,
        name: str,
        timeout_s: float,
        max_attempts: int,
        max_concurrency: int,
        queue_timeout_s: float,
        headers: Mapping[str, str] | None = None,
        secret: str | None = None,
        retry_statuses: Collection[int] = BUSY_STATUSES,
        client_config: ClientConfig | None = None,
        global_config: GlobalConfig | None = None,
    ):
        self.owner = owner
        self.name = name
        self.timeout_s = timeout_s
        self.max_concurrency = max_concurrency
        self.queue_timeout_s = queue_timeout_s
        self.headers = dict(headers or {}) or None
        self.secret = secret
        self.retry_statuses = frozenset(retry_statuses)
        # timeout_s bounds the whole call (deadline_s) and so each attempt; a timed-out attempt is
        # not retried: the engine may still be generating it.
        config = msgspec.structs.replace(
            client_config or ClientConfig(), timeout_s=timeout_s, deadline_s=timeout_s, max_attempts=max_attempts,
            retry_timeouts=False,
        )  # fmt: skip
        self.client = ServerClient(global_config, config=config, retry_statuses=self.retry_statuses)
        self._slots = asyncio.Semaphore(max_concurrency)

    async def close(self) -> None:
        await self.client.close()

    async def post(self, base_url: str, path: str, body: Any, *, deadline: float | None = None,
                   name: str | None = None) -> bytes:  # fmt: skip
        """POST ``body`` (a msgspec-encodable object or bytes) to ``base_url + path``: the answer on 2xx.

        Waits for a slot, then sends with the client's bounded retries; ``deadline``
        (``time.monotonic()``), like the caller's own, bounds both. ``name`` names this endpoint
        in errors instead of :attr:`name`. Raises :class:`UpstreamError`.
        """
        caller = REQUEST_DEADLINE.get()
        if deadline is None or (caller is not None and caller < deadline):
            deadline = caller
        # No wait outlives the caller's: it gets this server's typed error, and the slot is freed.
        wait = (
            self.queue_timeout_s if deadline is None else max(min(self.queue_timeout_s, deadline - time.monotonic()), 0)
        )
        try:
            async with asyncio.timeout(wait):
                await self._slots.acquire()
        except TimeoutError:
            raise UpstreamError(
                f"{self.owner}: no upstream slot free within {wait:.3g} s (max_concurrency {self.max_concurrency},"
                " all busy)", MODEL_OVERLOADED.status, MODEL_OVERLOADED.type,
            ) from None  # fmt: skip
        # The client bounds its attempts and backoff by REQUEST_DEADLINE: ours, when it comes first.
        own = deadline if deadline is not None and deadline != caller else None
        token = REQUEST_DEADLINE.set(own) if own is not None else None
        limit = max(min(self.timeout_s, own - time.monotonic()), 0.001) if own is not None else None
        try:
            return await self.client.request(
                "POST", base_url, path, body=body, headers=self.headers, server_name=name or self.name, timeout_s=limit
            )
        except ServerCallError as exc:
            raise upstream_failure(exc, self.retry_statuses, self.redact) from None
        finally:
            if token is not None:
                REQUEST_DEADLINE.reset(token)
            self._slots.release()

    def decode(self, path: str, payload: bytes, decode: Callable[[bytes], T], *, name: str | None = None) -> T:
        """``decode(payload)``; an answer it cannot read is a :meth:`bad_answer`."""
        try:
            return decode(payload)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise self.bad_answer(path, f"unexpected answer ({exc})", payload, name=name) from None

    def bad_answer(self, path: str, what: str, payload: bytes, *, name: str | None = None) -> UpstreamError:
        """A 2xx answer that is no answer (``{"error": ...}``, no choices...): 502 ``upstream_error``,
        with the start of what came."""
        start = payload[:200].decode(errors="replace")
        return UpstreamError(
            self.redact(f"{name or self.name} {path}: {what}: {start}"), UPSTREAM_ERROR.status, UPSTREAM_ERROR.type
        )

    def redact(self, text: str) -> str:
        """``text`` with the API key replaced by ``[api_key]``."""
        return text.replace(self.secret, "[api_key]") if self.secret else text


# --- the request's fields gym does not model ----------------------------------------------------


def unmodelled(body: Any, modelled: frozenset[str]) -> dict[str, Any]:
    """The top-level fields of a request ``body`` gym's schema does not model; nulls mean "the
    default" and are left out."""
    if not isinstance(body, dict):
        return {}
    return {name: value for name, value in body.items() if name not in modelled and value is not None}


def chat_fields(fields: dict[str, Any], request: ChatCompletionRequest, *, owner: str,
                drop: Collection[str] = RESPONSES_ONLY, remedy: str = "") -> dict[str, Any]:  # fmt: skip
    """The unmodelled ``fields`` of a ``/v1/responses`` request that go on ``request``, the chat
    completion it was converted to.

    Settings chat completions lack (``drop``) are left out; those whose meaning would be lost
    (:data:`NEEDS_RESPONSES_API`) are refused with a 400 naming them, ``remedy`` appended;
    ``top_logprobs`` becomes chat's ``logprobs: true`` + ``top_logprobs`` on ``request``.
    """
    for name in NEEDS_RESPONSES_API:
        if name in fields:
            raise HTTPException(
                status_code=400,
                detail=f"{owner}: {name!r} needs a Responses API endpoint{remedy}; this server converts"
                " /v1/responses to chat completions, which keep no conversation state",
            )
    kept = {name: value for name, value in fields.items() if name not in drop}
    if "top_logprobs" in kept:  # chat asks for log-probs in two fields
        request.logprobs = True
        request.top_logprobs = kept.pop("top_logprobs")
    return kept


def refuse_streaming(stream: bool | None) -> None:
    """A 400 for ``stream: true``: gym model servers answer whole responses."""
    if stream is True:
        raise HTTPException(
            status_code=400, detail="streaming is not supported by gym model servers; send stream=false"
        )


ChatHandler = Callable[["Request", ChatCompletionRequest, dict[str, Any]], Awaitable[Any]]
ResponsesHandler = Callable[["Request", ResponseCreateParams, dict[str, Any]], Awaitable[Any]]


def raw_body_routes(
    server: ModelServer, inherited: list[Any], *, chat: ChatHandler, responses: ResponsesHandler
) -> list[Any]:
    """``inherited`` (the server's ``super().routes()``) with ``POST /v1/chat/completions`` and
    ``POST /v1/responses`` served from the raw body: each handler gets the request, the decoded
    body and its :func:`unmodelled` fields. Streaming is refused (400) before the handler runs.
    """

    async def chat_route(request: Request) -> Any:
        body = msgspec.json.decode(await request.body())
        check_ranges(body, server.name)
        parsed = msgspec.convert(body, ChatCompletionRequest)
        refuse_streaming(parsed.stream)
        return await chat(request, parsed, unmodelled(body, CHAT_FIELDS))

    async def responses_route(request: Request) -> Any:
        raw = await request.body()
        body = msgspec.json.decode(raw)
        check_ranges(body, server.name)
        params = decode_create_params(body if isinstance(body, dict) else raw)
        refuse_streaming(params.stream)
        return await responses(request, params, unmodelled(body, RESPONSES_FIELDS))

    own = {"/v1/chat/completions": chat_route, "/v1/responses": responses_route}
    kept = [route for route in inherited if not own.keys() & set(getattr(route, "paths", ()))]
    return [*kept, *(server.post_json(path, fn) for path, fn in own.items())]


def without_credentials(url: str) -> str:
    """``url`` without a ``user:password@`` part, for messages and logs."""
    scheme, sep, rest = url.partition("://")
    host, slash, path = rest.partition("/")
    return f"{scheme}{sep}{host.rpartition('@')[2]}{slash}{path}"
