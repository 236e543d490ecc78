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
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import msgspec

from gym_core.schemas import ChatCompletion, FunctionCall, Message, OutputText, Response

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


def response_events(response: Response) -> Iterator[dict[str, Any]]:
    """The Responses API streaming events of ``response``, in order, without ``sequence_number``."""
    whole = msgspec.to_builtins(response)
    yield {"type": "response.created", "response": {**whole, "status": "in_progress", "output": []}}
    yield {"type": "response.in_progress", "response": {**whole, "status": "in_progress", "output": []}}
    for index, (item, data) in enumerate(zip(response.output, whole["output"])):
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
    last = "response.incomplete" if response.status == "incomplete" else "response.completed"
    yield {"type": last, "response": whole}


def response_sse(response: Response) -> bytes:
    """``response`` as the body of a streamed Responses API answer (``event:`` + ``data:`` blocks)."""
    blocks = []
    for number, event in enumerate(response_events(response)):
        event["sequence_number"] = number
        blocks.append(b"event: " + event["type"].encode() + b"\ndata: " + _encoder.encode(event) + b"\n\n")
    return b"".join(blocks)
