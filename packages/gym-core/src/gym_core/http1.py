"""A lean HTTP/1.1 client: keep-alive connection pools on asyncio protocols, httptools parsing.

This is the transport under :class:`~gym_core.client.ServerClient`, on the hot path of every
rollout (an agent makes five calls per rollout). A general client such as aiohttp builds a
request object, a URL object, header multidicts, a payload, a stream writer, a stream reader and a
response object per call; profiled at rollout rates that was about 40 % of an agent's CPU. Here a
call is one bytes write and one parser pass into a future: gym's calls are small JSON exchanges
with whole bodies in memory, so nothing more is needed.

What it does: ``http`` and ``https`` (system trust store, hostname checked); requests with a
``content-length`` body or none; responses with ``content-length``, chunked, or (without either)
read until the server closes; keep-alive reuse, most recently used connection first; a limit on
connections per origin and in all (callers wait for one, within their own timeout); idle
connections dropped once the server closes them or after ``idle_s``. What it leaves out: proxies,
redirects, compression (it sends no ``accept-encoding``, so servers answer uncompressed), cookies
(callers handle theirs), streaming. Header names and values are checked for line breaks.

Errors: :class:`ConnectTimeout` when a connection does not open within the connect timeout,
:class:`ConnectionFailed` (refused, reset, closed before a whole answer, an answer that is not
HTTP), ``TimeoutError`` past the call's ``deadline`` (the wait for a connection included); a
connection interrupted mid-exchange is closed, never reused. The deadline is a timer on the
answer's future, armed only where the call waits (cheaper than ``asyncio.timeout``'s cancellation
machinery, which was a tenth of a server's CPU at rollout rates).
"""

from __future__ import annotations

import asyncio
import collections
import ssl
from urllib.parse import quote, urlsplit

import httptools

__all__ = ["Pool", "Response", "ConnectionFailed", "ConnectTimeout", "Origin", "origin_of", "request_head"]

_SAFE_PATH = "/:@!$&'()*+,;=?%-._~"
# Some API gateways turn away requests that do not say what sent them.
_USER_AGENT = "user-agent: gym-core\r\n"


class ConnectionFailed(ConnectionError):
    """The connection failed before a whole answer arrived (refused, reset, closed, not HTTP)."""


class ConnectTimeout(ConnectionFailed):
    """No connection within the connect timeout."""


def _first(headers: list[tuple[str, str]], name: str) -> str | None:
    for key, value in headers:
        if key == name:
            return value
    return None


class Response:
    __slots__ = ("status", "headers", "body")

    def __init__(self, status: int, headers: list[tuple[str, str]], body: bytes):
        self.status = status
        self.headers = headers  # (lower-case name, value), in the order received
        self.body = body

    def header(self, name: str) -> str | None:
        return _first(self.headers, name)

    def getall(self, name: str) -> list[str]:
        return [value for key, value in self.headers if key == name]


class Origin:
    """Where a base URL points: scheme, host, port, the path prefix, and the Host header."""

    __slots__ = ("scheme", "host", "port", "prefix", "host_header", "key")

    def __init__(self, url: str):
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url!r}")
        self.scheme = parts.scheme
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.prefix = parts.path.rstrip("/")
        default = self.port == (443 if self.scheme == "https" else 80)
        name = f"[{self.host}]" if ":" in self.host else self.host
        self.host_header = name if default else f"{name}:{self.port}"
        self.key = (self.scheme, self.host, self.port)


_origins: dict[str, Origin] = {}


def origin_of(url: str) -> Origin:
    """The parsed origin of a base URL (cached: a run calls a handful of base URLs)."""
    found = _origins.get(url)
    if found is None:
        if len(_origins) > 10_000:
            _origins.clear()
        found = _origins[url] = Origin(url)
    return found


def _target(prefix: str, path: str) -> str:
    target = prefix + path
    if target.isascii() and " " not in target and "\r" not in target and "\n" not in target:
        return target or "/"
    return quote(target, safe=_SAFE_PATH) or "/"


def request_head(method: str, origin: Origin, path: str, headers: dict[str, str] | None) -> bytes:
    """The head of a request for ``path`` at ``origin``: its line, ``host``, ``user-agent`` (gym-core's
    unless ``headers`` has one) and ``headers``; ``ValueError`` for a header with a line break."""
    agent = "" if headers and "user-agent" in headers else _USER_AGENT
    lines = [f"{method} {_target(origin.prefix, path)} HTTP/1.1\r\nhost: {origin.host_header}\r\n{agent}"]
    for name, value in (headers or {}).items():
        if "\n" in value or "\r" in value or "\n" in name or "\r" in name:
            raise ValueError(f"header {name!r} contains a line break")
        lines.append(f"{name}: {value}\r\n")
    lines.append("\r\n")
    return "".join(lines).encode("latin-1")


class _Connection(asyncio.Protocol):
    """One keep-alive connection; one exchange at a time."""

    def __init__(self, pool: Pool, key: tuple[str, str, int]):
        self.pool = pool
        self.key = key
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.waiter: asyncio.Future[Response] | None = None
        self.closed = False
        self.idle_since = 0.0
        self.counted = True  # holds one of the pool's slots until forgotten
        self._headers: list[tuple[str, str]] = []
        self._chunks: list[bytes] = []
        self._headers_done = False
        self._head_request = False
        self._keep_alive = True

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if self.waiter is None:  # bytes nobody asked for: the connection cannot be trusted
            self._fail(ConnectionFailed("unexpected data on an idle connection"))
            return
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(ConnectionFailed(f"not an HTTP answer: {exc}"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            if (
                self._headers_done
                and _first(self._headers, "content-length") is None
                and _first(self._headers, "transfer-encoding") is None
            ):
                # An answer without a length ends when the connection does (HTTP/1.0 style).
                self._keep_alive = False
                waiter.set_result(Response(self.parser.get_status_code(), self._headers, b"".join(self._chunks)))
            else:
                reason = f": {exc}" if exc else ""
                waiter.set_exception(
                    ConnectionFailed(f"the server closed the connection before a whole answer{reason}")
                )
        self.pool._lost(self)

    # httptools callbacks
    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers.append((name.decode("latin-1").lower(), value.decode("latin-1")))

    def on_headers_complete(self) -> None:
        self._headers_done = True
        if self._head_request and self.waiter is not None and not self.waiter.done():
            # A HEAD answer announces a body that never comes: it ends here, and the parser, which
            # would wait for that body, cannot read this connection on.
            self._keep_alive = False
            self.waiter.set_result(Response(self.parser.get_status_code(), self._headers, b""))
            self.close()

    def on_body(self, body: bytes) -> None:
        self._chunks.append(body)

    def on_message_complete(self) -> None:
        status = self.parser.get_status_code()
        if status < 200:  # an interim answer (100 Continue, 103 Early Hints): the real one follows
            self._headers, self._chunks, self._headers_done = [], [], False
            return
        self._keep_alive = self.parser.should_keep_alive()
        waiter = self.waiter
        if waiter is None or waiter.done():  # a second answer to one request: nothing to trust here
            self._keep_alive = False
            self.close()
            return
        body = self._chunks[0] if len(self._chunks) == 1 else b"".join(self._chunks)
        waiter.set_result(Response(status, self._headers, body))

    def _fail(self, exc: Exception) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(exc)
        self.close()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            if self.transport is not None:
                self.transport.abort()

    async def exchange(self, data: bytes | list[bytes], head_request: bool, deadline: float | None) -> Response:
        self._headers = []
        self._chunks = []
        self._headers_done = False
        self._head_request = head_request
        self.waiter = waiter = self.pool.loop.create_future()
        timer = None if deadline is None else self.pool.loop.call_at(deadline, _expire, waiter)
        try:
            assert self.transport is not None
            if isinstance(data, list):
                self.transport.writelines(data)
            else:
                self.transport.write(data)
            return await waiter
        finally:
            self.waiter = None
            if timer is not None:
                timer.cancel()

    @property
    def reusable(self) -> bool:
        return not self.closed and self._keep_alive and not self.transport.is_closing()  # type: ignore[union-attr]


def _expire(waiter: asyncio.Future[Response]) -> None:
    if not waiter.done():
        waiter.set_exception(TimeoutError())


class _Slots:
    """Connections of one origin: idle ones (most recent last), how many are open, who waits."""

    __slots__ = ("idle", "open", "waiters")

    def __init__(self) -> None:
        self.idle: list[_Connection] = []
        self.open = 0
        self.waiters: collections.deque[asyncio.Future[_Connection | None]] = collections.deque()


class Pool:
    """Keep-alive connections to any number of origins, bounded per origin and in all."""

    def __init__(self, *, limit: int = 100_000, limit_per_host: int = 1_000, idle_s: float = 15.0):
        self.loop = asyncio.get_running_loop()
        self.limit = limit
        self.limit_per_host = limit_per_host
        self.idle_s = idle_s
        self.open = 0
        self.closed = False
        self._slots: dict[tuple[str, str, int], _Slots] = {}
        self._waiters: collections.deque[asyncio.Future[_Connection | None]] = collections.deque()  # for `limit`
        self._ssl: ssl.SSLContext | None = None

    async def request(
        self,
        method: str,
        origin: Origin,
        path: str,
        headers: dict[str, str] | None,
        body: bytes | None,
        connect_timeout: float,
        deadline: float | None = None,
    ) -> Response:
        """One exchange on a pooled connection, answered by ``deadline`` (``loop.time()``) or
        ``TimeoutError``."""
        if body is not None:
            headers = {**(headers or {}), "content-length": str(len(body))}
        head = request_head(method, origin, path, headers)
        data: bytes | list[bytes] = head if body is None else (head + body if len(body) < 65_536 else [head, body])
        conn = self._idle(origin)
        if conn is None:
            if deadline is None:
                conn = await self._acquire(origin, connect_timeout)
            else:
                async with asyncio.timeout_at(deadline):
                    conn = await self._acquire(origin, connect_timeout)
        try:
            response = await conn.exchange(data, method == "HEAD", deadline)
        except BaseException:
            conn.close()  # interrupted mid-exchange (timeout, cancel, failure): never reused
            self._release(conn)
            raise
        self._release(conn)
        return response

    def _idle(self, origin: Origin) -> _Connection | None:
        """A reusable idle connection to ``origin``, most recently used first, or None."""
        slots = self._slots.get(origin.key)
        if slots is None or self.closed:
            return None
        while slots.idle:
            conn = slots.idle.pop()
            if conn.reusable and self.loop.time() - conn.idle_since < self.idle_s:
                return conn
            conn.close()
            self._forget(conn, slots)
        return None

    async def _acquire(self, origin: Origin, connect_timeout: float) -> _Connection:
        if self.closed:
            raise ConnectionFailed("the client is closed")
        slots = self._slots.get(origin.key)
        if slots is None:
            slots = self._slots[origin.key] = _Slots()
        while True:
            conn = self._idle(origin)
            if conn is not None:
                return conn
            if slots.open < self.limit_per_host and self.open < self.limit:
                slots.open += 1
                self.open += 1
                try:
                    return await self._connect(origin, connect_timeout)
                except BaseException:
                    self._free_slot(slots)
                    raise
            waiter: asyncio.Future[_Connection | None] = self.loop.create_future()
            (slots.waiters if slots.open >= self.limit_per_host else self._waiters).append(waiter)
            try:
                handed = await waiter
            except BaseException:
                if waiter.done() and not waiter.cancelled() and (late := waiter.result()) is not None:
                    self._release(late)  # handed over as we were cancelled: pass it on
                raise
            if handed is not None:
                return handed

    async def _connect(self, origin: Origin, connect_timeout: float) -> _Connection:
        ssl_context = None
        if origin.scheme == "https":
            if self._ssl is None:
                self._ssl = ssl.create_default_context()
            ssl_context = self._ssl
        conn = _Connection(self, origin.key)
        try:
            async with asyncio.timeout(connect_timeout):
                await self.loop.create_connection(lambda: conn, origin.host, origin.port, ssl=ssl_context)
        except TimeoutError:
            raise ConnectTimeout(f"could not connect to {origin.host_header} within {connect_timeout:g} s") from None
        except OSError as exc:
            raise ConnectionFailed(f"could not connect to {origin.host_header}: {exc.strerror or exc}") from None
        return conn

    def _release(self, conn: _Connection) -> None:
        slots = self._slots[conn.key]
        if conn.reusable and not self.closed:
            while slots.waiters:
                waiter = slots.waiters.popleft()
                if not waiter.done():
                    waiter.set_result(conn)
                    return
            if not self._waiters:  # else its slot goes to a caller of another origin, waiting under `limit`
                conn.idle_since = self.loop.time()
                slots.idle.append(conn)
                return
        conn.close()
        self._forget(conn, slots)

    def _lost(self, conn: _Connection) -> None:
        """The transport closed (either side): an idle connection leaves the pool."""
        slots = self._slots.get(conn.key)
        if slots is not None and conn in slots.idle:
            slots.idle.remove(conn)
            self._forget(conn, slots)

    def _forget(self, conn: _Connection, slots: _Slots) -> None:
        if conn.counted:
            conn.counted = False
            self._free_slot(slots)

    def _free_slot(self, slots: _Slots) -> None:
        slots.open -= 1
        self.open -= 1
        # A slot is free: wake one waiter (of this origin first), to open a connection of its own.
        for queue in (slots.waiters, self._waiters):
            while queue:
                waiter = queue.popleft()
                if not waiter.done():
                    waiter.set_result(None)
                    return

    async def close(self) -> None:
        self.closed = True
        for slots in self._slots.values():
            for conn in list(slots.idle):
                conn.close()
            for queue in (slots.waiters,):
                while queue:
                    waiter = queue.popleft()
                    if not waiter.done():
                        waiter.set_exception(ConnectionFailed("the client is closed"))
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_exception(ConnectionFailed("the client is closed"))
        await asyncio.sleep(0)  # let transports run their connection_lost
