"""The floor's server: a bare ASGI app on uvicorn with gym's uvicorn settings; one fixed JSON answer."""

from __future__ import annotations

import sys

import uvicorn

from gym_core.serving import uvicorn_config

from benchmarks._common import lifespan

BODY = b'{"ok":true}'
HEADERS = [(b"content-type", b"application/json"), (b"content-length", str(len(BODY)).encode())]


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        await lifespan(receive, send)
        return
    more = True
    while more:  # read the whole body, as a real handler does
        message = await receive()
        more = message.get("more_body", False)
    await send({"type": "http.response.start", "status": 200, "headers": HEADERS})
    await send({"type": "http.response.body", "body": BODY})


if __name__ == "__main__":
    uvicorn.Server(uvicorn_config(app, "127.0.0.1", int(sys.argv[1]))).run()
