"""``stream: true``: OpenAI's server-sent events, written by gym's model servers.

The one writer of streamed chat completions and Responses API events; :mod:`gym_core.relay` reads
them (an upstream's), :mod:`gym_core.upstream` relays them. Public surface:

- Encoding: :func:`sse_data` (a ``data:`` event, chat completions' format), :func:`sse_event` (an
  ``event:`` + ``data:`` block, the Responses API's), :data:`SSE_DONE` (a chat stream's end),
  :data:`EVENT_STREAM` (the media type).
- Errors after the stream began: :func:`chat_error_sse` and :func:`response_error_sse`, the last
  event of a stream that failed midway, which the official ``openai`` client raises as
  ``openai.APIError`` (never a stream that just stops, which it would take for a whole answer).
- A finished answer, streamed at once: :func:`chat_completion_chunks` / :func:`chat_completion_sse`
  and :func:`response_sse`. :class:`gym_core.servers.ModelServer` answers
  a streaming request so, once it has the whole answer.
- An answer streamed as it is generated: :class:`ChatChunkStream` and :class:`ResponseEventStream`
  (``start()``, a delta for each piece of text, ``finish(whole answer)``, ``error(...)``): the same
  events, the text in as many deltas as it arrived in, each with its tokens' log-probs when given.

The events:

- Chat completions: ``data: <chat.completion.chunk>`` lines, one chunk with each choice's role and
  text, one per tool call, then one with its ``finish_reason`` (and ``logprobs``), a last chunk with
  ``usage`` when ``stream_options.include_usage`` is true, and ``data: [DONE]``.
- Responses: ``event: TYPE`` + ``data: {...}`` for ``response.created``, ``response.in_progress``,
  then per output item ``response.output_item.added``, its content (``response.content_part.added``,
  ``response.output_text.delta``, ``response.output_text.done``, ``response.content_part.done`` for a
  message; ``response.reasoning_summary_part.added``, ``response.reasoning_summary_text.delta`` and
  their ``done`` events for reasoning; ``response.function_call_arguments.delta`` and ``.done`` for a
  function call), ``response.output_item.done``, and last ``response.completed``
  (``response.incomplete`` when the response is incomplete) with the whole response, training fields
  included. Every event has its ``sequence_number``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import msgspec

from gym_core.schemas import (
    ChatCompletion,
    FunctionCall,
    Message,
    OutputText,
    Reasoning,
    Response,
    SummaryText,
    new_id,
)

__all__ = [
    "EVENT_STREAM",
    "SSE_DONE",
    "sse_data",
    "sse_event",
    "chat_error_sse",
    "response_error_sse",
    "chat_completion_chunks",
    "chat_completion_sse",
    "response_sse",
    "ChatChunkStream",
    "ResponseEventStream",
]

EVENT_STREAM = "text/event-stream"
SSE_DONE = b"data: [DONE]\n\n"  # the last event of a whole chat completion stream
_encoder = msgspec.json.Encoder()


def sse_data(payload: Any) -> bytes:
    """``payload`` as one ``data:`` event (chat completions' format)."""
    return b"data: " + _encoder.encode(payload) + b"\n\n"


def sse_event(event: dict[str, Any]) -> bytes:
    """A Responses API event (with its ``type``) as an ``event:`` + ``data:`` block."""
    return b"event: " + event["type"].encode() + b"\ndata: " + _encoder.encode(event) + b"\n\n"


def chat_error_sse(message: str, kind: str = "server_error", status: int = 500) -> bytes:
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


def _chunk(index: int, delta: dict[str, Any], finish: str | None = None, logprobs: Any = None) -> dict[str, Any]:
    """The ``choices`` of a chunk with one choice's ``delta``."""
    return {"choices": [{"index": index, "delta": delta, "finish_reason": finish, "logprobs": logprobs}]}


def _calls_and_finish(index: int, message: dict[str, Any], finish: str | None, logprobs: Any) -> Iterator[dict]:
    """The chunks that end choice ``index``: one per tool call of ``message``, then its finish reason."""
    for position, call in enumerate(message.get("tool_calls") or []):
        yield _chunk(index, {"tool_calls": [{"index": position, **call}]})
    yield _chunk(index, {}, finish, logprobs)


def chat_completion_chunks(completion: ChatCompletion, include_usage: bool = False) -> Iterator[dict[str, Any]]:
    """The ``chat.completion.chunk`` objects of ``completion``, in order."""
    base = {"id": completion.id, "object": "chat.completion.chunk", "created": completion.created}
    base["model"] = completion.model
    for choice in completion.choices:
        message = msgspec.to_builtins(choice.message)
        yield {**base, **_chunk(choice.index, {"role": "assistant", "content": message.get("content") or ""})}
        for chunk in _calls_and_finish(choice.index, message, choice.finish_reason, choice.logprobs):
            yield {**base, **chunk}
    if include_usage and completion.usage is not None:
        yield {**base, "choices": [], "usage": msgspec.to_builtins(completion.usage)}


def chat_completion_sse(completion: ChatCompletion, include_usage: bool = False) -> bytes:
    """``completion`` as the body of a streamed chat completion (``data:`` lines, ``[DONE]`` last)."""
    return b"".join(sse_data(c) for c in chat_completion_chunks(completion, include_usage)) + SSE_DONE


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


def response_sse(response: Response) -> bytes:
    """``response`` as the body of a streamed Responses API answer (``event:`` + ``data:`` blocks):
    :class:`ResponseEventStream` finished at once."""
    stream = ResponseEventStream(response)
    return stream.start() + stream.finish(response)


class ChatChunkStream:
    """A chat completion streamed as it is generated: the chunks of :func:`chat_completion_chunks`,
    each choice's text in the deltas given to :meth:`text`.

    ``start()`` (each choice's role chunk), ``text(delta, index, logprobs)`` for each piece of choice
    ``index``'s text (``logprobs``: its tokens' entries, sent as the chunk's ``logprobs.content``),
    ``finish(completion)`` with the whole answer (its id and created time become the stream's): per
    choice the text not yet sent, each tool call, the finish reason with the log-probs not yet sent;
    the usage chunk when asked for; ``[DONE]``. What :meth:`text` sent must begin each choice's text
    and log-probs (``ValueError`` otherwise: the client already has it).
    """

    def __init__(
        self, model: str, include_usage: bool = False, completion_id: str | None = None, choices: int = 1
    ) -> None:
        self.id = completion_id or new_id("chatcmpl")
        self.created = int(time.time())
        self.model = model
        self.include_usage = include_usage
        self.sent = [""] * choices  # the text sent of each choice
        self.logprobs_sent = [0] * choices  # how many of each choice's log-prob entries were sent

    def _data(self, chunk: dict[str, Any]) -> bytes:
        return sse_data({"id": self.id, "object": "chat.completion.chunk", "created": self.created,
                         "model": self.model, **chunk})  # fmt: skip

    def start(self) -> bytes:
        return b"".join(
            self._data(_chunk(index, {"role": "assistant", "content": ""})) for index in range(len(self.sent))
        )

    def text(self, delta: str, index: int = 0, logprobs: list[Any] | None = None) -> bytes:
        self.sent[index] += delta
        if logprobs is None:
            return self._data(_chunk(index, {"content": delta}))
        self.logprobs_sent[index] += len(logprobs)
        return self._data(_chunk(index, {"content": delta}, logprobs={"content": logprobs}))

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
                out.append(self._data(_chunk(choice.index, {"content": content[len(sent) :]})))
            logprobs = choice.logprobs
            if logprobs is not None and self.logprobs_sent[choice.index]:
                entries = logprobs.get("content") or []
                if len(entries) < self.logprobs_sent[choice.index]:
                    raise ValueError(f"choice {choice.index} has fewer log-probs than were streamed")
                logprobs = {**logprobs, "content": entries[self.logprobs_sent[choice.index] :]}
            out += [self._data(c) for c in _calls_and_finish(choice.index, message, choice.finish_reason, logprobs)]
        if self.include_usage and completion.usage is not None:
            out.append(self._data({"choices": [], "usage": msgspec.to_builtins(completion.usage)}))
        return b"".join(out) + SSE_DONE

    def error(self, message: str, kind: str = "server_error", status: int = 500) -> bytes:
        """The stream's last event when it failed midway (:func:`chat_error_sse`)."""
        return chat_error_sse(message, kind, status)


class ResponseEventStream:
    """A Responses API answer streamed as it is generated (the events of the module's docstring),
    reasoning and text in the deltas they came in.

    :meth:`start` gives ``response.created`` and ``response.in_progress``; :meth:`feed` (or
    :meth:`text`) takes one piece of reasoning and/or text, with the text's tokens' log-prob entries:
    reasoning opens a reasoning item (``response.reasoning_summary_text.delta``), text a message
    (``response.output_text.delta``); :meth:`finish` takes the whole :class:`Response`, as the
    server answers it unstreamed: the message's text and log-probs not yet sent, the ``done`` events
    of the items streamed (with their final ids), the other items (function calls...) whole, and
    ``response.completed`` (or ``response.incomplete``) carrying it. Items keep the places the stream
    gave them: the whole response's output is reordered to match when it differs. A response whose
    text was never streamed finishes with all its items' events (:func:`response_sse`).
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

    def text(self, delta: str, index: int = 0, logprobs: list[Any] | None = None) -> bytes:
        """``delta``: more of the message's text (``index``: 0, the one output a stream has)."""
        if index != 0:
            raise ValueError("a Responses stream has one output: index 0")
        return self.feed(delta, logprobs=logprobs)

    def feed(self, text: str = "", reasoning: str = "", logprobs: list[Any] | None = None) -> bytes:
        """The events for one piece of reasoning and/or text."""
        out = b""
        if reasoning and not any(item["type"] == "message" for item in self.open):
            # Reasoning after the text is not streamed (its item could not come first): the whole
            # response, at the end, has it.
            out += self._delta("reasoning", reasoning, None)
        if text or logprobs:
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

    def _rest(self, item: dict[str, Any], final: Any) -> bytes:
        """The message's text and log-probs that ``final`` (its item in the whole response) has and
        the stream has not sent yet, as one more delta; nothing when ``final``'s text does not
        continue what was sent (what was sent stands)."""
        part = final.content[0] if isinstance(final, Message) and not isinstance(final.content, str) else None
        if not isinstance(part, OutputText) or not final.content:
            return b""
        sent = "".join(item["text"])
        logprobs = part.logprobs if isinstance(part.logprobs, list) else []
        if not part.text.startswith(sent) or logprobs[: len(item["logprobs"])] != item["logprobs"]:
            return b""
        rest, rest_logprobs = part.text[len(sent) :], logprobs[len(item["logprobs"]) :]
        return self._delta("message", rest, rest_logprobs) if rest or rest_logprobs else b""

    def finish(self, response: Response) -> bytes:
        """The rest of the stream, from the whole ``response`` (whose output is reordered and given
        the streamed items' ids)."""
        response.id, response.created_at = self.shell.id, self.shell.created_at
        rest = list(response.output)
        placed: list[Any] = []
        out = b""
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
                if item is self._current and kind is Message:
                    out += self._rest(item, match)
            match.id = item["id"]
            placed.append(match)
        if self._current is not None:
            out += self._close_content(self._current)
        self._current = None
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

    def error(self, message: str, kind: str = "server_error", status: int = 500) -> bytes:
        """The stream's last event when it failed midway (:func:`response_error_sse`)."""
        event = response_error_sse(message, kind, status, self.number)
        self.number += 1
        return event
