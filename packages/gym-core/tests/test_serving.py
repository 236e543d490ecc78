"""Running servers: uvicorn in a thread, building a server from the config, the process entry point."""

from __future__ import annotations

import socket

import msgspec
import pytest

from gym_core import hookimpl
from gym_core.config import CONFIG_ENV, INSTANCE_ENV, load_config
from gym_core.errors import ConfigError, GymError, UnknownPluginError
from gym_core.plugins import PluginManager
from gym_core.servers import ResourcesServer, ServerConfig
from gym_core.serving import ServerThread, build_server, main, uvicorn_config


class EchoConfig(ServerConfig, kw_only=True):
    greeting: str = "hello"


class EchoServer(ResourcesServer):
    config: EchoConfig


class EchoPlugin:
    @hookimpl
    def gym_register_servers(self, register):
        register(name="echo", kind="resources", server=EchoServer, config=EchoConfig)
        register(name="lazy_echo", kind="resources", server=f"{__name__}:EchoServer", config=EchoConfig)


@pytest.fixture
def plugins() -> PluginManager:
    pm = PluginManager(load_entry_points=False)
    pm.register(EchoPlugin(), name="echo_plugin")
    return pm


def test_uvicorn_config_defaults_and_overrides():
    config = uvicorn_config(object(), "127.0.0.1", 1234, log_level="error")
    assert (config.host, config.port, config.log_level, config.access_log) == ("127.0.0.1", 1234, "error", False)
    assert config.timeout_keep_alive == 75 and config.lifespan == "on"


def test_server_thread_serves_and_stops():
    server = EchoServer(name="echo")
    thread = ServerThread(server.build_app()).start()
    port = thread.port
    try:
        assert thread.port > 0 and thread.url == f"http://127.0.0.1:{thread.port}"
        with socket.create_connection(("127.0.0.1", thread.port), timeout=2) as sock:
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            answer = b""
            while chunk := sock.recv(4096):
                answer += chunk
        assert answer.startswith(b"HTTP/1.1 200")
        assert msgspec.json.decode(answer.split(b"\r\n\r\n", 1)[1]) == {
            "status": "ok",
            "name": "echo",
            "kind": "resources",
        }
        assert server.is_ready
    finally:
        thread.stop()
    assert not server.is_ready  # the lifespan ran its shutdown
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")  # uvicorn exits its thread
def test_server_thread_on_a_taken_port_fails_to_start():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(GymError, match="failed to start"):
            ServerThread(EchoServer().build_app(), port=port).start(timeout_s=5)


def test_build_server_validates_options(plugins):
    config = load_config(base={"e": {"plugin": "echo", "greeting": "hi"}, "l": {"plugin": "lazy_echo"}}, env_file=None)
    server = build_server(config, "e", plugins)
    assert isinstance(server, EchoServer)
    assert isinstance(server.config, EchoConfig) and server.config.greeting == "hi"
    assert server.config.port == config.instances["e"].port != 0
    assert server.name == "e" and server.global_config is config
    assert server.cookie_name == "gym_session_e"
    lazy = build_server(config, "l", plugins)
    assert type(lazy) is EchoServer and lazy.config.greeting == "hello"


def test_build_server_errors(plugins):
    config = load_config(base={"e": {"plugin": "echo", "greting": "hi"}, "u": {"plugin": "nope"}}, env_file=None)
    with pytest.raises(GymError, match="no server instance named 'x'"):
        build_server(config, "x", plugins)
    with pytest.raises(ConfigError, match="did you mean 'greeting'"):
        build_server(config, "e", plugins)
    with pytest.raises(UnknownPluginError):
        build_server(config, "u", plugins)


def test_main_without_instance_or_config_exits_2(monkeypatch, capsys):
    monkeypatch.delenv(INSTANCE_ENV, raising=False)
    assert main() == 2
    assert INSTANCE_ENV in capsys.readouterr().err
    monkeypatch.setenv(INSTANCE_ENV, "e")
    monkeypatch.delenv(CONFIG_ENV, raising=False)
    assert main() == 2
    assert CONFIG_ENV in capsys.readouterr().err


def test_a_server_busy_with_a_long_request_stops_on_sigterm(tmp_path):
    """A server whose launcher died gets SIGTERM (PDEATHSIG); a request that would run for minutes
    (a model generating) must not keep it alive: in-flight requests are cancelled after the grace."""
    import os
    import signal
    import subprocess
    import sys
    import threading
    import urllib.request

    from gym_core.serving import GRACEFUL_SHUTDOWN_S

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = load_config(base={"slow": {"plugin": "scripted", "port": port, "delay_s": 600}}, env_file=None)
    env = {**os.environ, CONFIG_ENV: config.to_json(), INSTANCE_ENV: "slow"}
    proc = subprocess.Popen([sys.executable, "-m", "gym_core.serve"], env=env, stderr=subprocess.PIPE)
    try:
        for _ in range(300):  # start-up, bounded
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1).read()
                break
            except OSError:
                if proc.poll() is not None:
                    raise AssertionError(proc.stderr.read().decode()) from None
                threading.Event().wait(0.1)

        def slow_call() -> None:
            request = urllib.request.Request(
                f"http://127.0.0.1:{port}/v1/responses",
                data=b'{"input": "hi"}',
                headers={"content-type": "application/json"},
            )
            try:
                urllib.request.urlopen(request, timeout=60).read()
            except OSError:
                pass

        caller = threading.Thread(target=slow_call, daemon=True)
        caller.start()
        threading.Event().wait(0.5)  # the request is in flight, sleeping its 600 s
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=GRACEFUL_SHUTDOWN_S + 20) is not None  # raises TimeoutExpired if it hangs
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
