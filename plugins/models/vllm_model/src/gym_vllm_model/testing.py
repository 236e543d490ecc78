"""A stand-in for a vLLM OpenAI-compatible server, for tests: real HTTP on loopback, in a thread.

:class:`StubVllm` speaks the parts of vLLM's API that ``vllm_model`` uses, with vLLM's extensions
and error shapes:

- ``POST /v1/chat/completions``: ``logprobs`` / ``top_logprobs`` (``logprobs.content`` entries, their
  ``token`` as ``"token_id:<id>"`` with ``return_tokens_as_token_ids``), ``return_token_ids``
  (top-level ``prompt_token_ids`` and ``choices[0].token_ids``), a reasoning parser (reasoning in
  ``reasoning_content``, or ``reasoning`` as vLLM ≥ 0.16 names it, or inline ``<think>`` without a
  parser), tool calls, ``max_tokens`` (``finish_reason: "length"``), and vLLM's 400 when the prompt
  and ``max_tokens`` do not fit ``max_model_len``;
- ``POST /tokenize`` (at the server root, as vLLM serves it): the prompt's ids;
- ``GET /v1/models``, ``GET /health``.

Its tokenizer is bytes: a chat template renders the messages as text
(``<|role|>content<|end|>``..., then ``<|assistant|>``) and each UTF-8 byte is one token id, so tests
can compute every id they expect. An assistant message carrying ``prompt_token_ids`` and
``generation_token_ids`` (as a training framework's vLLM accepts them) makes the prompt those ids,
verbatim, followed by the tokens of only what comes after that message.

What to answer is :attr:`StubVllm.script`, a function of the request body returning a dict with any
of ``content``, ``reasoning``, ``tool_calls`` (``[{"name", "arguments"}]``); by default it echoes the
text of the last user message. Every request is recorded in :attr:`StubVllm.requests`.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

import msgspec

from gym_core.serving import ServerThread

__all__ = ["StubVllm", "render", "encode", "echo_last_user_message", "stream_chunks"]

END = "<|end|>"


def encode(text: str) -> list[int]:
    """The stub's tokenizer: one id per UTF-8 byte."""
    return list(text.encode())


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return ""


def _rendered(message: dict[str, Any]) -> str:
    text = _text(message.get("content"))
    reasoning = message.get("reasoning") or message.get("reasoning_content")
    if reasoning:
        text = f"<think>{reasoning}</think>{text}"
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        text += f"<tool_call>{function.get('name')} {function.get('arguments')}</tool_call>"
    return f"<|{message.get('role')}|>{text}{END}"


def render(messages: list[dict[str, Any]], add_generation_prompt: bool = True) -> str:
    """The stub's chat template."""
    return "".join(_rendered(m) for m in messages) + ("<|assistant|>" if add_generation_prompt else "")


def echo_last_user_message(body: dict[str, Any]) -> dict[str, Any]:
    """The default script: the last user message's text, as the answer."""
    for message in reversed(body.get("messages") or []):
        if message.get("role") == "user":
            return {"content": _text(message.get("content"))}
    return {"content": ""}


def _log_prob(token_id: int) -> float:
    return -0.01 - (token_id % 10) / 10  # deterministic, so tests can check what comes back


class StubVllm:
    """One stub vLLM server. ``start()`` serves it on a free loopback port; ``url`` is its API root (``…/v1``)."""

    def __init__(
        self,
        name: str = "stub",
        *,
        max_model_len: int = 2048,
        reasoning_parser: bool = True,
        reasoning_field: str = "reasoning_content",
        script: Callable[[dict[str, Any]], dict[str, Any]] = echo_last_user_message,
        piece_chars: int = 3,
    ):
        self.name = name
        self.max_model_len = max_model_len
        self.reasoning_parser = reasoning_parser
        self.reasoning_field = reasoning_field
        self.script = script
        # Set to a status (500, 503...) to answer every completion with it: a replica in trouble.
        self.fail_status: int | None = None
        # stream: true: text in pieces of this many characters, one chunk each. With a gate, the
        # stream stops after chunk number hold_after_chunks until the gate is set (or the client
        # disconnects); with die_after_chunks, the connection is dropped before that chunk.
        self.piece_chars = piece_chars
        self.gate: threading.Event | None = None
        self.hold_after_chunks = 1
        self.die_after_chunks: int | None = None
        self.drop_done = False  # end the stream cleanly, but without its [DONE]
        self.chunks_sent = 0
        self.disconnects = 0
        self.requests: list[tuple[str, dict[str, Any]]] = []
        self._lock = threading.Lock()
        self._thread: ServerThread | None = None
        self._port = 0

    # --- lifecycle ---

    def start(self) -> StubVllm:
        """Serve (again, on the same port after :meth:`stop`)."""
        self._thread = ServerThread(self, "127.0.0.1", self._port).start()
        self._port = self._thread.port
        return self

    def stop(self) -> None:
        """Stop serving: connections are refused until :meth:`start`."""
        if self._thread is not None:
            self._thread.stop()
            self._thread = None

    def __enter__(self) -> StubVllm:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._port}/v1"

    def completions(self) -> list[dict[str, Any]]:
        """The bodies of the chat completion requests received, in order."""
        with self._lock:
            return [body for path, body in self.requests if path == "/v1/chat/completions"]

    def clear(self) -> None:
        with self._lock:
            self.requests.clear()
            self.chunks_sent = self.disconnects = 0

    # --- ASGI ---

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            if scope["type"] == "lifespan":
                while (await receive())["type"] != "lifespan.shutdown":
                    await send({"type": "lifespan.startup.complete"})
                await send({"type": "lifespan.shutdown.complete"})
            return
        raw = b""
        while True:
            message = await receive()
            raw += message.get("body", b"")
            if not message.get("more_body"):
                break
        status, answer = self._answer(scope["method"], scope["path"], raw)
        if status == 200 and answer.get("object") == "chat.completion" and self._streamed(raw):
            await self._stream(answer, msgspec.json.decode(raw), receive, send)
            return
        payload = msgspec.json.encode(answer)
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(payload))],
            }
        )
        await send({"type": "http.response.body", "body": payload})

    # --- stream: true ---

    @staticmethod
    def _streamed(raw: bytes) -> bool:
        body = msgspec.json.decode(raw)
        return isinstance(body, dict) and body.get("stream") is True

    async def _stream(self, completion: dict[str, Any], body: dict[str, Any], receive: Any, send: Any) -> None:
        """The completion as vLLM streams it (``data:`` chunks, ``[DONE]``), with :attr:`gate`,
        :attr:`die_after_chunks` and :attr:`drop_done` applied; a client that disconnects is counted in :attr:`disconnects`."""
        chunks = stream_chunks(completion, body, self.reasoning_field if self.reasoning_parser else None,
                               self.piece_chars)  # fmt: skip
        disconnected = asyncio.ensure_future(receive())  # the next message is http.disconnect
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/event-stream")]})  # fmt: skip
        try:
            for number, chunk in enumerate(chunks):
                if chunk is None and self.drop_done:
                    break
                if self.die_after_chunks is not None and number == self.die_after_chunks:
                    raise ConnectionAbortedError(f"{self.name} dies mid-stream on purpose")
                data = b"data: [DONE]\n\n" if chunk is None else b"data: " + msgspec.json.encode(chunk) + b"\n\n"
                await send({"type": "http.response.body", "body": data, "more_body": True})
                with self._lock:
                    self.chunks_sent += 1
                if number == self.hold_after_chunks and self.gate is not None:
                    deadline = time.monotonic() + 30
                    while not self.gate.is_set() and time.monotonic() < deadline:
                        if disconnected.done():
                            break
                        await asyncio.sleep(0.01)
                if disconnected.done() and disconnected.result().get("type") == "http.disconnect":
                    with self._lock:
                        self.disconnects += 1
                    return
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            disconnected.cancel()

    def _answer(self, method: str, path: str, raw: bytes) -> tuple[int, Any]:
        if method == "GET" and path in ("/health", "/v1/models"):
            return 200, {} if path == "/health" else {
                "object": "list",
                "data": [{"id": "stub-model", "object": "model"}],
            }
        if method != "POST" or path not in ("/v1/chat/completions", "/tokenize"):
            return 404, {"detail": "Not Found"}
        try:
            body = msgspec.json.decode(raw)
        except msgspec.DecodeError as exc:
            return _error(400, f"invalid JSON: {exc}")
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            return _error(400, "1 validation error: messages: Field required")
        with self._lock:
            self.requests.append((path, body))
        if path == "/tokenize":
            tokens = encode(render(body["messages"], body.get("add_generation_prompt", True)))
            return 200, {
                "count": len(tokens),
                "max_model_len": self.max_model_len,
                "tokens": tokens,
                "token_strs": None,
            }
        if self.fail_status is not None:
            return _error(self.fail_status, f"{self.name} is failing on purpose")
        return self._complete(body)

    def _prompt_ids(self, messages: list[dict[str, Any]]) -> list[int]:
        carrier = None
        for index, message in enumerate(messages):
            if (
                message.get("role") == "assistant"
                and message.get("prompt_token_ids")
                and message.get("generation_token_ids")
            ):
                carrier = index
        if carrier is None:
            return encode(render(messages))
        last = messages[carrier]
        return [
            *last["prompt_token_ids"],
            *last["generation_token_ids"],
            *encode(END + render(messages[carrier + 1 :])),
        ]

    def _complete(self, body: dict[str, Any]) -> tuple[int, Any]:
        prompt = self._prompt_ids(body["messages"])
        max_tokens = body.get("max_completion_tokens") or body.get("max_tokens")
        if len(prompt) + (max_tokens or 0) > self.max_model_len:
            asked = len(prompt) + (max_tokens or 0)
            return _error(
                400,
                f"This model's maximum context length is {self.max_model_len} tokens. However, you"
                f" requested {asked} tokens ({len(prompt)} in the messages, {max_tokens or 0} in the"
                " completion). Please reduce the length of the messages or completion.",
            )
        reply = self.script(body)
        content = reply.get("content") or ""
        reasoning = reply.get("reasoning") or ""
        calls = [
            {"id": f"chatcmpl-tool-{index}", "type": "function",
             "function": {"name": call["name"], "arguments": call["arguments"]}}
            for index, call in enumerate(reply.get("tool_calls") or [])
        ]  # fmt: skip
        generated_text = (f"<think>{reasoning}</think>" if reasoning else "") + content
        generated_text += "".join(
            f"<tool_call>{c['function']['name']} {c['function']['arguments']}</tool_call>" for c in calls
        )
        generated = encode(generated_text)
        finish = "tool_calls" if calls else "stop"
        if max_tokens is not None and len(generated) > max_tokens:
            generated, finish, calls = generated[:max_tokens], "length", []
            content, reasoning = bytes(generated).decode(errors="ignore"), ""
        message: dict[str, Any] = {
            "role": "assistant",
            "content": content or (None if calls else ""),
            "tool_calls": calls,
        }
        if reasoning and self.reasoning_parser:
            message[self.reasoning_field] = reasoning
        elif reasoning:
            message["content"] = f"<think>{reasoning}</think>{content}"
        choice: dict[str, Any] = {"index": 0, "message": message, "finish_reason": finish, "logprobs": None}
        if body.get("logprobs"):
            as_ids = body.get("return_tokens_as_token_ids")
            choice["logprobs"] = {"content": [
                {"token": f"token_id:{t}" if as_ids else bytes([t]).decode(errors="replace"), "logprob": _log_prob(t),
                 "bytes": [t], "top_logprobs": []}
                for t in generated
            ]}  # fmt: skip
        completion: dict[str, Any] = {
            "id": f"chatcmpl-{time.monotonic_ns():x}", "object": "chat.completion", "created": int(time.time()),
            "model": body.get("model"), "choices": [choice],
            "usage": {"prompt_tokens": len(prompt), "completion_tokens": len(generated),
                      "total_tokens": len(prompt) + len(generated), "prompt_tokens_details": None},
        }  # fmt: skip
        if body.get("return_token_ids"):
            completion["prompt_token_ids"] = prompt
            choice["token_ids"] = generated
        return 200, completion


def _error(status: int, message: str) -> tuple[int, Any]:
    """vLLM's error body."""
    kind = "BadRequestError" if status == 400 else "InternalServerError"
    return status, {"error": {"message": message, "type": kind, "param": None, "code": status}}


def _pieces(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def stream_chunks(
    completion: dict[str, Any], body: dict[str, Any], reasoning_field: str | None, size: int = 3
) -> list[dict[str, Any] | None]:
    """``completion`` as vLLM streams it: a role chunk, the reasoning (in ``reasoning_field``) and
    the text in pieces of ``size`` characters, a chunk per tool call, the ``finish_reason`` chunk, a
    usage chunk when ``stream_options.include_usage``, and None for ``[DONE]``. Each piece carries
    the log-probs and (``return_token_ids``) the ids of its bytes; the first chunk the prompt's ids."""
    choice = completion["choices"][0]
    message = choice["message"]
    base = {"id": completion["id"], "object": "chat.completion.chunk", "created": completion["created"],
            "model": completion["model"]}  # fmt: skip
    entries = list((choice.get("logprobs") or {}).get("content") or [])
    ids_wanted = "token_ids" in choice

    def chunk(delta: dict[str, Any], ids_text: str = "", finish: str | None = None) -> dict[str, Any]:
        ids = encode(ids_text)
        part: dict[str, Any] = {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}
        if choice.get("logprobs") is not None:
            part["logprobs"] = {"content": [entries.pop(0) for _ in ids if entries]}
        if ids_wanted:
            part["token_ids"] = ids
        return {**base, "choices": [part]}

    first = chunk({"role": "assistant", "content": ""})
    if "prompt_token_ids" in completion:
        first["prompt_token_ids"] = completion["prompt_token_ids"]
    chunks: list[dict[str, Any] | None] = [first]
    reasoning = message.get(reasoning_field) if reasoning_field else None
    if reasoning:
        pieces = _pieces(reasoning, size)
        for index, piece in enumerate(pieces):
            ids_text = ("<think>" if index == 0 else "") + piece + ("</think>" if index == len(pieces) - 1 else "")
            chunks.append(chunk({reasoning_field or "reasoning": piece}, ids_text))
    for piece in _pieces(message.get("content") or "", size):
        chunks.append(chunk({"content": piece}, piece))
    for index, call in enumerate(message.get("tool_calls") or []):
        function = call["function"]
        text = f"<tool_call>{function['name']} {function['arguments']}</tool_call>"
        chunks.append(chunk({"tool_calls": [{"index": index, **call}]}, text))
    chunks.append(chunk({}, finish=choice["finish_reason"]))
    options = body.get("stream_options") or {}
    if options.get("include_usage"):
        chunks.append({**base, "choices": [], "usage": completion["usage"]})
    chunks.append(None)
    return chunks
