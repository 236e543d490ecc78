"""The ``vllm_model`` model server: gym's model API in front of one or more vLLM OpenAI-compatible servers.

``/v1/responses`` is converted to a vLLM chat completion (gym-core's converter) and back;
``/v1/chat/completions`` goes through the same pipeline. What this server adds to a plain
OpenAI-compatible proxy (``openai_model``):

- **Replicas and session affinity.** With several ``base_url``\\ s, a session (this server's session
  cookie) is assigned the replica ``SHA-256(session id)[:8] (big-endian) mod replicas``
  (:func:`replica_index`): a pure function of the id, so every gym process agrees without sharing
  state, and vLLM's prefix cache stays warm for the session's later turns. A replica that cannot
  be reached or answers 5xx (after ``max_attempts``) is skipped for ``replica_cooldown_s``; the
  session moves to the next replica and stays there. When every replica fails: 502
  ``upstream_unavailable``.
- **Reasoning.** Reasoning items of earlier turns go back to vLLM as its ``reasoning_content`` and
  ``reasoning`` fields (or inline as ``<think>…</think>``); vLLM's reasoning fields and
  ``<think>…</think>`` text in a reply become one reasoning item.
- **Token ids and log-probs** (training mode: ``return_token_id_information``, or a request's
  ``return_token_ids: true``): asked of vLLM with its extensions (``logprobs``, ``top_logprobs: 0``,
  ``return_tokens_as_token_ids``, optionally ``return_token_ids``; else its ``/tokenize`` for the
  prompt), checked, and put on the last output item; on later turns they go back on the assistant
  messages they came with.
- **Context overflow.** vLLM's 400 for a prompt that does not fit the context window becomes an
  ``incomplete`` response (``max_output_tokens``) with one empty message, not an error.

Slots, retries and typed failures are gym's policy for servers in front of an engine
(:mod:`gym_core.upstream`); failures are gym JSON errors with the ``x-gym-final`` header:
``upstream_unavailable`` (502), ``upstream_error`` (502: a reply that is not a completion, or token
data that does not check out), ``upstream_timeout`` (504), ``upstream_refused`` (424: vLLM refused
the request), ``model_overloaded`` (503: no slot of ``max_concurrency`` within ``queue_timeout_s``).
"""

from __future__ import annotations

import contextvars
import hashlib
import re
import time
from collections.abc import AsyncIterator
from typing import Any

import msgspec
from litestar import Request
from litestar import Response as LitestarResponse
from litestar.exceptions import HTTPException
from msgspec import UNSET

from gym_core import ModelServer
from gym_core.convert import chat_completion_to_response, create_params_to_chat, echo_params
from gym_core.relay import ChatAssembler
from gym_core.schemas import (
    ChatCompletion,
    ChatCompletionRequest,
    IncompleteDetails,
    Message,
    OutputText,
    Reasoning,
    Response,
    ResponseCreateParams,
    SummaryText,
    new_id,
)
from gym_core.streaming import (
    EVENT_STREAM,
    SSE_DONE,
    ResponseEventStream,
    chat_completion_sse,
    chat_error_sse,
    response_error_sse,
    response_sse,
    sse_data,
)
from gym_core.upstream import (
    RESPONSES_ONLY,
    Upstream,
    UpstreamError,
    UpstreamStream,
    chat_as_response_events,
    chat_chunks,
    chat_fields,
    raw_body_routes,
    relay,
    without_credentials,
)

from gym_vllm_model.config import VllmModelConfig

__all__ = ["VllmModel", "replica_index", "split_think", "CONTEXT_LENGTH_ERROR"]

TRAINING_FIELDS = ("prompt_token_ids", "generation_token_ids", "generation_log_probs")
# vLLM's 400s for a prompt (+ max_tokens) longer than the model's window: "This model's maximum
# context length is 4096 tokens...", "... maximum context length ...", "Input length (5000) exceeds
# model's maximum context length". Matched on these words only (the reference also matched any 400
# that names max_tokens, turning unrelated refusals into empty answers).
CONTEXT_LENGTH_ERROR = re.compile(r"context length|context window", re.IGNORECASE)
_THINK = re.compile(r"<think>(.*?)</think>", re.DOTALL)
# Responses API settings not sent to vLLM's chat endpoint: those without a chat counterpart, and
# two vLLM has no use for.
_NOT_FOR_VLLM = RESPONSES_ONLY | {"service_tier", "user"}
_session_id: contextvars.ContextVar[str | None] = contextvars.ContextVar("vllm_session_id", default=None)


def replica_index(session_id: str, replicas: int) -> int:
    """The replica of a session: the first 8 bytes of SHA-256 of its id (UTF-8), big-endian, mod ``replicas``.

    Not Python's ``hash()``, which differs between processes: every gym process computes the same index.
    """
    digest = hashlib.sha256(session_id.encode()).digest()
    return int.from_bytes(digest[:8], "big") % replicas


def split_think(text: str) -> tuple[list[str], str]:
    """The ``<think>…</think>`` blocks of ``text`` (in order) and the text without them, whitespace kept."""
    blocks = _THINK.findall(text)
    return blocks, (_THINK.sub("", text) if blocks else text)


class VllmModel(ModelServer):
    config: VllmModelConfig

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        cfg = self.config
        self.model_name = cfg.model
        self.set_replicas([cfg.base_url] if isinstance(cfg.base_url, str) else list(cfg.base_url))
        # Each call (failover and /tokenize included) is bounded by timeout_s and the caller's deadline.
        self.upstream = Upstream(
            self.name, name="vLLM", timeout_s=cfg.timeout_s, max_attempts=cfg.max_attempts,
            max_concurrency=cfg.max_concurrency, queue_timeout_s=cfg.queue_timeout_s,
            headers={**cfg.default_headers, **({"authorization": f"Bearer {cfg.api_key}"} if cfg.api_key else {})},
            secret=cfg.api_key, client_config=cfg.client, global_config=self.global_config,
        )  # fmt: skip
        self._completion = msgspec.json.Decoder(dict[str, Any])

    def set_replicas(self, urls: list[str]) -> None:
        """Serve through these vLLM API roots (each with ``/v1``). A server that launches its engines
        (``local_vllm_model``) calls this in ``startup()``, once they answer."""
        self.replicas = [url.rstrip("/") for url in urls]
        self._replica_names = [
            f"vLLM replica {without_credentials(url)}" for url in self.replicas
        ]  # in errors and logs
        self._down_until = [0.0] * len(self.replicas)  # time.monotonic() until which a replica is skipped

    async def shutdown(self) -> None:
        await self.upstream.close()

    # --- routes: the session (for the replica) and the raw body (for fields gym does not model) ---

    def routes(self) -> list[Any]:
        return raw_body_routes(
            self, super().routes(), chat=self._chat_route, responses=self._responses_route, streams=True
        )

    async def _responses_route(self, request: Request, params: ResponseCreateParams, fields: dict[str, Any]) -> Any:
        token = _session_id.set(self.session(request).id)
        try:
            if params.stream is True:
                return await self._stream_responses(params, fields)
            return await self.responses(params, fields)
        finally:
            _session_id.reset(token)

    async def _chat_route(self, request: Request, chat: ChatCompletionRequest, fields: dict[str, Any]) -> Any:
        token = _session_id.set(self.session(request).id)
        try:
            if chat.stream is True:
                return await self._stream_chat(chat, fields)
            return await self.chat_completions(chat, fields)
        finally:
            _session_id.reset(token)

    # --- the model API ---

    async def responses(self, params: ResponseCreateParams, unmodelled: dict[str, Any] | None = None) -> Response:
        """``POST /v1/responses``: converted to a vLLM chat completion (token ids of earlier turns on
        their assistant messages) and back, reasoning as reasoning items."""
        request = create_params_to_chat(params)
        _carry_token_ids(params, request)
        reply = await self._complete(
            request, chat_fields(unmodelled or {}, request, owner=self.name, drop=_NOT_FOR_VLLM)
        )
        return self._to_response(reply, params)

    def _to_response(self, reply: dict[str, Any], params: ResponseCreateParams) -> Response:
        """The Response of a reply of :meth:`_complete`: reasoning as a reasoning item."""
        message = reply["choices"][0]["message"]
        thoughts: list[str] = []
        if self.config.uses_reasoning_parser and isinstance(message.get("content"), str):
            thoughts, message["content"] = split_think(message["content"])
        completion = msgspec.convert(reply, ChatCompletion, strict=False)
        response = chat_completion_to_response(completion, params)
        response.model = self.config.model
        _add_reasoning(response, thoughts)
        if reply["choices"][0].get("finish_reason") == "content_filter":
            response.status = "incomplete"
            response.incomplete_details = IncompleteDetails(reason="content_filter")
        return response

    async def chat_completions(
        self, request: ChatCompletionRequest, unmodelled: dict[str, Any] | None = None
    ) -> ChatCompletion:
        """``POST /v1/chat/completions``: vLLM's answer with its reasoning inline as ``<think>…</think>``
        and, in training mode, the token ids and log-probs on the message."""
        for index, message in enumerate(request.messages):
            _bundle(message, f"messages[{index}]")  # all three or none
        reply = await self._complete(request, dict(unmodelled or {}))
        return msgspec.convert(reply, ChatCompletion, strict=False)

    # --- the chat pipeline ---

    async def _complete(self, request: ChatCompletionRequest, fields: dict[str, Any]) -> dict[str, Any]:
        """One vLLM chat completion for ``request`` (plus the caller's ``fields`` gym does not model), as a
        dict: reasoning inline, token ids on the message in training mode, transport fields removed."""
        cfg = self.config
        training = cfg.return_token_id_information or request.return_token_ids is True
        body = self._upstream_body(request, fields, training)
        if not cfg.sequential_reasoning_allowed and _ends_with_empty_assistant_turn(body["messages"]):
            return _empty_completion(cfg.model, "content_filter")
        deadline = time.monotonic() + cfg.timeout_s
        try:
            payload, replica = await self._post("/chat/completions", body, deadline)
        except UpstreamError as exc:
            if exc.upstream_status == 400 and CONTEXT_LENGTH_ERROR.search(exc.detail):
                self.log.info("context length exceeded, answered as incomplete: %s", exc.detail)
                return _empty_completion(cfg.model, "length")
            raise
        reply = self._reply(payload, self._replica_names[replica])
        return await self._finish_reply(reply, body, replica, deadline, training)

    async def _finish_reply(
        self, reply: dict[str, Any], body: dict[str, Any], replica: int, deadline: float, training: bool
    ) -> dict[str, Any]:
        """vLLM's whole reply as gym answers it: reasoning inline, token ids checked (training) or removed."""
        cfg = self.config
        message = reply["choices"][0]["message"]
        reasoning = message.pop("reasoning_content", None) or message.pop("reasoning", None)
        message.pop("reasoning", None)
        if reasoning:
            # A standard message: the reasoning inline, as the Responses conversion reads it back.
            message["content"] = f"<think>{reasoning}</think>{message.get('content') or ''}"
        if training:
            try:
                await self._token_ids(reply, body, replica, deadline)
            except _TokenDataError as exc:
                raise UpstreamError(
                    f"{self.name}: {self._replica_names[replica]}: {exc}", 502, "upstream_error"
                ) from None
        else:
            reply.pop("prompt_token_ids", None)
            reply["choices"][0].pop("token_ids", None)
        reply["model"] = cfg.model
        return reply

    def _upstream_body(self, request: ChatCompletionRequest, fields: dict[str, Any], training: bool) -> dict[str, Any]:
        """The vLLM request: the caller's (only what it set), the config's settings, vLLM's extensions."""
        cfg = self.config
        body: dict[str, Any] = {**msgspec.to_builtins(request), **fields}
        body.pop("return_token_ids", None)  # gym's request flag; vLLM's own is set below when wanted
        metadata = body.pop("metadata", None) or {}  # read here, not forwarded: vLLM has no use for it
        body["messages"] = [self._history_message(message) for message in body["messages"]]
        body["model"] = cfg.model
        template_kwargs = {
            **(cfg.chat_template_kwargs or {}),
            **(body.get("chat_template_kwargs") or {}),
            **_json_object(metadata, "chat_template_kwargs"),
        }
        if template_kwargs:
            body["chat_template_kwargs"] = template_kwargs
        if training:
            if body.get("n", 1) != 1:
                raise HTTPException(
                    status_code=400, detail=f"{self.name}: token ids and log-probs require n=1, got n={body['n']}"
                )
            # Log-probs of the sampled tokens only, tokens as "token_id:<id>": always, whatever the caller sent.
            body.update(logprobs=True, top_logprobs=0, return_tokens_as_token_ids=True)
            if cfg.request_prompt_and_generation_token_ids:
                body["return_token_ids"] = True
        body = {**cfg.extra_body, **_json_object(metadata, "extra_body"), **body}
        return {**body, **(cfg.sampling_overrides or {})}

    def _history_message(self, message: dict[str, Any]) -> dict[str, Any]:
        """A message of the history as vLLM gets it: nulls left out, earlier reasoning as its fields or inline."""
        cfg = self.config
        if cfg.replace_developer_role_with_system and message.get("role") == "developer":
            message["role"] = "system"
        message = {key: value for key, value in message.items() if value is not None or key == "content"}
        if not message.get("tool_calls"):
            message.pop("tool_calls", None)
        if message.get("role") != "assistant":
            return message
        thoughts = [message.pop("reasoning_content")] if message.get("reasoning_content") else []
        content = message.get("content")
        if cfg.uses_reasoning_parser and not cfg.preserve_reasoning_in_assistant_content:
            if isinstance(content, str):
                found, message["content"] = split_think(content)
                thoughts += found
            elif isinstance(content, list):
                for part in content:
                    if isinstance(part, dict) and isinstance(part.get("text"), str):
                        found, part["text"] = split_think(part["text"])
                        thoughts += found
            if thoughts and cfg.uses_interleaved_reasoning:
                # Both names: vLLM reads `reasoning` since 0.16, `reasoning_content` before.
                message["reasoning_content"] = message["reasoning"] = "\n".join(thoughts)
        elif thoughts:  # the engine sees the reasoning where the model wrote it
            inline = "".join(f"<think>{text}</think>" for text in thoughts)
            if isinstance(content, list):
                message["content"] = [{"type": "text", "text": inline}, *content]
            else:
                message["content"] = inline + (content or "")
        return message

    # --- stream: true ---

    async def _open_chat(
        self, request: ChatCompletionRequest, fields: dict[str, Any]
    ) -> dict[str, Any] | tuple[UpstreamStream, dict[str, Any], int, float, bool]:
        """vLLM's stream for ``request`` (``stream: true``), with what finishing its reply needs: the
        body sent, the replica, the deadline, whether in training mode; or the whole reply when
        there is nothing to generate (a context overflow, a refused empty assistant turn)."""
        cfg = self.config
        training = cfg.return_token_id_information or request.return_token_ids is True
        body = self._upstream_body(request, fields, training)
        body["stream"] = True
        if not cfg.sequential_reasoning_allowed and _ends_with_empty_assistant_turn(body["messages"]):
            return _empty_completion(cfg.model, "content_filter")
        deadline = time.monotonic() + cfg.timeout_s
        try:
            stream, replica = await self._open_stream("/chat/completions", body, deadline)
        except UpstreamError as exc:
            if exc.upstream_status == 400 and CONTEXT_LENGTH_ERROR.search(exc.detail):
                self.log.info("context length exceeded, answered as incomplete: %s", exc.detail)
                return _empty_completion(cfg.model, "length")
            raise
        return stream, body, replica, deadline, training

    async def _whole_reply(
        self, stream: UpstreamStream, body: dict[str, Any], replica: int, deadline: float, training: bool
    ) -> dict[str, Any]:
        """The reply a stream makes once read to its end, as :meth:`_complete` answers it."""
        assembler = ChatAssembler()
        async for chunk in chat_chunks(stream):
            assembler.feed(chunk)
        reply = assembler.completion()
        if not reply["choices"]:
            raise self.upstream.bad_answer("/chat/completions", "a stream without choices", b"")
        return await self._finish_reply(reply, body, replica, deadline, training)

    async def _stream_chat(self, request: ChatCompletionRequest, fields: dict[str, Any]) -> Any:
        """``stream: true`` on ``/v1/chat/completions``: vLLM's chunks as they come, reasoning inline as
        ``<think>…</think>`` text; in training mode the whole answer, checked, as chunks at the end."""
        for index, message in enumerate(request.messages):
            _bundle(message, f"messages[{index}]")
        options = fields.get("stream_options")
        usage = isinstance(options, dict) and options.get("include_usage") is True
        opened = await self._open_chat(request, dict(fields))
        if isinstance(opened, dict):
            sse = chat_completion_sse(msgspec.convert(opened, ChatCompletion, strict=False), include_usage=usage)
            return LitestarResponse(content=sse, media_type=EVENT_STREAM)
        stream, body, replica, deadline, training = opened

        async def whole() -> AsyncIterator[bytes]:
            reply = await self._whole_reply(stream, body, replica, deadline, True)
            yield chat_completion_sse(msgspec.convert(reply, ChatCompletion, strict=False), include_usage=usage)

        async def live() -> AsyncIterator[bytes]:
            thinking: dict[int, bool] = {}  # per choice: inside <think>
            async for chunk in chat_chunks(stream):
                chunk["model"] = self.config.model
                chunk.pop("prompt_token_ids", None)
                for choice in chunk.get("choices") or []:
                    if isinstance(choice, dict):
                        _inline_reasoning(choice, thinking)
                yield sse_data(chunk)
            yield SSE_DONE

        return relay(self, stream, whole() if training else live(), chat_error_sse)

    async def _stream_responses(self, params: ResponseCreateParams, fields: dict[str, Any]) -> Any:
        """``stream: true`` on ``/v1/responses``: the events as vLLM's chunks come (reasoning as a
        reasoning item, text as a message; tool calls whole at the end), ``response.completed``
        with the whole response; in training mode all the events at the end."""
        cfg = self.config
        request = create_params_to_chat(params)
        _carry_token_ids(params, request)
        extra = chat_fields(fields, request, owner=self.name, drop=_NOT_FOR_VLLM)
        opened = await self._open_chat(request, {**extra, "stream_options": {"include_usage": True}})
        if isinstance(opened, dict):
            return LitestarResponse(content=response_sse(self._to_response(opened, params)), media_type=EVENT_STREAM)
        stream, body, replica, deadline, training = opened
        shell = Response(model=cfg.model)
        echo_params(shell, params)
        events = ResponseEventStream(shell)

        async def whole() -> AsyncIterator[bytes]:
            reply = await self._whole_reply(stream, body, replica, deadline, True)
            yield response_sse(self._to_response(reply, params))

        async def finish(reply: dict[str, Any]) -> Response:
            reply = await self._finish_reply(reply, body, replica, deadline, False)
            return self._to_response(reply, params)

        split = ThinkSplitter() if cfg.uses_reasoning_parser else None
        live = chat_as_response_events(stream, events, finish, split)
        if training:
            return relay(
                self, stream, whole(), lambda message, kind, status: response_error_sse(message, kind, status, 0)
            )
        return relay(self, stream, live, events.error)

    # --- token ids and log-probs ---

    async def _token_ids(self, reply: dict[str, Any], body: dict[str, Any], replica: int, deadline: float) -> None:
        """Put ``prompt_token_ids``, ``generation_token_ids``, ``generation_log_probs`` on the reply's message."""
        choice = reply["choices"][0]
        message = choice["message"]
        inline_prompt = reply.pop("prompt_token_ids", None)
        inline_generated = choice.pop("token_ids", None)
        logprobs = choice.pop("logprobs", None)
        if (inline_prompt is None) != (inline_generated is None):
            raise _TokenDataError(
                "partial token metadata: the reply has only one of prompt_token_ids and choices[0].token_ids"
            )
        present = [name for name in TRAINING_FIELDS if message.get(name) is not None]
        if present:  # a training framework's vLLM that returns the bundle itself
            if len(present) < 3:
                raise _TokenDataError(f"partial token metadata on the message: {', '.join(present)} without the others")
            prompt, generated, log_probs = (message[name] for name in TRAINING_FIELDS)
            if inline_prompt is not None and (inline_prompt != prompt or inline_generated != generated):
                raise _TokenDataError(
                    "message-level token metadata disagrees with the reply's prompt_token_ids/token_ids"
                )
        else:
            generated, log_probs = _sampled_tokens(logprobs)
            if inline_prompt is not None:
                if inline_generated != generated:
                    raise _TokenDataError("choices[0].token_ids differ from the ids of choices[0].logprobs")
                prompt = inline_prompt
            else:
                prompt = await self._tokenize(body, replica, deadline)
        if not all(isinstance(ids, list) for ids in (prompt, generated, log_probs)):
            raise _TokenDataError("token ids and log-probs must be lists")
        if len(generated) != len(log_probs):
            raise _TokenDataError(f"{len(generated)} generated ids but {len(log_probs)} log-probs")
        message.update(prompt_token_ids=prompt, generation_token_ids=generated, generation_log_probs=log_probs)

    async def _tokenize(self, body: dict[str, Any], replica: int, deadline: float) -> list[int]:
        """The prompt's ids from vLLM's ``/tokenize`` (at the server root), on the replica that generated."""
        request = {
            key: body[key]
            for key in (
                "model",
                "messages",
                "tools",
                "chat_template_kwargs",
                "mm_processor_kwargs",
                "required_prefix_token_ids",
            )
            if key in body
        }
        root = self.replicas[replica].removesuffix("/v1")
        name = f"vLLM replica {without_credentials(root)}"
        try:
            payload = await self.upstream.post(root, "/tokenize", request, deadline=deadline, name=name)
        except UpstreamError as exc:
            if exc.kind == "model_overloaded":
                raise
            raise UpstreamError(
                f"{self.name}: /tokenize for the prompt ids failed: {exc}", 502, "upstream_error"
            ) from None
        tokens = self.upstream.decode("/tokenize", payload, self._completion.decode, name=name).get("tokens")
        if not isinstance(tokens, list):
            raise _TokenDataError("/tokenize answered without a 'tokens' list")
        return tokens

    # --- upstream calls: replica choice, failover, typed errors ---

    def _replica_order(self, session_id: str | None) -> list[int]:
        """The replicas to try, the session's own first, then the next ones; those cooling down last."""
        count = len(self.replicas)
        first = None if session_id is None else self.sessions.get(session_id)
        if first is None:
            first = replica_index(session_id, count) if session_id is not None else 0
        order = [(first + step) % count for step in range(count)]
        now = time.monotonic()
        return sorted(order, key=lambda index: self._down_until[index] > now)  # stable: the ring order stays

    async def _post(self, path: str, body: dict[str, Any], deadline: float) -> tuple[bytes, int]:
        return await self._call(path, body, deadline, stream=False)

    async def _open_stream(self, path: str, body: dict[str, Any], deadline: float) -> tuple[UpstreamStream, int]:
        """As :meth:`_post`, for ``stream: true``: the stream once its replica answered 2xx (the
        failover happens before the first byte; a stream that breaks off later is not moved)."""
        return await self._call(path, body, deadline, stream=True)

    async def _call(self, path: str, body: dict[str, Any], deadline: float, *, stream: bool) -> tuple[Any, int]:
        """POST to the session's replica, failing over to the next ones; the answer and the replica that gave it.

        A replica unreachable, busy after every attempt or answering 5xx (a 502 :class:`UpstreamError`)
        is failed over: vLLM is self-hosted, so a retry elsewhere bills nothing. Any other failure is
        final: a refusal (another replica would refuse too), a timeout (vLLM may still be generating),
        no slot in time.
        """
        session_id = _session_id.get()
        failures: list[UpstreamError] = []
        for index in self._replica_order(session_id):
            try:
                call = self.upstream.open_stream if stream else self.upstream.post
                payload = await call(
                    self.replicas[index], path, body, deadline=deadline, name=self._replica_names[index]
                )
            except UpstreamError as exc:
                if exc.status != 502:
                    raise
                failures.append(exc)
            else:
                self._down_until[index] = 0.0
                if session_id is not None:
                    self.sessions.set(session_id, index)  # the session stays here, failed over or not
                return payload, index
            self._down_until[index] = time.monotonic() + self.config.replica_cooldown_s
            self.log.warning("%s failed, trying the next one: %s", self._replica_names[index], failures[-1])
            if time.monotonic() >= deadline:
                break
        reasons = "; ".join(str(exc) for exc in failures)
        raise UpstreamError(
            f"{self.name}: no vLLM replica answered ({len(failures)} of {len(self.replicas)} tried): {reasons}",
            502, "upstream_unavailable",
        )  # fmt: skip

    def _reply(self, payload: bytes, name: str) -> dict[str, Any]:
        reply = self.upstream.decode("/chat/completions", payload, self._completion.decode, name=name)
        choices = reply.get("choices")
        if (
            not isinstance(choices, list)
            or not choices
            or not isinstance(choices[0], dict)
            or not isinstance(choices[0].get("message"), dict)
        ):
            raise self.upstream.bad_answer("/chat/completions", "no choices[0].message", payload, name=name)
        return reply


class _TokenDataError(ValueError):
    """vLLM's token ids or log-probs are missing or do not check out (answered 502 ``upstream_error``)."""


def _sampled_tokens(logprobs: Any) -> tuple[list[int], list[float]]:
    """The generated ids and their log-probs from ``choices[0].logprobs`` (tokens as ``"token_id:<id>"``)."""
    content = logprobs.get("content") if isinstance(logprobs, dict) else None
    if not isinstance(content, list):
        raise _TokenDataError("log-probs were requested but choices[0].logprobs.content is missing (is this vLLM?)")
    ids: list[int] = []
    values: list[float] = []
    for index, entry in enumerate(content):
        token = entry.get("token") if isinstance(entry, dict) else None
        logprob = entry.get("logprob") if isinstance(entry, dict) else None
        if not isinstance(token, str) or not token.startswith("token_id:") or not token[9:].lstrip("-").isdigit():
            raise _TokenDataError(
                f"logprobs.content[{index}].token is {token!r}, not 'token_id:<id>' (return_tokens_as_token_ids)"
            )
        if isinstance(logprob, bool) or not isinstance(logprob, int | float):
            raise _TokenDataError(f"logprobs.content[{index}].logprob is {logprob!r}, not a number")
        ids.append(int(token[9:]))
        values.append(float(logprob))
    return ids, values


def _bundle(item: Any, where: str) -> list[Any] | None:
    """The token bundle an item or message carries, or None; 422 when only some of the three fields are set."""
    values = [getattr(item, name, None) for name in TRAINING_FIELDS]
    values = [None if value is UNSET else value for value in values]
    present = [name for name, value in zip(TRAINING_FIELDS, values) if value is not None]
    if not present:
        return None
    if len(present) < 3:
        missing = [name for name in TRAINING_FIELDS if name not in present]
        raise HTTPException(
            status_code=422,
            detail=f"{where} has {', '.join(present)} but not {', '.join(missing)}:"
            " the three travel together (send items back as the model returned them)",
        )
    if len(values[1]) != len(values[2]):
        raise HTTPException(
            status_code=422,
            detail=f"{where}: {len(values[1])} generation_token_ids but {len(values[2])} generation_log_probs",
        )
    return values


def _carry_token_ids(params: ResponseCreateParams, request: ChatCompletionRequest) -> None:
    """Put the token bundle of each generated input item on the assistant chat message it became (the
    last bundle of a message wins), so that vLLM gets the earlier turns' ids with their messages."""
    if isinstance(params.input, str):
        return
    for index, item in enumerate(params.input):
        bundle = _bundle(item, f"input[{index}]")
        if bundle is None:
            continue
        # Where gym-core's converter puts this item: the last message of the conversion up to it.
        upto = create_params_to_chat(msgspec.structs.replace(params, input=params.input[: index + 1]))
        landing = len(upto.messages) - 1
        if landing >= 0 and request.messages[landing].role == "assistant":
            message = request.messages[landing]
            message.prompt_token_ids, message.generation_token_ids, message.generation_log_probs = bundle


def _add_reasoning(response: Response, thoughts: list[str]) -> None:
    """One reasoning item first, a summary text per ``<think>`` block; a turn that only reasoned is
    that item alone, carrying the turn's token ids."""
    if not thoughts:
        return
    item = Reasoning(id=new_id("rs"), summary=[SummaryText(text=text) for text in thoughts])
    output = response.output
    if len(output) == 1 and isinstance(output[0], Message) and _empty(output[0]):
        for name in TRAINING_FIELDS:
            setattr(item, name, getattr(output[0], name))
        output.clear()
    output.insert(0, item)


def _empty(message: Message) -> bool:
    if isinstance(message.content, str):
        return not message.content
    return all(isinstance(part, OutputText) and not part.text for part in message.content)


def _ends_with_empty_assistant_turn(messages: list[dict[str, Any]]) -> bool:
    last = messages[-1] if messages else {}
    return last.get("role") == "assistant" and not last.get("content") and not last.get("tool_calls")


def _empty_completion(model: str, finish_reason: str) -> dict[str, Any]:
    """The answer given without generating: one empty assistant message, no usage, no token ids."""
    message = {"role": "assistant", "content": None}
    return {
        "id": new_id("chatcmpl"),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "finish_reason": finish_reason, "message": message}],
    }


def _json_object(metadata: dict[str, Any], key: str) -> dict[str, Any]:
    """``metadata[key]``, a JSON object sent as a string (metadata values are strings); 400 if it is not one."""
    text = metadata.get(key)
    if not text:
        return {}
    try:
        value = msgspec.json.decode(text)
    except (msgspec.DecodeError, TypeError):
        value = None
    if not isinstance(value, dict):
        raise HTTPException(
            status_code=400, detail=f"metadata.{key} must be a JSON object as a string, got {text!r:.100}"
        )
    return value


def _inline_reasoning(choice: dict[str, Any], thinking: dict[int, bool]) -> None:
    """A streamed choice's reasoning fields moved into its text as ``<think>…</think>`` (opened at its
    first reasoning, closed at the first text, tool call or finish after it), token ids removed:
    the deltas concatenate to the text of the unstreamed answer."""
    choice.pop("token_ids", None)
    delta = choice.get("delta")
    if not isinstance(delta, dict):
        return
    index = choice.get("index") or 0
    reasoning = delta.pop("reasoning_content", None) or delta.pop("reasoning", None)
    delta.pop("reasoning", None)
    text = delta.get("content")
    pieces = []
    if reasoning:
        if not thinking.get(index):
            pieces.append("<think>")
            thinking[index] = True
        pieces.append(reasoning)
    ends = bool(text) or bool(delta.get("tool_calls")) or choice.get("finish_reason") is not None
    if thinking.get(index) and ends:
        pieces.append("</think>")
        thinking[index] = False
    if isinstance(text, str):
        pieces.append(text)
    if pieces or "content" in delta:
        delta["content"] = "".join(pieces)


class ThinkSplitter:
    """``<think>…</think>`` blocks split from text that arrives in pieces: :meth:`feed` gives the
    reasoning and the text of each piece, holding back what may be the start of a tag; :meth:`flush`
    the rest at the end."""

    def __init__(self) -> None:
        self.inside = False
        self.pending = ""

    def feed(self, piece: str) -> tuple[str, str]:
        text, self.pending = self.pending + piece, ""
        thoughts: list[str] = []
        answer: list[str] = []
        while text:
            tag = "</think>" if self.inside else "<think>"
            at = text.find(tag)
            into = thoughts if self.inside else answer
            if at >= 0:
                into.append(text[:at])
                text = text[at + len(tag) :]
                self.inside = not self.inside
                continue
            keep = next((k for k in range(min(len(tag) - 1, len(text)), 0, -1) if tag.startswith(text[-k:])), 0)
            into.append(text[: len(text) - keep])
            self.pending = text[len(text) - keep :]
            break
        return "".join(thoughts), "".join(answer)

    def flush(self) -> tuple[str, str]:
        rest, self.pending = self.pending, ""
        return (rest, "") if self.inside else ("", rest)
