"""gym_core.http1, the client transport, against real loopback servers: well-behaved (uvicorn) and
raw sockets that misbehave the ways servers do (chunked, unframed, garbage, closing, slow)."""

from __future__ import annotations

import asyncio
import socket
import ssl

import pytest
import trustme

from gym_core.http1 import ConnectionFailed, ConnectTimeout, Pool, origin_of


class RawServer:
    """An asyncio server answering each request with ``answer(request_bytes)`` (None: say nothing),
    counting connections; ``close_after`` closes a connection after answering."""

    def __init__(self, answer, *, close_after: bool = False, ssl_context: ssl.SSLContext | None = None):
        self.answer = answer
        self.close_after = close_after
        self.ssl_context = ssl_context
        self.connections = 0
        self.open_now = 0
        self.most_open = 0
        self.requests: list[bytes] = []
        self.writers: list[asyncio.StreamWriter] = []

    async def __aenter__(self) -> str:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0, ssl=self.ssl_context)
        port = self.server.sockets[0].getsockname()[1]
        return f"{'https' if self.ssl_context else 'http'}://{'localhost' if self.ssl_context else '127.0.0.1'}:{port}"

    async def __aexit__(self, *exc) -> None:
        for writer in self.writers:
            writer.close()
        self.server.close()
        await self.server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.open_now += 1
        self.most_open = max(self.most_open, self.open_now)
        self.writers.append(writer)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    (
                        int(line.split(b":")[1])
                        for line in head.split(b"\r\n")
                        if line.lower().startswith(b"content-length:")
                    ),
                    0,
                )
                request = head + await reader.readexactly(length)
                self.requests.append(request)
                reply = self.answer(request)
                if asyncio.iscoroutine(reply):
                    reply = await reply
                if reply is None:
                    continue
                writer.write(reply)
                await writer.drain()
                if self.close_after:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self.open_now -= 1
            writer.close()


def ok(body: bytes = b'{"ok":true}', extra: bytes = b"") -> bytes:
    return (
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
        + extra
        + b"content-length: "
        + str(len(body)).encode()
        + b"\r\n\r\n"
        + body
    )


async def test_keep_alive_reuses_one_connection_for_sequential_requests():
    server = RawServer(lambda request: ok())
    async with server as url:
        pool = Pool()
        for _ in range(20):
            response = await pool.request("POST", origin_of(url), "/x", {"content-type": "application/json"}, b"{}", 5)
            assert (response.status, response.body) == (200, b'{"ok":true}')
        await pool.close()
    assert server.connections == 1 and len(server.requests) == 20
    first = server.requests[0]
    assert (
        first.startswith(b"POST /x HTTP/1.1\r\n")
        and b"content-length: 2\r\n" in first
        and first.endswith(b"\r\n\r\n{}")
    )
    assert b"user-agent: gym-core\r\n" in first and b"accept-encoding" not in first.lower()


async def test_connections_per_host_are_limited_and_waiters_are_served_in_turn():
    async def slow(request: bytes) -> bytes:
        await asyncio.sleep(0.05)
        return ok()

    server = RawServer(slow)
    async with server as url:
        pool = Pool(limit_per_host=2)
        responses = await asyncio.gather(*(pool.request("GET", origin_of(url), "/x", None, None, 5) for _ in range(10)))
        await pool.close()
    assert [r.status for r in responses] == [200] * 10
    assert server.most_open == 2 and server.connections == 2


async def test_the_overall_limit_holds_across_origins():
    async def slow(request: bytes) -> bytes:
        await asyncio.sleep(0.05)
        return ok()

    first, second = RawServer(slow), RawServer(slow)
    async with first as url_a, second as url_b:
        pool = Pool(limit=1)
        calls = [pool.request("GET", origin_of(url), "/x", None, None, 5) for url in (url_a, url_b) * 3]
        responses = await asyncio.gather(*calls)
        await pool.close()
        assert pool.open <= 1
    assert [r.status for r in responses] == [200] * 6
    assert first.most_open == 1 and second.most_open == 1
    assert len(first.requests) == 3 and len(second.requests) == 3


async def test_a_chunked_answer_is_joined():
    def chunked(request: bytes) -> bytes:
        return b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n1\r\n \r\n5\r\nworld\r\n0\r\n\r\n"

    server = RawServer(chunked)
    async with server as url:
        pool = Pool()
        for _ in range(2):
            response = await pool.request("GET", origin_of(url), "/x", None, None, 5)
            assert response.body == b"hello world"
        await pool.close()
    assert server.connections == 1  # a chunked answer leaves the connection reusable


async def test_an_answer_without_length_ends_with_the_connection_and_is_not_reused():
    server = RawServer(
        lambda request: b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n\r\nall of it", close_after=True
    )
    async with server as url:
        pool = Pool()
        for _ in range(2):
            response = await pool.request("GET", origin_of(url), "/x", None, None, 5)
            assert (response.status, response.body) == (200, b"all of it")
        await pool.close()
    assert server.connections == 2


async def test_interim_answers_are_skipped_and_head_answers_have_no_body():
    def answer(request: bytes) -> bytes:
        if request.startswith(b"HEAD"):
            return b"HTTP/1.1 200 OK\r\ncontent-length: 50\r\n\r\n"  # the length of the body a GET would get
        return b"HTTP/1.1 100 Continue\r\n\r\n" + ok()

    server = RawServer(answer)
    async with server as url:
        pool = Pool()
        response = await pool.request("POST", origin_of(url), "/x", None, b"{}", 5)
        assert (response.status, response.body) == (200, b'{"ok":true}')
        async with asyncio.timeout(5):
            head = await pool.request("HEAD", origin_of(url), "/x", None, None, 5)
        assert (head.status, head.body, head.header("content-length")) == (200, b"", "50")
        assert (await pool.request("GET", origin_of(url), "/x", None, None, 5)).status == 200
        await pool.close()
    assert server.connections == 2  # the HEAD answer's connection is not read on


async def test_connection_close_is_honoured():
    server = RawServer(lambda request: ok(extra=b"connection: close\r\n"), close_after=True)
    async with server as url:
        pool = Pool()
        for _ in range(3):
            assert (await pool.request("GET", origin_of(url), "/x", None, None, 5)).status == 200
        await pool.close()
    assert server.connections == 3


async def test_headers_are_read_case_insensitively_and_repeated_ones_kept():
    server = RawServer(lambda request: ok(extra=b"Set-Cookie: a=1; Path=/\r\nSET-COOKIE: b=2\r\nX-Gym-Final: 1\r\n"))
    async with server as url:
        pool = Pool()
        response = await pool.request("GET", origin_of(url), "/x", None, None, 5)
        await pool.close()
    assert response.getall("set-cookie") == ["a=1; Path=/", "b=2"]
    assert response.header("x-gym-final") == "1" and response.header("absent") is None


async def test_garbage_is_a_connection_failure_and_the_connection_is_dropped():
    server = RawServer(lambda request: b"SSH-2.0-OpenSSH_9.2\r\n\r\n")
    async with server as url:
        pool = Pool()
        with pytest.raises(ConnectionFailed, match="not an HTTP answer"):
            await pool.request("GET", origin_of(url), "/x", None, None, 5)
        assert pool.open == 0
        await pool.close()


async def test_a_body_cut_short_is_a_connection_failure():
    server = RawServer(lambda request: b'HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n{"a"', close_after=True)
    async with server as url:
        pool = Pool()
        with pytest.raises(ConnectionFailed, match="closed the connection before a whole answer"):
            await pool.request("GET", origin_of(url), "/x", None, None, 5)
        assert pool.open == 0
        await pool.close()


async def test_a_server_closing_an_idle_connection_costs_the_next_request_nothing():
    server = RawServer(lambda request: ok())
    async with server as url:
        pool = Pool()
        assert (await pool.request("GET", origin_of(url), "/x", None, None, 5)).status == 200
        for writer in server.writers:  # the server's keep-alive timeout
            writer.close()
        await asyncio.sleep(0.05)
        assert pool.open == 0  # the closed idle connection left the pool
        assert (await pool.request("GET", origin_of(url), "/x", None, None, 5)).status == 200
        await pool.close()
    assert server.connections == 2


async def test_idle_connections_expire():
    server = RawServer(lambda request: ok())
    async with server as url:
        pool = Pool(idle_s=0.05)
        await pool.request("GET", origin_of(url), "/x", None, None, 5)
        await asyncio.sleep(0.1)
        await pool.request("GET", origin_of(url), "/x", None, None, 5)
        await pool.close()
    assert server.connections == 2


async def test_a_call_ended_by_its_caller_or_its_deadline_frees_its_connection_slot():
    def silent_on_hang(request: bytes) -> bytes | None:
        return None if b"/hang" in request else ok()

    server = RawServer(silent_on_hang)
    async with server as url:
        pool = Pool(limit_per_host=1)
        loop = asyncio.get_running_loop()
        # The caller gives up (asyncio.timeout cancels it) mid-exchange: the connection is closed.
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.1):
                await pool.request("GET", origin_of(url), "/hang", None, None, 5)
        assert (await pool.request("GET", origin_of(url), "/x", None, None, 5)).status == 200
        # The deadline ends a hung answer, and the wait of a call queued for the only connection.
        hung = asyncio.ensure_future(pool.request("GET", origin_of(url), "/hang", None, None, 5, loop.time() + 0.3))
        await asyncio.sleep(0.05)
        with pytest.raises(TimeoutError):
            await pool.request("GET", origin_of(url), "/x", None, None, 5, loop.time() + 0.1)
        with pytest.raises(TimeoutError):
            await hung
        assert (await pool.request("GET", origin_of(url), "/x", None, None, 5, loop.time() + 5)).status == 200
        assert pool.open == 1
        await pool.close()
    assert server.connections == 3  # a new connection after each interrupted exchange


async def test_callers_cancelled_while_waiting_for_a_connection_leak_nothing():
    release = asyncio.Event()

    async def held(request: bytes) -> bytes:
        await release.wait()
        return ok()

    server = RawServer(held)
    async with server as url:
        pool = Pool(limit_per_host=1)
        holder = asyncio.ensure_future(pool.request("GET", origin_of(url), "/x", None, None, 5))
        await asyncio.sleep(0.05)
        waiters = [asyncio.ensure_future(pool.request("GET", origin_of(url), "/x", None, None, 5)) for _ in range(5)]
        await asyncio.sleep(0.05)
        for waiter in waiters[:4]:
            waiter.cancel()
        release.set()
        assert (await holder).status == 200
        assert (await waiters[4]).status == 200
        assert all(w.cancelled() for w in waiters[:4])
        assert (await pool.request("GET", origin_of(url), "/x", None, None, 5)).status == 200
        assert pool.open == 1
        await pool.close()
    assert server.connections == 1


async def test_connect_failures_are_typed():
    pool = Pool()
    with pytest.raises(ConnectionFailed, match="could not connect to 127.0.0.1:1"):
        await pool.request("GET", origin_of("http://127.0.0.1:1"), "/x", None, None, 5)
    # A listener that never accepts, its queue full: the SYN is dropped, the connect timeout ends it.
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    fillers = []
    for _ in range(3):
        filler = socket.socket()
        filler.setblocking(False)
        filler.connect_ex(listener.getsockname())
        fillers.append(filler)
    try:
        with pytest.raises(ConnectTimeout, match="within 0.3 s"):
            await pool.request("GET", origin_of("http://{}:{}".format(*listener.getsockname())), "/x", None, None, 0.3)
    finally:
        for sock in (*fillers, listener):
            sock.close()
    assert pool.open == 0
    await pool.close()


async def test_targets_are_prefixed_and_escaped_and_headers_cannot_inject_lines():
    server = RawServer(lambda request: ok())
    async with server as url:
        pool = Pool()
        await pool.request("GET", origin_of(url + "/v1/"), "/models/a b/é", None, None, 5)
        assert server.requests[-1].startswith(b"GET /v1/models/a%20b/%C3%A9 HTTP/1.1\r\n")
        assert f"host: 127.0.0.1:{url.rsplit(':', 1)[1]}".encode() in server.requests[-1]
        with pytest.raises(ValueError, match="line break"):
            await pool.request("GET", origin_of(url), "/x", {"x-evil": "a\r\nx-admin: yes"}, None, 5)
        await pool.close()
    assert len(server.requests) == 1


async def test_a_large_body_goes_both_ways():
    body = b"x" * 3_000_000
    server = RawServer(lambda request: ok(request[request.index(b"\r\n\r\n") + 4 :]))
    async with server as url:
        pool = Pool()
        response = await pool.request("POST", origin_of(url), "/echo", None, body, 5)
        await pool.close()
    assert response.body == body


async def test_https_checks_the_certificate(monkeypatch, tmp_path):
    ca = trustme.CA()
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("localhost").configure_cert(server_context)
    server = RawServer(lambda request: ok(), ssl_context=server_context)
    async with server as url:
        untrusting = Pool()
        with pytest.raises(ConnectionFailed, match="certificate verify failed"):
            await untrusting.request("GET", origin_of(url), "/x", None, None, 5)
        await untrusting.close()
        ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
        monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "ca.pem"))  # read when a pool makes its context
        trusting = Pool()
        response = await trusting.request("GET", origin_of(url), "/x", None, None, 5)
        await trusting.close()
    assert (response.status, response.body) == (200, b'{"ok":true}')


def test_origins_parse_and_refuse_what_is_not_http():
    origin = origin_of("https://api.example.com/v1/")
    assert (origin.scheme, origin.host, origin.port, origin.prefix, origin.host_header) == (
        "https",
        "api.example.com",
        443,
        "/v1",
        "api.example.com",
    )
    assert origin_of("http://[::1]:8000").host_header == "[::1]:8000"
    with pytest.raises(ValueError, match="not an http"):
        origin_of("ftp://example.com")
