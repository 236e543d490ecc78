"""The raw-ASGI layer serving ``post_json`` routes behaves as the Litestar routes behind it did."""

from __future__ import annotations

from typing import Any

import aiohttp
import msgspec
from litestar import Request, Response

from gym_core.servers import GymServer, ServerConfig, error_response, json_response


class Routes(GymServer):
    kind = "resources"

    def routes(self) -> list[Any]:
        async def info(request: Request) -> Any:
            body = msgspec.json.decode(await request.body())
            return {
                "path": request.url.path,
                "method": request.method,
                "json": await request.json(),
                "echo": body,
                "has_app": request.app is not None,
                "handler": request.route_handler.handler_name,
                "header": request.headers.get("x-probe"),
            }

        async def custom(request: Request) -> Response:
            return json_response({"custom": True}, 201, headers={"x-extra": "yes"})

        async def refused(request: Request) -> Response:
            return error_response("nope", 409, "conflict")

        async def not_encodable(request: Request) -> Any:
            return {"value": object()}

        async def streamed(request: Request) -> Any:
            return {"size": sum([len(chunk) async for chunk in request.stream()])}

        return [
            *super().routes(),
            self.post_json("/info", info),
            self.post_json("/custom", custom),
            self.post_json("/refused", refused),
            self.post_json("/not_encodable", not_encodable),
            self.post_json("/streamed", streamed),
        ]


async def _call(method: str, url: str, data: bytes = b"", **headers: str) -> tuple[int, Any, Any]:
    async with aiohttp.ClientSession() as session:
        async with session.request(method, url, data=data, headers=headers) as resp:
            raw = await resp.read()
            return resp.status, msgspec.json.decode(raw) if raw else None, resp.headers


async def test_request_object_works_in_json_routes(serve):
    with serve(Routes(name="r")) as url:
        status, body, headers = await _call("POST", url + "/info", b'{"a": [1, 2]}', **{"x-probe": "42"})
        assert status == 200
        assert headers["content-type"] == "application/json"
        assert body == {
            "path": "/info",
            "method": "POST",
            "json": {"a": [1, 2]},
            "echo": {"a": [1, 2]},
            "has_app": True,
            "handler": body["handler"],
            "header": "42",
        }
        assert "info" in body["handler"]
        status, body, _ = await _call("POST", url + "/streamed", b"x" * 5000)
        assert (status, body) == (200, {"size": 5000})


async def test_responses_and_errors_keep_their_shape(serve):
    with serve(Routes(name="r")) as url:
        status, body, headers = await _call("POST", url + "/custom")
        assert (status, body, headers["x-extra"]) == (201, {"custom": True}, "yes")
        status, body, _ = await _call("POST", url + "/refused")
        assert (status, body["error"]["type"], body["error"]["message"]) == (409, "conflict", "nope")
        status, body, _ = await _call("POST", url + "/not_encodable")
        assert status == 500 and body["error"]["type"] == "internal_error"


async def test_body_limit_with_and_without_content_length(serve):
    with serve(Routes(ServerConfig(max_body_bytes=100), name="r")) as url:
        status, body, _ = await _call("POST", url + "/streamed", b"x" * 101)
        assert status == 413 and body["error"]["status"] == 413

        async def chunks():
            for _ in range(5):
                yield b"x" * 50

        async with aiohttp.ClientSession() as session:  # chunked: no content-length to check first
            async with session.post(url + "/streamed", data=chunks()) as resp:
                assert resp.status == 413


async def test_everything_else_still_goes_to_litestar(serve):
    with serve(Routes(name="r")) as url:
        status, body, _ = await _call("GET", url + "/info")
        assert status == 405 and body["error"]["status"] == 405
        status, body, _ = await _call("POST", url + "/nowhere")
        assert status == 404
        status, body, _ = await _call("GET", url + "/health")
        assert (status, body["status"]) == (200, "ok")
