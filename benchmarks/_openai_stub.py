"""An instant OpenAI-compatible chat endpoint (the external model behind ``openai_model``).

A conversation whose last message is a tool result gets a text answer; any other gets one
``increment_counter`` tool call. Raw ASGI so that the stub costs as little as possible.
"""

from __future__ import annotations

import json
import sys

import uvicorn

from gym_core.serving import uvicorn_config

from benchmarks._common import lifespan

_USAGE = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
CALL = json.dumps(
    {
        "id": "chatcmpl-stub",
        "object": "chat.completion",
        "created": 0,
        "model": "stub",
        "choices": [
            {
                "index": 0,
                "finish_reason": "tool_calls",
                "message": {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "increment_counter", "arguments": '{"count": 3}'},
                        }
                    ],
                },
            }
        ],
        "usage": _USAGE,
    }
).encode()
TEXT = json.dumps(
    {
        "id": "chatcmpl-stub",
        "object": "chat.completion",
        "created": 0,
        "model": "stub",
        "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "added 3"}}],
        "usage": _USAGE,
    }
).encode()


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        await lifespan(receive, send)
        return
    chunks = []
    more = True
    while more:
        message = await receive()
        chunks.append(message.get("body", b""))
        more = message.get("more_body", False)
    body = b"".join(chunks)
    # The last message's role decides; a cheap look at the tail of the body is enough here.
    answer = TEXT if b'"role":"tool"' in body[body.rfind(b'"role"') :] else CALL
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(answer)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": answer})


if __name__ == "__main__":
    uvicorn.Server(uvicorn_config(app, "127.0.0.1", int(sys.argv[1]))).run()
