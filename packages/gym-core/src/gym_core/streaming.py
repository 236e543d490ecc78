"""``stream: true``: a finished chat completion or response as the server-sent events OpenAI streams.

:class:`gym_core.servers.ModelServer` answers a streaming request with these events, written from
the whole answer once the server has it (the events arrive together, at the end of generation):
the official ``openai`` client's streaming API (``chat.completions.create(stream=True)``,
``responses.create(stream=True)``, ``responses.stream(...)``) reads them as it reads OpenAI's.

- Chat completions: ``data: <chat.completion.chunk>`` lines, one chunk with each choice's role and
  text, one per tool call, then one with its ``finish_reason`` (and ``logprobs``), a last chunk with
  ``usage`` when ``stream_options.include_usage`` is true, and ``data: [DONE]``.
- Responses: ``event: TYPE`` + ``data: {...}`` for ``response.created``, ``response.in_progress``,
  then per output item ``response.output_item.added``, its content (``response.content_part.added``,
  ``response.output_text.delta``, ``response.output_text.done``, ``response.content_part.done`` for a
  message; ``response.function_call_arguments.delta`` and ``.done`` for a function call),
  ``response.output_item.done``, and last ``response.completed`` (``response.incomplete`` when the
  response is incomplete) with the whole response, training fields included. Every event has its
  ``sequence_number``.

A server that has the text as it is generated writes it as it comes instead: :class:`ChatChunkStream`
and :class:`ResponseEventStream` write the same events, the text in as many deltas as it arrived in
(``start()``, ``text(delta)`` for each piece, ``finish(whole answer)``; ``error(message)`` when
generation fails after the stream began). The concatenated deltas are the whole answer's text.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import msgspec

from gym_core.schemas import ChatCompletion, FunctionCall, Message, OutputText, Response, new_id

__all__ = ["EVENT_STREAM", "chat_completion_chunks", "chat_completion_sse", "response_events", "response_sse"]

EVENT_STREAM = "text/event-stream"
_encoder = msgspec.json.Encoder()


def chat_completion_chunks(completion: ChatCompletion, include_usage: bool = False) -> Iterator[dict[str, Any]]:
    """The ``chat.completion.chunk`` objects of ``completion``, in order."""
    base = {"id": completion.id, "object": "chat.completion.chunk", "created": completion.created}
    base["model"] = completion.model

    def chunk(index: int, delta: dict[str, Any], finish: str | None = None, logprobs: Any = None) -> dict[str, Any]:
        choice = {"index": index, "delta": delta, "finish_reason": finish, "logprobs": logprobs}
        return {**base, "choices": [choice]}

    for choice in completion.choices:
        message = msgspec.to_builtins(choice.message)
        yield chunk(choice.index, {"role": "assistant", "content": message.get("content") or ""})
        for position, call in enumerate(message.get("tool_calls") or []):
            yield chunk(choice.index, {"tool_calls": [{"index": position, **call}]})
        yield chunk(choice.index, {}, choice.finish_reason, choice.logprobs)
    if include_usage and completion.usage is not None:
        yield {**base, "choices": [], "usage": msgspec.to_builtins(completion.usage)}


def chat_completion_sse(completion: ChatCompletion, include_usage: bool = False) -> bytes:
    """``completion`` as the body of a streamed chat completion (``data:`` lines, ``[DONE]`` last)."""
    lines = [b"data: " + _encoder.encode(c) + b"\n\n" for c in chat_completion_chunks(completion, include_usage)]
    return b"".join(lines) + b"data: [DONE]\n\n"


def _item_started(item: dict[str, Any]) -> dict[str, Any]:
    started = {**item, "status": "in_progress"}
    if item.get("type") == "message":
        started["content"] = []
    elif item.get("type") == "function_call":
        started["arguments"] = ""
    return started


def _item_events(index: int, item: Any, data: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The events of output item ``index`` (``item``, and ``data``: its builtins), added to done."""
    data.setdefault("status", "completed")
    item_id = data.get("id") or ""
    yield {"type": "response.output_item.added", "output_index": index, "item": _item_started(data)}
    where = {"item_id": item_id, "output_index": index}
    if isinstance(item, Message) and not isinstance(item.content, str):
        for part_index, (part, part_data) in enumerate(zip(item.content, data["content"])):
            at = {**where, "content_index": part_index}
            if isinstance(part, OutputText):
                empty = {**part_data, "text": "", "logprobs": []}
                logprobs = part_data.get("logprobs") or []
                yield {"type": "response.content_part.added", **at, "part": empty}
                yield {"type": "response.output_text.delta", **at, "delta": part.text, "logprobs": logprobs}
                yield {"type": "response.output_text.done", **at, "text": part.text, "logprobs": logprobs}
            else:
                yield {"type": "response.content_part.added", **at, "part": part_data}
            yield {"type": "response.content_part.done", **at, "part": part_data}
    elif isinstance(item, FunctionCall):
        yield {"type": "response.function_call_arguments.delta", **where, "delta": item.arguments}
        yield {
            "type": "response.function_call_arguments.done",
            **where,
            "name": item.name,
            "arguments": item.arguments,
        }
    yield {"type": "response.output_item.done", "output_index": index, "item": data}


def response_events(response: Response) -> Iterator[dict[str, Any]]:
    """The Responses API streaming events of ``response``, in order, without ``sequence_number``."""
    whole = msgspec.to_builtins(response)
    yield {"type": "response.created", "response": {**whole, "status": "in_progress", "output": []}}
    yield {"type": "response.in_progress", "response": {**whole, "status": "in_progress", "output": []}}
    for index, (item, data) in enumerate(zip(response.output, whole["output"])):
        yield from _item_events(index, item, data)
    last = "response.incomplete" if response.status == "incomplete" else "response.completed"
    yield {"type": last, "response": whole}


def response_sse(response: Response) -> bytes:
    """``response`` as the body of a streamed Responses API answer (``event:`` + ``data:`` blocks)."""
    blocks = []
    for number, event in enumerate(response_events(response)):
        event["sequence_number"] = number
        blocks.append(b"event: " + event["type"].encode() + b"\ndata: " + _encoder.encode(event) + b"\n\n")
    return b"".join(blocks)


def _sse(event: dict[str, Any]) -> bytes:
    return b"event: " + event["type"].encode() + b"\ndata: " + _encoder.encode(event) + b"\n\n"


class ChatChunkStream:
    """A chat completion streamed as it is generated: the chunks of :func:`chat_completion_chunks`,
    each choice's text in the deltas given to :meth:`text`.

    ``start()`` (each choice's role chunk), ``text(delta, index)`` for each piece of choice
    ``index``'s text, ``finish(completion)`` with the whole answer (its id and created time become
    the stream's): per choice the text not yet sent, each tool call, the finish reason and log-probs;
    the usage chunk when asked for; ``[DONE]``. What :meth:`text` sent must begin each choice's text
    (``ValueError`` otherwise: the client already has it).
    """

    def __init__(
        self, model: str, include_usage: bool = False, completion_id: str | None = None, choices: int = 1
    ) -> None:
        self.id = completion_id or new_id("chatcmpl")
        self.created = int(time.time())
        self.model = model
        self.include_usage = include_usage
        self.sent = [""] * choices  # the text sent of each choice

    def _data(self, chunk: dict[str, Any]) -> bytes:
        base = {"id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model}
        return b"data: " + _encoder.encode({**base, **chunk}) + b"\n\n"

    def _chunk(self, index: int, delta: dict[str, Any], finish: str | None = None, logprobs: Any = None) -> bytes:
        return self._data(
            {"choices": [{"index": index, "delta": delta, "finish_reason": finish, "logprobs": logprobs}]}
        )

    def start(self) -> bytes:
        return b"".join(self._chunk(index, {"role": "assistant", "content": ""}) for index in range(len(self.sent)))

    def text(self, delta: str, index: int = 0) -> bytes:
        self.sent[index] += delta
        return self._chunk(index, {"content": delta})

    def finish(self, completion: ChatCompletion) -> bytes:
        if len(completion.choices) != len(self.sent):
            raise ValueError(f"{len(completion.choices)} choices; the stream began {len(self.sent)}")
        out = []
        for choice in completion.choices:
            message = msgspec.to_builtins(choice.message)
            content = message.get("content") or ""
            sent = self.sent[choice.index]
            if not content.startswith(sent):
                raise ValueError(f"choice {choice.index}'s text does not begin with the text already streamed")
            if content[len(sent) :]:
                out.append(self._chunk(choice.index, {"content": content[len(sent) :]}))
            for position, call in enumerate(message.get("tool_calls") or []):
                out.append(self._chunk(choice.index, {"tool_calls": [{"index": position, **call}]}))
            out.append(self._chunk(choice.index, {}, choice.finish_reason, choice.logprobs))
        if self.include_usage and completion.usage is not None:
            out.append(self._data({"choices": [], "usage": msgspec.to_builtins(completion.usage)}))
        return b"".join(out) + b"data: [DONE]\n\n"

    def error(self, message: str, kind: str = "server_error") -> bytes:
        """An error after the stream began (the ``openai`` client raises ``APIError`` on it)."""
        return b"data: " + _encoder.encode({"error": {"message": message, "type": kind}}) + b"\n\n"


class ResponseEventStream:
    """A Responses API answer streamed as it is generated: the events of :func:`response_events`,
    the text of its first output item (a message) in the deltas given to :meth:`text`.

    ``start()`` (``response.created``, ``response.in_progress``), ``text(delta)`` for each piece of
    text (the first adds the message item and its ``output_text`` part), ``finish(response)`` with
    the whole answer (its id and creation time become the stream's, its message the streamed
    item's id): the text not yet sent, that item's ``done`` events, the other items' events, and
    ``response.completed`` (or ``response.incomplete``). A response whose text was never streamed
    finishes with all its items' events, as :func:`response_events` writes them.
    """

    def __init__(self, stub: Response) -> None:
        """``stub``: the response as it will be, before its output (id, model, echoed settings)."""
        self.stub = stub
        self.item_id = new_id("msg")
        self.sent = ""
        self.number = 0

    def _event(self, event: dict[str, Any]) -> bytes:
        event["sequence_number"] = self.number
        self.number += 1
        return _sse(event)

    def start(self) -> bytes:
        whole = msgspec.to_builtins(msgspec.structs.replace(self.stub, output=[], status="in_progress"))
        created = self._event({"type": "response.created", "response": whole})
        return created + self._event({"type": "response.in_progress", "response": whole})

    def text(self, delta: str, index: int = 0) -> bytes:
        """``delta``: more of the message's text (``index``: 0, the one output a stream has)."""
        if index != 0:
            raise ValueError("a Responses stream has one output: index 0")
        at = {"item_id": self.item_id, "output_index": 0, "content_index": 0}
        out = b""
        if not self.sent:
            item = {"type": "message", "id": self.item_id, "role": "assistant", "status": "in_progress", "content": []}
            part = {**msgspec.to_builtins(OutputText(text="")), "logprobs": []}
            out += self._event({"type": "response.output_item.added", "output_index": 0, "item": item})
            out += self._event({"type": "response.content_part.added", **at, "part": part})
        self.sent += delta
        return out + self._event({"type": "response.output_text.delta", **at, "delta": delta, "logprobs": []})

    def finish(self, response: Response) -> bytes:
        response = msgspec.structs.replace(response, id=self.stub.id, created_at=self.stub.created_at)
        items = list(response.output)
        streamed = None
        if self.sent:
            first = items[0] if items else None
            if not isinstance(first, Message) or isinstance(first.content, str) or not first.content:
                raise ValueError("the response does not begin with the message whose text was streamed")
            part = first.content[0]
            if not isinstance(part, OutputText) or not part.text.startswith(self.sent):
                raise ValueError("the response's text does not begin with the text already streamed")
            streamed = items[0] = msgspec.structs.replace(first, id=self.item_id)
            response = msgspec.structs.replace(response, output=items)
        whole = msgspec.to_builtins(response)
        out = []
        for index, (item, data) in enumerate(zip(items, whole["output"])):
            if item is not streamed:
                out += [self._event(e) for e in _item_events(index, item, data)]
                continue
            data.setdefault("status", "completed")
            at = {"item_id": self.item_id, "output_index": index, "content_index": 0}
            part_data = data["content"][0]
            rest = part_data["text"][len(self.sent) :]
            if rest:
                out.append(self._event({"type": "response.output_text.delta", **at, "delta": rest, "logprobs": []}))
            logprobs = part_data.get("logprobs") or []
            done = {"type": "response.output_text.done", **at, "text": part_data["text"], "logprobs": logprobs}
            out.append(self._event(done))
            out.append(self._event({"type": "response.content_part.done", **at, "part": part_data}))
            out.append(self._event({"type": "response.output_item.done", "output_index": index, "item": data}))
        last = "response.incomplete" if response.status == "incomplete" else "response.completed"
        out.append(self._event({"type": last, "response": whole}))
        return b"".join(out)

    def error(self, message: str, code: str = "server_error") -> bytes:
        """An ``error`` event after the stream began (the ``openai`` client raises ``APIError`` on it)."""
        error = {"message": message, "type": code, "code": code}
        return self._event({"type": "error", "code": code, "message": message, "param": None, "error": error})
