"""Connections that stall are dropped, and a server holds a bounded number of them.

Raw sockets against real servers: a connection that sends nothing, one that stops half-way through
its headers and one that stops half-way through its body are closed within their (short, here)
timeouts, while a client with the token is served; beyond ``max_connections`` a connection is
answered 503 and closed, and once the stalled ones are dropped the server serves again.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator

import pytest

from gym_core.asgi import ConnectionLimits
from gym_core.auth import new_token
from gym_core.config import CONFIG_ENV, INSTANCE_ENV, GlobalConfig, load_config
from gym_core.options import ServerConfig
from gym_core.testing import running_servers, wait_until

TOKEN = new_token()
WAIT_S = 20.0  # the most a test waits for a server to act (the timeouts below are far shorter)


@pytest.fixture(scope="module")
def servers() -> Iterator[GlobalConfig]:
    config = {
        "auth_token": TOKEN,
        "quick": {"plugin": "counter", "header_timeout_s": 0.3, "body_timeout_s": 0.3},
        # Stalled connections here are dropped after 3 s: time for the test to meet the cap first.
        "capped": {"plugin": "counter", "max_connections": 3, "header_timeout_s": 3.0},
    }
    with running_servers(config) as global_config:
        yield global_config


def connect(config: GlobalConfig, name: str) -> socket.socket:
    instance = config.instances[name]
    sock = socket.create_connection((instance.host, instance.port), timeout=WAIT_S)
    return sock


def read_to_close(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (a socket timeout fails the test)."""
    chunks = []
    with sock:
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def get(
    config: GlobalConfig, name: str, path: str, token: str | None = TOKEN, body: dict | None = None
) -> tuple[int, dict]:
    """GET ``path`` (POST ``body``) on instance ``name``: the status and the JSON answer."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(config.instances[name].url + path, data=data)
    request.add_header("content-type", "application/json")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(request, timeout=WAIT_S) as response:
            return response.status, json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"{}")


def up(config: GlobalConfig, name: str) -> bool:
    try:
        return get(config, name, "/health", None)[0] == 200
    except OSError:  # not listening yet
        return False


HEAD = b"POST /seed_session HTTP/1.1\r\nhost: x\r\nauthorization: Bearer " + TOKEN.encode() + b"\r\n"


def test_a_connection_that_sends_nothing_is_closed(servers):
    silent = connect(servers, "quick")
    assert read_to_close(silent) == b""  # closed without an answer: nothing was asked


def test_a_connection_that_stops_mid_headers_is_answered_408_and_closed(servers):
    for partial in (b"POS", b"POST /seed_session HTTP/1.1\r\nhost: x\r\n", HEAD + b"content-le"):
        stalled = connect(servers, "quick")
        stalled.sendall(partial)
        answer = read_to_close(stalled)
        assert answer.startswith(b"HTTP/1.1 408 "), (partial, answer)
        assert b'"type":"header_timeout"' in answer and b"connection: close" in answer


def test_a_connection_that_stops_mid_body_is_answered_408_and_closed(servers):
    stalled = connect(servers, "quick")
    stalled.sendall(HEAD + b"content-type: application/json\r\ncontent-length: 50\r\n\r\n{")
    answer = read_to_close(stalled)
    assert answer.startswith(b"HTTP/1.1 408 ") and b"body_timeout" in answer


def test_a_client_with_the_token_is_served_while_others_stall_and_a_refusal_closes(servers):
    stalled = [connect(servers, "quick") for _ in range(5)]
    for index, sock in enumerate(stalled):
        sock.sendall(HEAD[: 10 * index])
    assert get(servers, "quick", "/seed_session", body={})[0] == 200
    assert get(servers, "quick", "/seed_session", token=None, body={})[0] == 401
    # Without the token: 401, and the connection is not kept for a next request.
    unauthenticated = connect(servers, "quick")
    unauthenticated.sendall(b"POST /seed_session HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\n{}")
    answer = read_to_close(unauthenticated)
    assert answer.startswith(b"HTTP/1.1 401 ") and b"connection: close" in answer
    for sock in stalled:
        read_to_close(sock)


def test_beyond_max_connections_a_connection_is_refused_503_until_the_stalled_are_dropped(servers):
    held = [connect(servers, "capped") for _ in range(3)]
    # Wait until the server has taken all three (a connect completes before the server's accept).
    refused = b""
    for _ in range(50):
        extra = connect(servers, "capped")
        extra.sendall(b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n")
        answer = read_to_close(extra)
        if answer.startswith(b"HTTP/1.1 503 "):
            refused = answer
            break
        assert answer.startswith(b"HTTP/1.1 200 "), answer  # served: one of the three not taken yet
    assert refused, "the fourth connection was never refused"
    assert b"retry-after: 1" in refused and b'"type":"too_many_connections"' in refused
    assert b"connection: close" in refused
    for sock in held:  # dropped after the header timeout
        assert read_to_close(sock) == b""
    assert get(servers, "capped", "/seed_session", body={})[0] == 200  # served again


def test_the_defaults_are_the_server_options_defaults():
    assert ConnectionLimits.of(ServerConfig()) == ConnectionLimits()
    assert ConnectionLimits() == ConnectionLimits(header_timeout_s=10.0, idle_timeout_s=75.0, max_connections=10_000)


def test_a_server_process_started_as_gym_run_starts_it_has_its_limits():
    config = load_config(
        base={"counter": {"plugin": "counter", "header_timeout_s": 0.3}, "head_server": {"port": 0}},
        env_file=None,
    )
    env = {**os.environ, CONFIG_ENV: "-", INSTANCE_ENV: "counter"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "gym_core.serve"],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert proc.stdin is not None
        proc.stdin.write(config.to_json().encode())
        proc.stdin.close()
        wait_until(lambda: up(config, "counter"), "the server process answers /health", timeout_s=60)
        silent = connect(config, "counter")
        assert read_to_close(silent) == b""
    finally:
        proc.terminate()
        proc.wait(30)
