"""Reading an upstream's ``stream: true`` answer: the model servers in front of an engine.

A server that forwards a streaming request reads its upstream's events with :class:`SSEDecoder`
(:meth:`gym_core.upstream.UpstreamStream.events` does) and assembles what it needs of the whole
answer with :class:`ChatAssembler`. What it sends its caller is written by :mod:`gym_core.streaming`
(:func:`~gym_core.streaming.sse_data`, :func:`~gym_core.streaming.sse_event`, the error events, and
:class:`~gym_core.streaming.ResponseEventStream` for a ``/v1/responses`` converted to a chat
completion); :mod:`gym_core.upstream` relays it (:func:`gym_core.upstream.relay`).
"""

from __future__ import annotations

from typing import Any

import msgspec

# Written by gym_core.streaming; importable here too, where relays first found it.
from gym_core.streaming import chat_error_sse as chat_error_sse

__all__ = ["SSE", "SSEDecoder", "ChatAssembler"]


class SSE(msgspec.Struct):
    """One server-sent event: its ``event:`` name (None when it has none) and its ``data:`` lines joined."""

    event: str | None
    data: str


class SSEDecoder:
    """Server-sent events from bytes fed as they arrive (``\\n``, ``\\r\\n`` or ``\\r`` line ends)."""

    def __init__(self) -> None:
        self._buffer = b""
        self._event: str | None = None
        self._data: list[str] = []
        self._after_cr = False  # the last chunk ended with \r: a \n that starts the next is its end

    def feed(self, chunk: bytes) -> list[SSE]:
        """The events that ``chunk`` completes."""
        if self._after_cr and chunk.startswith(b"\n"):
            chunk = chunk[1:]
        self._after_cr = False
        self._buffer += chunk
        lines = self._buffer.splitlines(keepends=True)
        # The last line may be incomplete: kept for the next chunk.
        self._buffer = lines.pop() if lines and not lines[-1].endswith((b"\n", b"\r")) else b""
        self._after_cr = bool(lines) and lines[-1].endswith(b"\r")
        events = []
        for raw in lines:
            line = raw.rstrip(b"\r\n").decode("utf-8", errors="replace")
            if not line:
                if self._data or self._event is not None:
                    events.append(SSE(self._event, "\n".join(self._data)))
                self._event, self._data = None, []
                continue
            if line.startswith(":"):
                continue  # a comment (a keep-alive)
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if name == "data":
                self._data.append(value)
            elif name == "event":
                self._event = value
        return events


class ChatAssembler:
    """A whole chat completion (a dict, as a non-streamed answer reads) from its chunks, fed as they come.

    Per choice: the text and reasoning (``reasoning_content``, or ``reasoning``) joined, tool calls
    by index with their arguments joined, the last ``finish_reason``, ``logprobs.content`` and
    ``token_ids`` (vLLM's) joined; top-level ``id``, ``created``, ``model``, ``usage`` and
    ``prompt_token_ids`` (vLLM's) as the chunks give them.
    """

    def __init__(self) -> None:
        self.top: dict[str, Any] = {}
        self.choices: dict[int, dict[str, Any]] = {}

    def feed(self, chunk: dict[str, Any]) -> None:
        for key in ("id", "created", "model", "system_fingerprint"):
            if chunk.get(key) is not None:
                self.top.setdefault(key, chunk[key])
        for key in ("usage", "prompt_token_ids"):
            if chunk.get(key) is not None:
                self.top[key] = chunk[key]
        for choice in chunk.get("choices") or []:
            if isinstance(choice, dict):
                self._choice(choice)

    def _choice(self, choice: dict[str, Any]) -> None:
        index = choice.get("index") or 0
        state = self.choices.setdefault(
            index, {"content": [], "reasoning": [], "tools": {}, "finish": None, "logprobs": None, "ids": None}
        )
        delta = choice.get("delta") or {}
        if isinstance(delta.get("content"), str):
            state["content"].append(delta["content"])
        thought = delta.get("reasoning_content") or delta.get("reasoning")
        if isinstance(thought, str):
            state["reasoning"].append(thought)
        for call in delta.get("tool_calls") or []:
            slot = state["tools"].setdefault(call.get("index", len(state["tools"])), {"name": [], "arguments": []})
            function = call.get("function") or {}
            for key in ("id", "type"):
                if call.get(key):
                    slot[key] = call[key]
            if function.get("name"):
                slot["name"].append(function["name"])
            if function.get("arguments"):
                slot["arguments"].append(function["arguments"])
        if choice.get("finish_reason") is not None:
            state["finish"] = choice["finish_reason"]
        logprobs = choice.get("logprobs")
        if isinstance(logprobs, dict) and isinstance(logprobs.get("content"), list):
            state["logprobs"] = (state["logprobs"] or []) + logprobs["content"]
        if isinstance(choice.get("token_ids"), list):
            state["ids"] = (state["ids"] or []) + choice["token_ids"]

    def completion(self) -> dict[str, Any]:
        """The chat completion the chunks so far make."""
        choices = []
        for index, state in sorted(self.choices.items()):
            calls = [
                {"id": slot.get("id") or "", "type": slot.get("type", "function"),
                 "function": {"name": "".join(slot["name"]), "arguments": "".join(slot["arguments"])}}
                for _, slot in sorted(state["tools"].items())
            ]  # fmt: skip
            message: dict[str, Any] = {"role": "assistant", "content": "".join(state["content"]) or None}
            if calls:
                message["tool_calls"] = calls
            elif message["content"] is None:
                message["content"] = ""
            if state["reasoning"]:
                message["reasoning_content"] = "".join(state["reasoning"])
            choice: dict[str, Any] = {"index": index, "message": message, "finish_reason": state["finish"] or "stop"}
            choice["logprobs"] = None if state["logprobs"] is None else {"content": state["logprobs"]}
            if state["ids"] is not None:
                choice["token_ids"] = state["ids"]
            choices.append(choice)
        return {"object": "chat.completion", **self.top, "choices": choices}
