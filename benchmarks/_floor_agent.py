"""The strict floor's agent: a bare ASGI app on uvicorn (gym's settings) that makes a rollout's six
calls with gym's own transport and answers a fixed JSON body; no gym logic.

``python -m benchmarks._floor_agent PORT MODEL_URL RESOURCES_URL``: each request is read whole, then
seed (resources), model, tool (resources), model, verify, close the session (resources), one after
another, each with ``gym_core.http1`` as gym's agent calls its servers; any answer but 200 is a 502."""

from __future__ import annotations

import sys

import uvicorn

from gym_core.http1 import Pool, origin_of
from gym_core.serving import uvicorn_config

from benchmarks._common import lifespan

BODY = b'{"reward":1.0}'
HEADERS = [(b"content-type", b"application/json"), (b"content-length", str(len(BODY)).encode())]
CALL_HEADERS = {"content-type": "application/json"}
CALL_BODY = b'{"task": 1}'


def make_app(model_url: str, resources_url: str):
    model, resources = origin_of(model_url), origin_of(resources_url)
    hops = [resources, model, resources, model, resources, resources]
    pools: list[Pool] = []  # made on the server's loop, at the first request

    async def app(scope, receive, send):
        if scope["type"] == "lifespan":
            await lifespan(receive, send)
            return
        more = True
        while more:
            message = await receive()
            more = message.get("more_body", False)
        if not pools:
            pools.append(Pool(limit=100_000, limit_per_host=1_000))
        status = 200
        for origin in hops:
            resp = await pools[0].request("POST", origin, "/x", CALL_HEADERS, CALL_BODY, 30)
            if resp.status != 200:
                status = 502
        await send({"type": "http.response.start", "status": status, "headers": HEADERS})
        await send({"type": "http.response.body", "body": BODY})

    return app


if __name__ == "__main__":
    port, model_url, resources_url = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    uvicorn.Server(uvicorn_config(make_app(model_url, resources_url), "127.0.0.1", port)).run()
