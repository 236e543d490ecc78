"""Bounded waits: timeouts that cannot be switched off by a 0, and a client that
stalls while sending its request body is answered 408 and dropped, by a real server process."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from gym_core.config import CONFIG_ENV, INSTANCE_ENV, load_config
from gym_core.errors import ConfigError
from gym_core.testing import first_party, plugin_manager


@pytest.fixture(scope="module")
def plugins():
    return plugin_manager(*first_party("counter", "scripted"))


@pytest.mark.parametrize(
    "key", ["client.timeout_s", "client.deadline_s", "client.connect_timeout_s", "body_timeout_s", "session_ttl_s"]
)
@pytest.mark.parametrize("value", ["0", "-1"])
def test_a_zero_or_negative_timeout_is_rejected_at_config_validation(plugins, key, value):
    """aiohttp reads a total timeout of 0 as no timeout at all: 0 must never reach it."""
    base = {
        "counter": {
            "plugin": "counter",
            "client": {"timeout_s": 1.0, "deadline_s": 1.0, "connect_timeout_s": 1.0},
            "body_timeout_s": 1.0,
            "session_ttl_s": 1.0,
        }
    }
    with pytest.raises(ConfigError) as caught:
        load_config([], [f"counter.{key}={value}"], base=base, env_file=None, server_types=plugins.servers())
    assert f"counter.{key}:" in str(caught.value) and "> 0" in str(caught.value)


def test_a_stalled_request_body_is_answered_408_and_the_connection_closed(plugins, tmp_path):
    """A real server process (python -m gym_core.serve) with body_timeout_s 0.5: a client that sends
    the headers and part of the body, then nothing, gets 408 and the connection is closed; the server
    goes on answering others."""
    config = load_config(
        base={"head_server": {"port": 0}, "counter": {"plugin": "counter", "body_timeout_s": 0.5}},
        env_file=None,
        server_types=plugins.servers(),
    )
    instance = config.instances["counter"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "gym_core.serve"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, CONFIG_ENV: config.to_json(), INSTANCE_ENV: "counter"},
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, "the server exited"
            try:
                urllib.request.urlopen(instance.url + "/health", timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "the server did not start"
                time.sleep(0.05)
        for path in ("/seed_session", "/tools/increment_counter"):  # gym's JSON fast path, and a Litestar route
            with socket.create_connection((instance.host, instance.port), timeout=20) as sock:
                sock.sendall(
                    f"POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                    f'content-length: 100\r\n\r\n{{"initial_count": '.encode()
                )
                answer = b""
                while chunk := sock.recv(65536):  # until the server closes the connection
                    answer += chunk
            assert answer.startswith(b"HTTP/1.1 408"), (path, answer)
            assert b"request body not received within 0.5 s" in answer
        urllib.request.urlopen(instance.url + "/health", timeout=5).close()
    finally:
        proc.kill()
        proc.wait()
