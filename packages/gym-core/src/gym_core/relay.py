"""Relaying an upstream's ``stream: true`` answer: the model servers in front of an engine.

A server that forwards a streaming request reads its upstream's events with :class:`SSEDecoder`
(:meth:`gym_core.upstream.UpstreamStream.events` does), relays them (rewritten where it rewrites),
assembles what it needs of the whole answer with :class:`ChatAssembler`, turns chat chunks into
Responses events as they come with :class:`ChatResponseEvents` (for a ``/v1/responses`` it
converts to a chat completion), and ends a stream that failed midway with :func:`chat_error_sse` or
:func:`response_error_sse`: an event the official ``openai`` client raises as ``openai.APIError``
(never a stream that just stops, which the client would take for a whole answer).
"""

from __future__ import annotations

from typing import Any

import msgspec

from gym_core.schemas import Message, OutputText, Reasoning, Response, SummaryText, new_id
from gym_core.streaming import _item_events

__all__ = [
    "SSE",
    "SSEDecoder",
    "sse_data",
    "sse_event",
    "chat_error_sse",
    "response_error_sse",
    "ChatAssembler",
    "ChatResponseEvents",
]

_encoder = msgspec.json.Encoder()


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


def sse_data(payload: Any) -> bytes:
    """``payload`` as one ``data:`` event (chat completions' format)."""
    return b"data: " + _encoder.encode(payload) + b"\n\n"


def sse_event(event: dict[str, Any]) -> bytes:
    """A Responses API event (with its ``type``) as an ``event:`` + ``data:`` block."""
    return b"event: " + event["type"].encode() + b"\ndata: " + _encoder.encode(event) + b"\n\n"


def chat_error_sse(message: str, kind: str, status: int) -> bytes:
    """The last event of a chat completion stream that failed midway: ``data: {"error": ...}``,
    which the official client raises as ``openai.APIError`` (no ``[DONE]`` follows)."""
    return sse_data({"error": {"message": message, "type": kind, "code": kind, "status": status}})


def response_error_sse(message: str, kind: str, status: int, sequence_number: int) -> bytes:
    """The last event of a Responses stream that failed midway: an ``error`` event (OpenAI's fields:
    ``code``, ``message``, ``param``) that also carries ``error``, which the official client raises
    as ``openai.APIError``."""
    error = {"message": message, "type": kind, "code": kind, "status": status}
    return sse_event(
        {"type": "error", "code": kind, "message": message, "param": None, "error": error,
         "sequence_number": sequence_number}
    )  # fmt: skip


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


class ChatResponseEvents:
    """Responses API events, as they come, from the chunks of the chat completion a response is converted from.

    :meth:`start` gives ``response.created`` and ``response.in_progress`` (``shell``: the response
    being made, in progress, without output); :meth:`feed` takes one chunk's ``choices[0].delta`` as
    text and reasoning: reasoning opens a reasoning item (its summary text streamed as
    ``response.reasoning_summary_text.delta``), text a message (``response.output_text.delta``);
    :meth:`finish` takes the whole :class:`Response`, as the server answers it unstreamed, ends the
    items it streamed with their final text and ids, adds the others (function calls...) whole, and
    ends with ``response.completed`` (or ``response.incomplete``) carrying it. Items keep the places
    the stream gave them: the whole response's output is reordered to match when it differs.
    """

    def __init__(self, shell: Response):
        """``shell``: the response as it will be, before its output (id, model, echoed settings)."""
        self.shell = shell
        self.number = 0
        self.open: list[dict[str, Any]] = []  # the items streamed: type, id, index, text so far, logprobs
        self._current: dict[str, Any] | None = None

    def _event(self, event: dict[str, Any]) -> bytes:
        event["sequence_number"] = self.number
        self.number += 1
        return sse_event(event)

    def start(self) -> bytes:
        """``response.created`` and ``response.in_progress``."""
        whole = msgspec.to_builtins(msgspec.structs.replace(self.shell, output=[], status="in_progress"))
        return self._event({"type": "response.created", "response": whole}) + self._event(
            {"type": "response.in_progress", "response": whole}
        )

    def feed(self, text: str = "", reasoning: str = "", logprobs: list[Any] | None = None) -> bytes:
        """The events for one piece of reasoning and/or text."""
        out = b""
        if reasoning and not any(item["type"] == "message" for item in self.open):
            # Reasoning after the text is not streamed (its item could not come first): the whole
            # response, at the end, has it.
            out += self._delta("reasoning", reasoning, None)
        if text:
            out += self._delta("message", text, logprobs)
        return out

    def _delta(self, kind: str, text: str, logprobs: list[Any] | None) -> bytes:
        out = b""
        item = self._current
        if item is None or item["type"] != kind:
            if item is not None:
                out += self._close_content(item)
            item = self._current = {"type": kind, "id": new_id("rs" if kind == "reasoning" else "msg"), "text": []}
            item["index"] = len(self.open)
            item["logprobs"] = []
            self.open.append(item)
            started = (
                {"type": "reasoning", "id": item["id"], "summary": [], "status": "in_progress"}
                if kind == "reasoning"
                else {"type": "message", "id": item["id"], "role": "assistant", "content": [], "status": "in_progress"}
            )
            out += self._event({"type": "response.output_item.added", "output_index": item["index"], "item": started})
            where = {"item_id": item["id"], "output_index": item["index"]}
            if kind == "reasoning":
                part = {"type": "summary_text", "text": ""}
                out += self._event({"type": "response.reasoning_summary_part.added", **where, "summary_index": 0,
                                    "part": part})  # fmt: skip
            else:
                part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
                out += self._event({"type": "response.content_part.added", **where, "content_index": 0, "part": part})
        item["text"].append(text)
        item["logprobs"] += logprobs or []
        where = {"item_id": item["id"], "output_index": item["index"]}
        if kind == "reasoning":
            return out + self._event(
                {"type": "response.reasoning_summary_text.delta", **where, "summary_index": 0, "delta": text}
            )
        return out + self._event(
            {"type": "response.output_text.delta", **where, "content_index": 0, "delta": text,
             "logprobs": logprobs or []}
        )  # fmt: skip

    def _close_content(self, item: dict[str, Any]) -> bytes:
        """The ``done`` events of a streamed item's text (its item's own ``done`` comes with :meth:`finish`)."""
        text = "".join(item["text"])
        where = {"item_id": item["id"], "output_index": item["index"]}
        if item["type"] == "reasoning":
            part = {"type": "summary_text", "text": text}
            return self._event(
                {"type": "response.reasoning_summary_text.done", **where, "summary_index": 0, "text": text}
            ) + self._event({"type": "response.reasoning_summary_part.done", **where, "summary_index": 0, "part": part})
        part = {"type": "output_text", "text": text, "annotations": [], "logprobs": item["logprobs"]}
        return self._event(
            {"type": "response.output_text.done", **where, "content_index": 0, "text": text,
             "logprobs": item["logprobs"]}
        ) + self._event({"type": "response.content_part.done", **where, "content_index": 0, "part": part})  # fmt: skip

    def finish(self, response: Response) -> bytes:
        """The rest of the stream, from the whole ``response`` (whose output is reordered and given
        the streamed items' ids)."""
        out = b"" if self._current is None else self._close_content(self._current)
        self._current = None
        response.id, response.created_at = self.shell.id, self.shell.created_at
        rest = list(response.output)
        placed: list[Any] = []
        for item in self.open:
            kind = Reasoning if item["type"] == "reasoning" else Message
            match = next((candidate for candidate in rest if isinstance(candidate, kind)), None)
            if match is None:  # not in the whole response: the item as streamed, so that the indices hold
                text = "".join(item["text"])
                match = (
                    Reasoning(summary=[SummaryText(text=text)])
                    if kind is Reasoning
                    else Message(role="assistant", status="completed", content=[OutputText(text=text)])
                )
            else:
                rest.remove(match)
            match.id = item["id"]
            placed.append(match)
        response.output = placed + rest
        whole = msgspec.to_builtins(response)
        streamed = len(placed)
        for index, data in enumerate(whole["output"]):
            data.setdefault("status", "completed")
            if index < streamed:
                out += self._event({"type": "response.output_item.done", "output_index": index, "item": data})
                continue
            for event in _item_events(index, response.output[index], data):
                out += self._event(event)
        last = "response.incomplete" if response.status == "incomplete" else "response.completed"
        return out + self._event({"type": last, "response": whole})

    def error(self, message: str, kind: str, status: int) -> bytes:
        """The stream's last event when it failed midway."""
        event = response_error_sse(message, kind, status, self.number)
        self.number += 1
        return event
