"""A minimal agent for ``scale_100k``: ``POST /run`` answers a fixed scored result after a delay.

``python -m benchmarks._delay_agent PORT DELAY_S``: a bare ASGI app on uvicorn with gym's uvicorn
settings, so that the collector, not the agent, is what the measurement reads."""

from __future__ import annotations

import asyncio
import sys

import uvicorn

from gym_core.serving import uvicorn_config

from benchmarks._common import lifespan

BODY = b'{"reward":1.0,"environment":"delay","response":{"output":[{"type":"message","content":"ok"}]}}'
HEADERS = [(b"content-type", b"application/json"), (b"content-length", str(len(BODY)).encode())]


def make_app(delay_s: float):
    async def app(scope, receive, send):
        if scope["type"] == "lifespan":
            await lifespan(receive, send)
            return
        more = True
        while more:  # read the whole body (the task), as a real agent does
            message = await receive()
            more = message.get("more_body", False)
        await asyncio.sleep(delay_s)
        await send({"type": "http.response.start", "status": 200, "headers": HEADERS})
        await send({"type": "http.response.body", "body": BODY})

    return app


if __name__ == "__main__":
    uvicorn.Server(uvicorn_config(make_app(float(sys.argv[2])), "127.0.0.1", int(sys.argv[1]))).run()
