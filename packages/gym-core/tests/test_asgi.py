"""gym's ASGI layers: every served app, a gym server's or the head's, has them in one order."""

from __future__ import annotations

import asyncio
import socket
import time
from typing import Any

import pytest
from litestar import Litestar, Request

from gym_core.asgi import BearerAuth, BodyTimeout, JSONRoutes, SessionMiddleware, _Expired, _within
from gym_core.config import load_config
from gym_core.head import build_head_app
from gym_core.servers import GymServer, ServerConfig


class Echo(GymServer):
    def routes(self) -> list[Any]:
        async def echo(request: Request) -> Any:
            return await request.body()

        return [*super().routes(), self.post_json("/echo", echo)]


def layers(app: Any) -> list[type]:
    """The types of an app's layers, outermost first, down to the Litestar app."""
    found = []
    while not isinstance(app, Litestar):
        found.append(type(app))
        app = app.app
    return [*found, Litestar]


def test_a_gym_server_is_served_under_every_layer_in_order():
    config = load_config(base={"auth_token": "t0ken"}, env_file=None)
    assert layers(GymServer(name="s", global_config=config).build_app()) == [
        BodyTimeout,
        BearerAuth,
        SessionMiddleware,
        JSONRoutes,
        Litestar,
    ]
    assert layers(GymServer(name="s").build_app()) == [BodyTimeout, SessionMiddleware, JSONRoutes, Litestar]


def test_the_head_has_the_body_bound_and_the_token_check_only():
    assert layers(build_head_app(load_config(base={"auth_token": "t0ken"}, env_file=None))) == [
        BodyTimeout,
        BearerAuth,
        Litestar,
    ]
    assert layers(build_head_app(load_config(base={}, env_file=None))) == [BodyTimeout, Litestar]


def test_a_server_in_a_thread_keeps_its_own_body_timeout(serve):
    """The bound comes with the app, so a server served in a thread (tests, gym-train) has the
    ``body_timeout_s`` of its config, as one started by ``gym run`` does."""
    with serve(Echo(ServerConfig(body_timeout_s=0.3), name="s")) as url:
        host, port = url.removeprefix("http://").rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(b"POST /echo HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\n{")
            started = time.monotonic()
            answer = sock.recv(4096)
    assert answer.startswith(b"HTTP/1.1 408") and b"body_timeout" in answer
    assert time.monotonic() - started < 5


# --- the caller's budget on a JSON route (JSONRoutes' timer) ------------------------------------------


async def test_a_budget_that_runs_out_ends_the_call_and_leaves_the_task_uncancelled():
    with pytest.raises(_Expired):
        await _within(0.05, asyncio.sleep(30))
    # The timer's cancellation was taken back: the task goes on awaiting as before.
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]
    await asyncio.sleep(0.01)
    assert await _within(5, asyncio.sleep(0, "answer")) == "answer"


async def test_a_handler_s_own_timeout_and_an_outside_cancellation_stay_what_they_are():
    async def own_timeout() -> None:
        raise TimeoutError("the handler's own wait")

    with pytest.raises(TimeoutError, match="own wait"):
        await _within(5, own_timeout())
    started = asyncio.Event()

    async def slow() -> None:
        started.set()
        await asyncio.sleep(30)

    task = asyncio.ensure_future(_within(5, slow()))
    await started.wait()
    task.cancel()  # the client gone, or shutdown: not the caller's budget
    with pytest.raises(asyncio.CancelledError):
        await task


def test_a_body_already_whole_goes_through_unwrapped_and_one_still_coming_stays_bounded(serve):
    """A small body arrives with its headers: nothing to wait for, so the app gets uvicorn's own
    receive (no per-call wrapper on the hot path); a body still coming is read through the bound."""
    seen: list[tuple[bool, bytes]] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        unwrapped = hasattr(getattr(receive, "__self__", None), "more_body")
        body, more = b"", True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        seen.append((unwrapped, body))
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})

    with serve(BodyTimeout(app, 5.0)) as url:
        host, port = url.removeprefix("http://").rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(b"POST /x HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\n{}")
            assert sock.recv(4096).startswith(b"HTTP/1.1 200")
            sock.sendall(b"POST /x HTTP/1.1\r\nhost: x\r\ncontent-length: 4\r\n\r\n{")
            time.sleep(0.2)
            sock.sendall(b'"}}')
            assert sock.recv(4096).startswith(b"HTTP/1.1 200")
    assert seen == [(True, b"{}"), (False, b'{"}}')]
