"""ServerClient against real loopback servers: names, retries, errors, timeouts, cookies."""

from __future__ import annotations

import asyncio
import socket
import threading
import uuid
from collections import Counter
from typing import Any

import msgspec
import pytest
from litestar import Request

from gym_core.client import ClientConfig, ServerClient, error_fields
from gym_core.config import GlobalConfig
from gym_core.errors import (
    ServerCallError,
    ServerHTTPError,
    ServerTimeoutError,
    ServerUnavailableError,
)
from gym_core.servers import GymServer, error_response, json_response

FAST = dict(backoff_s=0.01, backoff_max_s=0.02)


class Upstream(GymServer):
    """Answers as each test needs: flaky, missing, slow, held, stateful."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.hits: Counter[str] = Counter()
        self.answered: Counter[str] = Counter()  # /held requests answered, by key
        self.released: set[str] = set()  # /held keys allowed to answer

    def routes(self) -> list[Any]:
        async def flaky(request: Request) -> Any:
            body = msgspec.json.decode(await request.body())
            self.hits[body["key"]] += 1
            if self.hits[body["key"]] <= body["failures"]:
                return error_response("busy, try again", body.get("status", 503), "busy")
            return {"attempt": self.hits[body["key"]]}

        async def missing(request: Request) -> Any:
            body = msgspec.json.decode(await request.body())
            self.hits[body["key"]] += 1
            return error_response("no task 7 here", 404, "not_found")

        async def slow(request: Request) -> Any:
            body = msgspec.json.decode(await request.body())
            self.hits[body["key"]] += 1
            await asyncio.sleep(body["sleep_s"])
            return {"slept": body["sleep_s"]}

        async def held(request: Request) -> Any:
            # Answers only once the test releases the key (or after max_s, so nothing hangs).
            body = msgspec.json.decode(await request.body())
            self.hits[body["key"]] += 1
            for _ in range(int(body["max_s"] / 0.01)):
                if body["key"] in self.released:
                    break
                await asyncio.sleep(0.01)
            self.answered[body["key"]] += 1
            return {"released": body["key"] in self.released}

        async def count(request: Request) -> Any:
            state = self.session_state(request, lambda: {"n": 0})
            state["n"] += 1
            return {"n": state["n"]}

        async def echo_headers(request: Request) -> Any:
            return {"authorization": request.headers.get("authorization"), "cookie": request.headers.get("cookie")}

        async def text(request: Request) -> Any:
            return json_response(b"plain words", 200)

        return [
            *super().routes(),
            self.post_json("/flaky", flaky),
            self.post_json("/missing", missing),
            self.post_json("/slow", slow),
            self.post_json("/held", held),
            self.post_json("/count", count),
            self.post_json("/echo_headers", echo_headers),
            self.post_json("/text", text),
        ]


@pytest.fixture(scope="module")
def upstream(serve):
    server = Upstream(name="upstream")
    with serve(server) as url:
        yield server, url


def key() -> str:
    return uuid.uuid4().hex


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# --- name resolution ---------------------------------------------------------------------------------


def test_names_resolve_through_the_global_config():
    config = GlobalConfig(
        {
            "counter": {"plugin": "counter", "host": "127.0.0.1", "port": 9101},
            "policy": {"plugin": "scripted", "host": "10.0.0.2", "port": 9102},
        }
    )
    client = ServerClient(config)
    assert client.url("counter") == "http://127.0.0.1:9101"
    assert client.url("policy") == "http://10.0.0.2:9102"
    assert client.url("http://example.com:1/") == "http://example.com:1"
    with pytest.raises(ServerCallError) as info:
        client.url("countr")
    assert "did you mean 'counter'" in str(info.value)


def test_explicit_urls_and_missing_config():
    client = ServerClient(urls={"a": "http://127.0.0.1:1"})
    assert client.url("a") == "http://127.0.0.1:1"
    with pytest.raises(ServerCallError, match="no global config"):
        client.url("b")


async def test_calls_by_name_reach_the_server(upstream):
    server, url = upstream
    port = int(url.rsplit(":", 1)[1])
    config = GlobalConfig({"upstream": {"plugin": "x", "host": "127.0.0.1", "port": port}})
    async with ServerClient(config) as client:
        assert await client.post("upstream", "/flaky", {"key": key(), "failures": 0}) == {"attempt": 1}
        assert (await client.get("upstream", "/health"))["name"] == "upstream"


# --- retries and errors --------------------------------------------------------------------------------


@pytest.mark.parametrize("status", [503, 429, 502])
async def test_retryable_statuses_are_retried_until_success(upstream, status):
    server, url = upstream
    k = key()
    async with ServerClient(config=ClientConfig(max_attempts=3, **FAST)) as client:
        result = await client.post(url, "/flaky", {"key": k, "failures": 2, "status": status})
    assert result == {"attempt": 3}
    assert server.hits[k] == 3


async def test_retries_stop_after_max_attempts(upstream):
    server, url = upstream
    k = key()
    async with ServerClient(config=ClientConfig(max_attempts=2, **FAST)) as client:
        with pytest.raises(ServerHTTPError) as info:
            await client.post(
                url,
                "/flaky",
                {"key": k, "failures": 5},
            )
    error = info.value
    assert error.status == 503 and error.attempts == 2 and server.hits[k] == 2
    assert "busy, try again" in str(error) and "after 2 attempts" in str(error)


async def test_client_error_status_fails_at_once_with_the_servers_message(upstream):
    server, url = upstream
    k = key()
    async with ServerClient(config=ClientConfig(max_attempts=5, **FAST)) as client:
        with pytest.raises(ServerHTTPError) as info:
            await client.post(url, "/missing", {"key": k})
    error = info.value
    assert error.status == 404 and error.attempts == 1 and server.hits[k] == 1
    assert error.detail == "no task 7 here"
    assert error.path == "/missing" and error.reason == "not_found" and error.error_type == "not_found"
    assert "status 404" in str(error) and "after 1 attempt)" in str(error)


async def test_connection_refused_is_unavailable_after_max_attempts():
    url = f"http://127.0.0.1:{closed_port()}"
    async with ServerClient(config=ClientConfig(max_attempts=3, **FAST)) as client:
        with pytest.raises(ServerUnavailableError) as info:
            await client.post(url, "/anything", {})
    assert info.value.attempts == 3 and info.value.status is None


async def test_a_server_dying_mid_answer_is_unavailable_and_retried():
    """The answer breaks off (the server was killed while sending it): an infrastructure failure,
    retried, never an untyped error that the collector would not retry."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    accepted = []

    def serve() -> None:
        for _ in range(2):
            conn, _ = listener.accept()
            conn.recv(65536)
            conn.sendall(b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"a"')
            conn.close()
            accepted.append(1)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{listener.getsockname()[1]}"
    try:
        async with ServerClient(config=ClientConfig(max_attempts=2, **FAST)) as client:
            with pytest.raises(ServerUnavailableError) as info:
                await client.post(url, "/v1/responses", {})
    finally:
        thread.join(timeout=10)  # it counts the second connection after closing it: a race with the client
        listener.close()
    assert info.value.attempts == 2 and len(accepted) == 2


async def test_slow_answer_is_a_timeout_not_retried_by_default(upstream):
    server, url = upstream
    k = key()
    async with ServerClient(config=ClientConfig(max_attempts=3, **FAST)) as client:
        with pytest.raises(ServerTimeoutError) as info:
            await client.post(url, "/held", {"key": k, "max_s": 20}, timeout_s=0.1)
    # The client gave up on its own: the server had not answered (it answers only when released).
    assert server.answered[k] == 0
    server.released.add(k)
    assert info.value.attempts == 1 and "no answer within 0.1 s" in str(info.value)
    assert server.hits[k] == 1


async def test_config_timeout_applies_and_timeouts_retry_when_allowed(upstream):
    server, url = upstream
    k = key()
    config = ClientConfig(timeout_s=0.1, max_attempts=2, retry_timeouts=True, **FAST)
    async with ServerClient(config=config) as client:
        with pytest.raises(ServerTimeoutError) as info:
            await client.post(url, "/slow", {"key": k, "sleep_s": 0.6})
    assert info.value.attempts == 2
    assert server.hits[k] == 2


async def test_deadline_bounds_retries(upstream):
    server, url = upstream
    k = key()
    config = ClientConfig(max_attempts=1000, backoff_s=0.05, backoff_max_s=0.1, deadline_s=0.4)
    async with ServerClient(config=config) as client:
        # The last attempt's 503, or a timeout when the deadline cut an attempt short.
        with pytest.raises((ServerHTTPError, ServerTimeoutError)) as info:
            await client.post(url, "/flaky", {"key": k, "failures": 10_000})
    attempts = info.value.attempts
    assert "deadline of 0.4 s" in str(info.value)
    assert server.hits[k] == attempts  # the error counts the requests the server saw
    # The client retried, and stopped because of the deadline, not max_attempts: its backoff sleeps
    # (at least 0.025 s, then at least 0.05 s each, jitter included) must all fit in 0.4 s, which
    # leaves room for at most 9 attempts.
    assert 1 < attempts <= 9


async def test_deadline_bounds_a_request_in_flight(upstream):
    server, url = upstream
    k = key()
    config = ClientConfig(timeout_s=30, deadline_s=0.3)
    async with ServerClient(config=config) as client:
        with pytest.raises(ServerTimeoutError) as info:
            await client.post(url, "/held", {"key": k, "max_s": 20})
    # The deadline, not the 30 s per-request timeout, ended the wait: the server had not answered.
    assert server.answered[k] == 0
    server.released.add(k)
    assert "no answer before the overall deadline of 0.3 s" in str(info.value)
    assert info.value.attempts == 1 and server.hits[k] == 1


async def test_unexpected_answer_is_a_call_error(upstream):
    server, url = upstream

    class Expected(msgspec.Struct):
        attempt: str

    async with ServerClient() as client:
        with pytest.raises(ServerCallError, match="unexpected answer"):
            await client.post(url, "/flaky", {"key": key(), "failures": 0}, type=Expected)
        with pytest.raises(ServerCallError, match="unexpected answer"):
            await client.post(url, "/text", {})


async def test_typed_answers_and_headers(upstream):
    server, url = upstream

    class Attempt(msgspec.Struct):
        attempt: int

    async with ServerClient() as client:
        assert await client.post(url, "/flaky", {"key": key(), "failures": 0}, type=Attempt) == Attempt(attempt=1)
        raw = await client.request("POST", url, "/echo_headers", body=b"{}", headers={"Authorization": "Bearer t"})
    assert msgspec.json.decode(raw) == {"authorization": "Bearer t", "cookie": None}


# --- cookies ---------------------------------------------------------------------------------------------


async def test_cookies_dict_collects_set_cookie_and_sends_it_back(upstream):
    server, url = upstream
    cookies: dict[str, str] = {}
    other: dict[str, str] = {}
    async with ServerClient() as client:
        assert await client.post(url, "/count", {}, cookies=cookies) == {"n": 1}
        assert list(cookies) == [server.cookie_name]
        assert await client.post(url, "/count", {}, cookies=cookies) == {"n": 2}
        # Another rollout's dict: another session, through the same pooled client.
        assert await client.post(url, "/count", {}, cookies=other) == {"n": 1}
        assert other[server.cookie_name] != cookies[server.cookie_name]
        assert await client.post(url, "/count", {}, cookies=cookies) == {"n": 3}
        # Without a dict nothing is remembered: the pooled session has no cookie jar.
        assert await client.post(url, "/count", {}) == {"n": 1}
        assert await client.post(url, "/count", {}) == {"n": 1}
        echoed = await client.post(url, "/echo_headers", {}, cookies=cookies)
    assert echoed["cookie"] == f"{server.cookie_name}={cookies[server.cookie_name]}"


# --- from_head and error bodies -------------------------------------------------------------------------


async def test_from_head_on_a_dead_head_is_unavailable():
    with pytest.raises(ServerUnavailableError) as info:
        await ServerClient.from_head(f"http://127.0.0.1:{closed_port()}", config=ClientConfig(max_attempts=2, **FAST))
    assert info.value.server == "head" and info.value.path == "/global_config_dict_yaml"


@pytest.mark.parametrize(
    ("payload", "message", "kind"),
    [
        (b'{"error": {"message": "m", "type": "t", "status": 400}}', "m", "t"),
        (b'{"error": {"message": "m", "type": 7}}', "m", None),
        (b'{"error": "flat"}', "flat", None),
        (b'{"detail": "litestar style"}', "litestar style", None),
        (b"<html>bad gateway</html>", "<html>bad gateway</html>", None),
        (b"x" * 2000, "x" * 500, None),
    ],
)
def test_error_message_and_type_extraction(payload, message, kind):
    assert error_fields(payload) == (message, kind)
