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
- **Streaming.** :meth:`Upstream.open_stream` sends a ``stream: true`` request on a connection of
  its own and returns once the engine's answer has begun (an :class:`UpstreamStream`): before the
  first byte, the same slots, retries and typed failures as :meth:`Upstream.post`; after it, every
  read is bounded by ``timeout_s`` and the caller's deadline, and a stream that breaks off, ends
  early (no ``[DONE]``) or times out raises :class:`UpstreamError` from its iterator. :func:`relay`
  is the streaming answer: it ends a stream that failed midway with an error event the ``openai``
  client raises, and aborts the engine's connection (which cancels its request) and frees the slot
  when the stream ends or the caller disconnects. :func:`chat_relay` and
  :func:`chat_as_response_events` are the usual bodies (:mod:`gym_core.relay` reads an upstream's
  events, :mod:`gym_core.streaming` writes the caller's).
- **Fields gym does not model.** :func:`raw_body_routes` serves ``/v1/chat/completions`` and
  ``/v1/responses`` from the raw body, so that a request's top-level fields gym's schemas do not
  model (``frequency_penalty``, ``logit_bias``, ``top_k``...) reach the engine as sent
  (:func:`unmodelled`); :func:`chat_fields` says which of a ``/v1/responses`` request's go on the
  chat completion it is converted to.
"""

from __future__ import annotations

import asyncio
import random
import secrets
import ssl
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Mapping
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import httptools
import msgspec
from litestar.exceptions import HTTPException
from litestar.response import Stream

from gym_core.client import REQUEST_DEADLINE, ServerClient, error_fields
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
from gym_core.http1 import Origin, origin_of, request_head
from gym_core.openai_params import check_ranges
from gym_core.options import ClientConfig
from gym_core.relay import SSE, ChatAssembler, SSEDecoder
from gym_core.schemas import ChatCompletionRequest, Response, ResponseCreateParams, decode_create_params
from gym_core.streaming import EVENT_STREAM, SSE_DONE, ResponseEventStream, sse_data

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
    "UpstreamStream",
    "chat_chunks",
    "chat_relay",
    "chat_as_response_events",
    "TextSplitter",
    "response_stream_events",
    "relay",
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
        await self._acquire_slot(wait)
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

    async def _acquire_slot(self, wait: float) -> None:
        """One of ``max_concurrency`` slots within ``wait`` seconds, else a typed 503 ``model_overloaded``."""
        try:
            async with asyncio.timeout(wait):
                await self._slots.acquire()
        except TimeoutError:
            raise UpstreamError(
                f"{self.owner}: no upstream slot free within {wait:.3g} s (max_concurrency {self.max_concurrency},"
                " all busy)", MODEL_OVERLOADED.status, MODEL_OVERLOADED.type,
            ) from None  # fmt: skip

    async def open_stream(self, base_url: str, path: str, body: Any, *, deadline: float | None = None,
                          name: str | None = None) -> UpstreamStream:  # fmt: skip
        """POST ``body`` (``stream: true`` in it) to ``base_url + path`` and read the answer's head:
        its events to come, on a 2xx (:meth:`UpstreamStream.events`).

        Before the first byte of the answer, as :meth:`post`: a slot within ``queue_timeout_s``,
        connection errors and ``retry_statuses`` tried again with the client's backoff up to
        ``max_attempts``, and every failure a typed :class:`UpstreamError` (an error status is read
        whole). The whole stream is bounded by ``timeout_s``, ``deadline`` and the caller's
        deadline. The stream holds its slot and its own connection (not pooled) until
        :meth:`UpstreamStream.close`, which aborts the connection: the engine sees the request
        cancelled.
        """
        caller = REQUEST_DEADLINE.get()
        deadline = min(d for d in (deadline, caller, time.monotonic() + self.timeout_s) if d is not None)
        wait = max(min(self.queue_timeout_s, deadline - time.monotonic()), 0)
        await self._acquire_slot(wait)
        name = name or self.name
        try:
            return await self._open_stream(base_url, path, body, deadline, name)
        except BaseException:
            self._slots.release()
            raise

    async def _open_stream(self, base_url: str, path: str, body: Any, deadline: float, name: str) -> UpstreamStream:
        cfg = self.client.config
        try:
            origin = origin_of(base_url)
        except ValueError as exc:
            raise UpstreamError(self.redact(f"{name}: {exc}"), UPSTREAM_ERROR.status, UPSTREAM_ERROR.type) from None
        # the run's token, for an upstream that is one of the run's servers
        headers = {**(self.client.auth_headers(base_url) or {}), **(self.headers or {})}
        data = body if isinstance(body, bytes) else msgspec.json.encode(body)
        attempt = 0
        while True:
            attempt += 1
            stream = UpstreamStream(self, name, path, deadline)
            try:
                await stream.send(
                    origin, headers, data, min(cfg.connect_timeout_s, max(deadline - time.monotonic(), 0))
                )
                if stream.status < 400:
                    return stream
                message, error_type = error_fields(await stream.read_all())
                stream.close(release=False)
                error: ServerCallError = ServerHTTPError(
                    name, path, message, status=stream.status, attempts=attempt, error_type=error_type
                )
                retryable = stream.status in self.retry_statuses
            except TimeoutError:
                stream.close(release=False)
                error = ServerTimeoutError(name, path, f"no answer within {self.timeout_s:g} s", attempts=attempt)
                retryable = False
            except (OSError, ConnectionError, httptools.HttpParserError) as exc:
                stream.close(release=False)
                error, retryable = ServerUnavailableError(name, path, str(exc) or repr(exc), attempts=attempt), True
            except ValueError as exc:  # a header with a line break: the request itself is wrong
                stream.close(release=False)
                error, retryable = ServerCallError(name, path, str(exc), attempts=attempt), False
            except BaseException:
                stream.close(release=False)
                raise
            delay = min(cfg.backoff_max_s, cfg.backoff_s * 2 ** (attempt - 1)) * (0.5 + random.random())
            if not retryable or attempt >= cfg.max_attempts or time.monotonic() + delay > deadline:
                raise upstream_failure(error, self.retry_statuses, self.redact)
            await asyncio.sleep(delay)

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


class UpstreamStream:
    """One streamed answer of the engine, on a connection of its own: :meth:`events` as they arrive.

    Every read is bounded by the stream's deadline. :meth:`events` raises :class:`UpstreamError`
    when the stream fails before its end: ``upstream_timeout`` past the deadline,
    ``upstream_error`` when the engine closes the connection mid-answer or sends what is not HTTP.
    :meth:`close` (idempotent) aborts the connection and frees the slot.
    """

    def __init__(self, upstream: Upstream, name: str, path: str, deadline: float):
        self.upstream = upstream
        self.name = name
        self.path = path
        self.deadline = deadline
        self.status = 0
        self.headers: list[tuple[str, str]] = []
        self.complete = False
        self._parser = httptools.HttpResponseParser(self)
        self._head_done = False
        self._body: list[bytes] = []
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._closed = False
        self.expired = False

    # httptools' callbacks
    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name.decode("latin-1").lower(), value.decode("latin-1")))

    def on_headers_complete(self) -> None:
        self.status = self._parser.get_status_code()
        self._head_done = self.status >= 200

    def on_body(self, body: bytes) -> None:
        self._body.append(body)

    def on_message_complete(self) -> None:
        if self._head_done:
            self.complete = True
        else:  # an interim answer (100 Continue): the real one follows
            self.headers = []

    async def send(self, origin: Origin, headers: dict[str, str], data: bytes, connect_timeout: float) -> None:
        """Connect, send the request, and read the answer's head."""
        context = ssl.create_default_context() if origin.scheme == "https" else None
        async with asyncio.timeout(connect_timeout):
            self._reader, self._writer = await asyncio.open_connection(origin.host, origin.port, ssl=context)
        head = request_head("POST", origin, self.path, {"accept": EVENT_STREAM, **headers,
                            "content-type": "application/json", "content-length": str(len(data)), "connection": "close"})  # fmt: skip
        self._writer.write(head + data)
        while not self._head_done:
            if not await self._read():
                raise ConnectionError("the server closed the connection before answering")

    async def _read(self) -> bool:
        """Read what comes next into the parser, within the deadline; False at the end of the connection."""
        assert self._reader is not None
        async with asyncio.timeout(max(self.deadline - time.monotonic(), 0)):
            data = await self._reader.read(65_536)
        if not data:
            return False
        self._parser.feed_data(data)
        return True

    async def read_all(self) -> bytes:
        """The rest of the body (an error answer), within the deadline."""
        while not self.complete and await self._read():
            pass
        return b"".join(self._body)

    async def events(self) -> AsyncIterator[SSE]:
        """The answer's server-sent events, each as soon as it is whole."""
        decoder = SSEDecoder()
        kind = next((value for key, value in self.headers if key == "content-type"), "")
        try:
            if kind.startswith("application/json"):  # a whole answer: this engine does not stream
                start = (await self.read_all())[:200].decode(errors="replace")
                raise self._failure(UPSTREAM_ERROR, f"stream: true answered with JSON, not events: {start}")
            while True:
                chunks, self._body = self._body, []
                for chunk in chunks:
                    for event in decoder.feed(chunk):
                        yield event
                if self.complete:
                    return
                if not await self._read():
                    if self.expired or any(key in ("content-length", "transfer-encoding") for key, _ in self.headers):
                        raise ConnectionError("the connection closed before the end of the stream")
                    self.complete = True  # an answer without a length ends with its connection
        except (TimeoutError, OSError, ConnectionError, httptools.HttpParserError) as exc:
            if isinstance(exc, TimeoutError) or self.expired:
                raise self._failure(UPSTREAM_TIMEOUT, f"the stream did not end within {self.upstream.timeout_s:g} s"
                                    " (timeout_s) or the caller's deadline") from None  # fmt: skip
            raise self._failure(UPSTREAM_ERROR, f"the stream broke off: {exc}") from None

    def _failure(self, failure: Any, what: str) -> UpstreamError:
        return UpstreamError(self.upstream.redact(f"{self.name} {self.path}: {what}"), failure.status, failure.type)

    def expire(self) -> None:
        """Past the deadline, wherever the stream is (its relay may be stuck sending to a caller who
        does not read): closed, and what reads it next fails ``upstream_timeout``."""
        self.expired = True
        self.close()

    def close(self, *, release: bool = True) -> None:
        """Abort the connection (the engine stops generating) and, once, free the slot."""
        if self._writer is not None:
            self._writer.transport.abort()
            self._writer = None
        if release and not self._closed:
            self._closed = True
            self.upstream._slots.release()


# --- relaying a stream ---------------------------------------------------------------------------

_TERMINAL = frozenset({"response.completed", "response.incomplete", "response.failed"})


async def chat_chunks(stream: UpstreamStream) -> AsyncIterator[dict[str, Any]]:
    """The ``chat.completion.chunk`` objects of a streamed chat completion, up to ``[DONE]``.

    Raises :class:`UpstreamError` (``upstream_error``) for an error event (``{"error": ...}``), an
    event that is not a JSON object, and a stream that ends without ``[DONE]``.
    """
    async for event in stream.events():
        if event.data.startswith("[DONE]"):
            return
        chunk = _event_object(stream, event)
        if "error" in chunk:
            raise stream._failure(UPSTREAM_ERROR, f"error event: {event.data[:500]}")
        yield chunk
    raise stream._failure(UPSTREAM_ERROR, "the stream ended without [DONE]")


async def response_stream_events(stream: UpstreamStream) -> AsyncIterator[tuple[SSE, dict[str, Any]]]:
    """The events of a streamed Responses API answer (each with its decoded data), up to its last
    (``response.completed``, ``.incomplete`` or ``.failed``, which is yielded too).

    Raises :class:`UpstreamError` (``upstream_error``) for an ``error`` event (relayed as it came,
    the ``openai`` client would not raise on it: the relay ends the stream with gym's own error
    event instead), for data that is not a JSON object and for a stream that ends before its last
    event.
    """
    async for event in stream.events():
        data = _event_object(stream, event)
        if (event.event or data.get("type")) == "error":
            raise stream._failure(UPSTREAM_ERROR, f"error event: {event.data[:500]}")
        yield event, data
        if (event.event or data.get("type")) in _TERMINAL:
            return
    raise stream._failure(UPSTREAM_ERROR, "the stream ended before response.completed")


async def chat_relay(stream: UpstreamStream) -> AsyncIterator[bytes]:
    """A streamed chat completion relayed as it comes, chunk by chunk, ``[DONE]`` last."""
    async for chunk in chat_chunks(stream):
        yield sse_data(chunk)
    yield SSE_DONE


class TextSplitter(Protocol):
    """What takes reasoning out of text that arrives in pieces (``<think>`` tags, say)."""

    def feed(self, piece: str) -> tuple[str, str]:
        """The reasoning and the text of ``piece`` (what may be the start of a tag held back)."""
        ...

    def flush(self) -> tuple[str, str]:
        """The reasoning and the text held back, at the end."""
        ...


async def chat_as_response_events(
    stream: UpstreamStream,
    events: ResponseEventStream,
    finish: Callable[[dict[str, Any]], Awaitable[Response]],
    split: TextSplitter | None = None,
) -> AsyncIterator[bytes]:
    """A streamed chat completion as the Responses events of the response it converts to.

    The first choice's reasoning (``reasoning_content`` or ``reasoning``) and text become
    :class:`~gym_core.streaming.ResponseEventStream` deltas as they come (``split``, when given, takes
    reasoning out of each piece of text, and gives what it held back at the end); at ``[DONE]``,
    ``finish`` makes the whole response from the assembled completion (a dict), and its events end
    the stream.
    """
    yield events.start()
    assembler = ChatAssembler()
    async for chunk in chat_chunks(stream):
        assembler.feed(chunk)
        choices = chunk.get("choices") or []
        choice = choices[0] if choices and isinstance(choices[0], dict) else {}
        if choice.get("index", 0) != 0:
            continue
        delta = choice.get("delta") or {}
        reasoning = delta.get("reasoning_content") or delta.get("reasoning") or ""
        text = delta.get("content") or ""
        if split is not None and text:
            thought, text = split.feed(text)
            reasoning += thought
        logprobs = choice.get("logprobs")
        entries = logprobs.get("content") if isinstance(logprobs, dict) else None
        yield events.feed(text, reasoning, entries if text else None)
    if split is not None:
        thought, text = split.flush()
        yield events.feed(text, thought)
    completion = assembler.completion()
    if not completion["choices"]:
        raise stream._failure(UPSTREAM_ERROR, "a stream without choices")
    yield events.finish(await finish(completion))


def _event_object(stream: UpstreamStream, event: SSE) -> dict[str, Any]:
    try:
        data = msgspec.json.decode(event.data)
    except msgspec.DecodeError:
        data = None
    if not isinstance(data, dict):
        raise stream._failure(UPSTREAM_ERROR, f"an event that is not a JSON object: {event.data[:200]!r}")
    return data


def relay(
    server: ModelServer,
    stream: UpstreamStream,
    body: AsyncIterator[bytes],
    on_error: Callable[[str, str, int], bytes],
) -> Any:
    """The streaming answer (``text/event-stream``) that sends ``body``'s pieces as they come.

    A failure midway (an :class:`UpstreamError`, or any other exception, logged with an id) ends
    the stream with ``on_error(message, type, status)``, an event the client raises. The upstream
    connection is closed when the stream ends, fails, or the caller disconnects (which cancels it).
    """

    # Every read of the stream is bounded by its deadline, but not a relay stuck sending to a caller
    # who stopped reading: at the deadline (and a second) the engine's connection and the slot go.
    watchdog = asyncio.get_running_loop().call_later(max(stream.deadline - time.monotonic(), 0) + 1, stream.expire)

    async def pieces() -> AsyncIterator[bytes]:
        try:
            async for piece in body:
                yield piece
        except UpstreamError as exc:
            stream.close()  # before the error event, whose sending may wait on the caller
            server.log.warning("stream failed midway: %s: %s", exc.kind, exc)
            yield on_error(str(exc), exc.kind, exc.status)
        except Exception:
            stream.close()
            error_id = secrets.token_hex(4)
            server.log.exception("unhandled error %s while streaming", error_id)
            yield on_error(f"internal error in {server.name} (error id {error_id}: see its log)", "internal_error", 500)
        finally:
            watchdog.cancel()
            stream.close()

    iterator = pieces()
    # A stream whose answer is never sent (the caller left before it began) never runs its
    # `finally`: the connection and the slot are given back when it is collected.
    weakref.finalize(iterator, stream.close)
    return Stream(iterator, media_type=EVENT_STREAM, headers={"cache-control": "no-cache"})


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
    """A 400 for ``stream: true``, from a server whose routes do not stream (``raw_body_routes``
    without ``streams``)."""
    if stream is True:
        raise HTTPException(status_code=400, detail="streaming is not supported by this server; send stream=false")


ChatHandler = Callable[["Request", ChatCompletionRequest, dict[str, Any]], Awaitable[Any]]
ResponsesHandler = Callable[["Request", ResponseCreateParams, dict[str, Any]], Awaitable[Any]]


def raw_body_routes(
    server: ModelServer,
    inherited: list[Any],
    *,
    chat: ChatHandler,
    responses: ResponsesHandler,
    streams: bool = False,
) -> list[Any]:
    """``inherited`` (the server's ``super().routes()``) with ``POST /v1/chat/completions`` and
    ``POST /v1/responses`` served from the raw body: each handler gets the request, the decoded
    body and its :func:`unmodelled` fields. Streaming is refused (400) before the handler runs,
    unless the handlers stream (``streams``: they answer ``stream: true`` themselves).
    """

    async def chat_route(request: Request) -> Any:
        body = msgspec.json.decode(await request.body())
        check_ranges(body, server.name)
        parsed = msgspec.convert(body, ChatCompletionRequest)
        if not streams:
            refuse_streaming(parsed.stream)
        return await chat(request, parsed, unmodelled(body, CHAT_FIELDS))

    async def responses_route(request: Request) -> Any:
        raw = await request.body()
        body = msgspec.json.decode(raw)
        check_ranges(body, server.name)
        params = decode_create_params(body if isinstance(body, dict) else raw)
        if not streams:
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
