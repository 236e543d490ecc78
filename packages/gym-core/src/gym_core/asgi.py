"""The raw-ASGI layers in front of every gym server's Litestar app, and :func:`build_stack`, the one
function that puts them in order.

A request meets them outermost first:

1. :class:`BodyTimeout`: a body that stops arriving for ``body_timeout_s`` is answered 408;
2. :class:`BearerAuth`, when the run has a token: 401 without it (``GET /health`` exempt);
3. :class:`SessionMiddleware`, on gym servers: the caller's signed session cookie, read into a
   :class:`~gym_core.sessions.Session` in the scope, and set on the answer when a handler created one;
4. :class:`JSONRoutes`, on gym servers: the ``post_json`` routes, served without Litestar's
   per-request machinery;
5. the Litestar app, for everything else.

The body bound is outermost so that every body read below it is bounded; the token check comes
before the cookie is parsed, so a refused request costs nothing more; the JSON routes sit inside
the sessions because their handlers read the session. :meth:`gym_core.servers.GymServer.build_app`
and :func:`gym_core.head.build_head_app` both serve what :func:`build_stack` returns. Each layer is
plain ASGI because each runs on every request.
"""

from __future__ import annotations

import asyncio
import hmac
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any, NamedTuple, cast

import msgspec
from litestar import Request, Response
from litestar.exceptions.http_exceptions import RequestEntityTooLarge

from gym_core.client import REQUEST_DEADLINE
from gym_core.failures import FINAL_HEADER
from gym_core.sessions import Session, SessionSigner

if TYPE_CHECKING:
    from litestar.types import Scope

__all__ = [
    "build_stack",
    "BodyTimeout",
    "BearerAuth",
    "SessionMiddleware",
    "JSONRoutes",
    "JSONRouteTable",
    "DEFAULT_BODY_TIMEOUT_S",
    "ConnectionLimits",
    "SESSION_SCOPE_KEY",
]

DEFAULT_BODY_TIMEOUT_S = 60.0  # as ServerConfig.body_timeout_s
SESSION_SCOPE_KEY = "gym_session"  # where SessionMiddleware leaves the caller's Session in the scope

_encoder = msgspec.json.Encoder()


def build_stack(
    app: Any,
    *,
    token: str | None,
    body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S,
    sessions: tuple[str, SessionSigner] | None = None,
    json_routes: JSONRouteTable | None = None,
) -> Any:
    """The ASGI application uvicorn serves: ``app`` (Litestar) under the layers, in the order the
    module docstring gives. ``token``: the run's bearer token (None: no check). ``sessions``: the
    cookie name and signer of the server's sessions (None: no session layer). ``json_routes``: the
    routes :class:`JSONRoutes` serves in front of ``app`` (None: all go to ``app``)."""
    if json_routes is not None:
        app = JSONRoutes(app, json_routes)
    if sessions is not None:
        cookie_name, signer = sessions
        app = SessionMiddleware(app, cookie_name=cookie_name, signer=signer)
    if token:
        app = BearerAuth(app, token)
    return BodyTimeout(app, body_timeout_s)


# --- the connection bounds -------------------------------------------------------------------------


class ConnectionLimits(NamedTuple):
    """How long a connection may hold a server without a request, and how many it may hold at once
    (the options of the same names every server has: :class:`gym_core.options.ServerConfig`).
    Not a layer: uvicorn enforces them (:func:`gym_core.serving.uvicorn_config`), reading them from
    the app's ``connection_limits`` (:meth:`gym_core.servers.GymServer.build_app` sets it)."""

    header_timeout_s: float = 10.0
    idle_timeout_s: float = 75.0
    max_connections: int = 10_000

    @classmethod
    def of(cls, options: Any) -> ConnectionLimits:
        """The limits a server's options (a :class:`~gym_core.options.ServerConfig`) set."""
        return cls(options.header_timeout_s, options.idle_timeout_s, options.max_connections)


# --- the request body's time bound ----------------------------------------------------------------


class BodyTimeout:
    """ASGI middleware: a request whose body stops arriving for ``timeout_s`` seconds is answered
    408 with ``connection: close``, and the app sees the client gone.

    uvicorn bounds only the idle time between requests (``timeout_keep_alive``), not a request
    whose body stalls half-way, so without this a stalled client holds a connection and a handler
    forever. The bound is on each wait for the next chunk, so a large body that keeps coming is fine;
    once the body is complete, ``receive`` (waiting for a disconnect) is not bounded.
    """

    connection_limits: ConnectionLimits | None = None  # the served app's, when it is outermost

    def __init__(self, app: Any, timeout_s: float = DEFAULT_BODY_TIMEOUT_S):
        self.app = app
        self.timeout_s = timeout_s

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        cycle = getattr(receive, "__self__", None)
        if getattr(cycle, "more_body", True) is False:
            # uvicorn has the whole body already (a small body arrives with its headers): there is
            # no wait to bound and no 408 to send, so the app gets uvicorn's own receive and send
            # (two wrappers less on every call of the hot path).
            return await self.app(scope, receive, send)
        body_done = False
        started = False
        dropped = False
        # uvicorn's cycle sets this event when a chunk (or the body's end) is in: receive() will
        # not wait, so there is no wait to bound. Elsewhere every receive is bounded.
        ready = getattr(cycle, "message_event", None)

        async def timed_receive() -> dict[str, Any]:
            nonlocal body_done, dropped
            if dropped:
                return {"type": "http.disconnect"}
            if body_done:
                return await receive()
            try:
                if ready is not None and ready.is_set():
                    message = await receive()
                else:
                    async with asyncio.timeout(self.timeout_s):
                        message = await receive()
            except TimeoutError:
                dropped = True
                if not started:
                    body = (
                        b'{"error": {"message": "request body not received within %g s", "type": "body_timeout"}}'
                        % self.timeout_s
                    )
                    await send(
                        {
                            "type": "http.response.start",
                            "status": 408,
                            "headers": [
                                (b"content-type", b"application/json"),
                                (b"content-length", b"%d" % len(body)),
                                (b"connection", b"close"),
                            ],
                        }
                    )
                    await send({"type": "http.response.body", "body": body})
                return {"type": "http.disconnect"}
            if message["type"] != "http.request" or not message.get("more_body", False):
                body_done = True
            return message

        async def guarded_send(message: dict[str, Any]) -> None:
            nonlocal started
            if dropped:  # the 408 was the answer; the app's own comes too late
                return
            started = True
            await send(message)

        await self.app(scope, timed_receive, guarded_send)


# --- the run's token ------------------------------------------------------------------------------

_AUTH_EXEMPT = frozenset({"/health"})
_UNAUTHORIZED = (
    b'{"error":{"message":"this gym server requires its run\'s token: send Authorization: Bearer <token> '
    b'(gym writes it to $GYM_HOME/tokens/; see the README, Security)","type":"unauthorized","status":401}}'
)


class BearerAuth:
    """ASGI middleware refusing (401) HTTP requests without the run's bearer token (the token's
    life cycle is in :mod:`gym_core.auth`). The refusal closes the connection: a caller without the
    token holds none longer than it takes to send one request's head."""

    def __init__(self, app: Any, token: str):
        self.app = app
        self._expected = f"Bearer {token}".encode()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] not in _AUTH_EXEMPT:
            presented = next((v for k, v in scope["headers"] if k == b"authorization"), b"")
            if not hmac.compare_digest(presented, self._expected):
                await send(
                    {
                        "type": "http.response.start",
                        "status": 401,
                        "headers": [
                            (b"content-type", b"application/json"),
                            (b"www-authenticate", b'Bearer realm="gym"'),
                            (b"content-length", str(len(_UNAUTHORIZED)).encode()),
                            (b"connection", b"close"),
                        ],
                    }
                )
                await send({"type": "http.response.body", "body": _UNAUTHORIZED})
                return
        await self.app(scope, receive, send)


# --- sessions -------------------------------------------------------------------------------------


class SessionMiddleware:
    """ASGI middleware: reads the signed session cookie, exposes a :class:`Session` in the scope
    (under :data:`SESSION_SCOPE_KEY`), and sets the cookie on the response when the handler
    created a session."""

    def __init__(self, app: Any, *, cookie_name: str, signer: SessionSigner):
        self.app = app
        self.cookie_name = cookie_name
        self.signer = signer
        self._cookie_prefix = cookie_name.encode() + b"="

    def _read_cookie(self, scope: dict[str, Any]) -> Session:
        for key, value in scope["headers"]:
            if key == b"cookie" and self._cookie_prefix in value:
                for part in value.split(b";"):
                    part = part.strip()
                    if part.startswith(self._cookie_prefix):
                        session_id = self.signer.unsign(part[len(self._cookie_prefix) :].decode("latin-1"))
                        return Session(session_id, forged=session_id is None)
        return Session(None)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        session = self._read_cookie(scope)
        scope[SESSION_SCOPE_KEY] = session

        async def send_with_cookie(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start" and session.created:
                cookie = f"{self.cookie_name}={self.signer.sign(session.id)}; Path=/; HttpOnly; SameSite=Lax"
                message = {**message, "headers": [*message.get("headers", []), (b"set-cookie", cookie.encode())]}
            await send(message)

        await self.app(scope, receive, send_with_cookie)


# --- the JSON routes ------------------------------------------------------------------------------


class JSONRouteTable(NamedTuple):
    """What :class:`JSONRoutes` serves, for which server."""

    routes: dict[str, tuple[Callable[[Request], Awaitable[Any]], Any]]  # path: (function, Litestar handler)
    server_name: str  # named in the answer to a caller whose time ran out
    max_body_bytes: int
    on_error: Callable[[Request, Exception], Response]  # the server's answer to what a function raised


_BUDGET_GRACE_S = 0.05


def _caller_budget(scope: dict[str, Any]) -> float | None:
    """The seconds the caller waits for this answer (its TIMEOUT_HEADER), if it said and it makes sense."""
    for name, value in scope["headers"]:
        if name == b"x-gym-timeout":
            try:
                budget = float(value)
            except ValueError:
                return None
            return budget if 0 < budget < 1e7 else None
    return None


class _BodyRequest(Request):
    """The Litestar request a JSON route's function receives: its body was read already."""

    __slots__ = ("_gym_body",)

    async def body(self) -> bytes:
        return self._gym_body

    async def stream(self) -> AsyncIterator[bytes]:
        yield self._gym_body


class _ClientGone(Exception):
    pass


class _Expired(Exception):
    """The caller's budget ran out before the handler answered."""


async def _within(seconds: float, call: Awaitable[Any]) -> Any:
    """``await call``, cancelled after ``seconds`` (then :class:`_Expired`). What ``asyncio.timeout``
    does, with one timer and no context object: that machinery was 4–6 % of a resources or model
    server's CPU at rollout rates, where every request carries its caller's budget. A cancellation
    from elsewhere (the client gone, shutdown), or one that arrives with the timer's, still
    propagates; a ``TimeoutError`` of the handler's own stays its own."""
    task = asyncio.current_task()
    assert task is not None
    expired = False
    cancelling = task.cancelling()

    def expire() -> None:
        nonlocal expired
        expired = True
        task.cancel()

    timer = asyncio.get_running_loop().call_later(seconds, expire)
    try:
        result = await call
    except asyncio.CancelledError:
        if expired and task.uncancel() <= cancelling:
            raise _Expired from None
        raise
    finally:
        timer.cancel()
    if expired:  # the handler answered despite the cancellation: the count back to where it was
        task.uncancel()
    return result


class JSONRoutes:
    """Raw-ASGI dispatch of the ``post_json`` routes, in front of Litestar.

    Litestar's per-request machinery (router, middleware stack, signature model, Response and
    Headers objects) was about a third of the CPU time of a resources or model server on the
    rollout hot path. These routes need none of it: the body read within ``max_body_bytes``, one
    call, one encode, and the server's error handling. Anything else goes to Litestar.
    """

    def __init__(self, app: Any, table: JSONRouteTable):
        self.app = app
        self.routes = table.routes
        self.server_name = table.server_name
        self.limit = table.max_body_bytes
        self.on_error = table.on_error

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        route = self.routes.get(scope["path"]) if scope["type"] == "http" and scope["method"] == "POST" else None
        if route is None:
            await self.app(scope, receive, send)
            return
        fn, handler = route
        # What Litestar's router would have put in the scope, for functions that use the request.
        scope["app"] = scope["litestar_app"] = self.app
        scope["route_handler"] = handler
        scope["path_params"] = {}
        request = _BodyRequest(cast("Scope", scope), receive, send)  # an HTTP scope, as Litestar's router passes
        budget = _caller_budget(scope)
        try:
            request._gym_body = await self._read_body(scope, receive)
            if budget is None:
                result = await fn(request)
            else:
                # The caller stops waiting after `budget` s: so does this handler (a moment later, so
                # that a caller whose own time runs out sees its own timeout, not a race with this
                # answer), and the calls it makes are bounded to end a little earlier, so that their
                # typed error gets back in time.
                REQUEST_DEADLINE.set(time.monotonic() + budget - min(1.0, budget / 10))
                try:
                    result = await _within(budget + _BUDGET_GRACE_S, fn(request))
                except _Expired:
                    message = f"{self.server_name}: no answer within the caller's {budget:g} s"
                    result = Response(
                        content=_encoder.encode(
                            {"error": {"message": message, "type": "deadline_exceeded", "status": 504}}
                        ),
                        status_code=504,
                        media_type="application/json",
                        headers={FINAL_HEADER: "1"},
                    )
            if not isinstance(result, Response):
                body = _encoder.encode(result)
        except _ClientGone:
            return
        except Exception as exc:
            result = self.on_error(request, exc)
        if isinstance(result, Response):
            await result.to_asgi_response(None, request)(cast("Scope", scope), receive, send)
            return
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))],
            }
        )
        await send({"type": "http.response.body", "body": body})

    async def _read_body(self, scope: dict[str, Any], receive: Any) -> bytes:
        for name, value in scope["headers"]:
            if name == b"content-length" and int(value) > self.limit:
                raise RequestEntityTooLarge
        chunks = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise _ClientGone
            chunk = message.get("body", b"")
            if chunk:
                size += len(chunk)
                if size > self.limit:
                    raise RequestEntityTooLarge
                chunks.append(chunk)
            if not message.get("more_body", False):
                return chunks[0] if len(chunks) == 1 else b"".join(chunks)
