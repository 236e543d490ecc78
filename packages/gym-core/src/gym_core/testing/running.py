"""Real servers on loopback in threads of the test process, and plain HTTP to them."""

from __future__ import annotations

import contextlib
import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from http.cookies import SimpleCookie
from typing import TYPE_CHECKING, Any, TypeVar

import pytest

from gym_core.config import GlobalConfig, load_config
from gym_core.head import build_head_app
from gym_core.plugins import PluginManager, get_plugin_manager
from gym_core.serving import ServerThread, build_server

if TYPE_CHECKING:
    from gym_core.servers import GymServer


@contextlib.contextmanager
def start_servers(
    config: Mapping[str, Any], plugins: PluginManager | None
) -> Iterator[tuple[GlobalConfig, dict[str, GymServer]]]:
    """Start a head server and every instance (each replica too) of ``config``; yields the resolved
    config and the server objects by instance (and replica) name; stops them on exit."""
    plugins = plugins or get_plugin_manager()
    config = {"head_server": {"port": 0}, **config}
    global_config = load_config(
        base=config, env_file=None, server_types=plugins.servers(), load_errors=plugins.load_errors
    )
    threads = [ServerThread(build_head_app(global_config), port=global_config.head_port).start()]
    servers: dict[str, GymServer] = {}
    try:
        for name, instance in global_config.instances.items():
            # Each replica of an instance with ``replicas: N`` too, under its replica name (``counter#1``).
            for index, replica in enumerate(instance.replica_names):
                own = global_config.for_replica(name, index) if instance.replicas > 1 else global_config
                server = build_server(own, name, plugins)
                servers.setdefault(name, server)
                servers[replica] = server
                threads.append(ServerThread(server.build_app(), instance.host, own.instances[name].port).start())
        yield global_config, servers
    finally:
        for thread in reversed(threads):
            thread.stop()


@contextlib.contextmanager
def running_servers(config: dict[str, Any], plugins: PluginManager | None = None) -> Iterator[GlobalConfig]:
    """Start a head server and every instance of ``config`` (real uvicorn, real HTTP) in threads.

    Yields the resolved global config (ports assigned); stops everything on exit.
    """
    with start_servers(config, plugins) as (global_config, _):
        yield global_config


# --- plain HTTP -----------------------------------------------------------------------------------


@dataclass
class Reply:
    """One HTTP answer: its status, content type and body."""

    status: int
    content_type: str
    body: bytes

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")

    def json(self) -> Any:
        """The body as JSON; an assertion error saying what came instead when it is not."""
        try:
            return json.loads(self.body)
        except ValueError:
            raise AssertionError(f"expected a JSON body, got status {self.status} with: {self.text[:500]!r}") from None


class HTTPCaller:
    """A minimal HTTP client for one server, keeping its cookies: one caller is one gym session."""

    def __init__(self, url: str, timeout_s: float = 120.0, *, auth_token: str | None = None):
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self.cookies: dict[str, str] = {}
        self.auth_token = auth_token  # the run's token, sent as ``Authorization: Bearer``

    def get(self, path: str) -> Reply:
        return self._send(urllib.request.Request(self.url + path, method="GET"))

    def post(self, path: str, body: Any) -> Reply:
        """``POST path`` with ``body``: bytes are sent as they are, anything else as JSON."""
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method="POST")
        request.add_header("Content-Type", "application/json")
        return self._send(request)

    def _send(self, request: urllib.request.Request) -> Reply:
        if self.auth_token:
            request.add_header("Authorization", f"Bearer {self.auth_token}")
        if self.cookies:
            request.add_header("Cookie", "; ".join(f"{k}={v}" for k, v in self.cookies.items()))
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as answer:
                reply = Reply(answer.status, answer.headers.get("content-type", ""), answer.read())
                headers = answer.headers
        except urllib.error.HTTPError as error:
            reply = Reply(error.code, error.headers.get("content-type", ""), error.read())
            headers = error.headers
        for header in headers.get_all("set-cookie") or []:
            for name, morsel in SimpleCookie(header).items():
                self.cookies[name] = morsel.value
        return reply


def assert_json_error(reply: Reply, what: str) -> None:
    """``reply`` is a 4xx answer carrying ``{"error": {"message", "type", "status"}}``."""
    assert 400 <= reply.status < 500, f"{what}: expected a 4xx JSON error, got {reply.status}: {reply.text[:500]}"
    assert reply.content_type.startswith("application/json"), f"{what}: the error is not JSON ({reply.content_type!r})"
    body = reply.json()
    error = body.get("error") if isinstance(body, dict) else None
    assert isinstance(error, dict), f"{what}: the body has no 'error' object: {reply.text[:500]}"
    assert isinstance(error.get("message"), str) and error["message"], f"{what}: error.message is missing: {error}"
    assert isinstance(error.get("type"), str) and error["type"], f"{what}: error.type is missing: {error}"
    assert error.get("status") == reply.status, f"{what}: error.status {error.get('status')!r} != HTTP {reply.status}"


def assert_ok(reply: Reply, what: str) -> Any:
    """``reply`` is a 2xx JSON answer; returns its body."""
    assert 200 <= reply.status < 300, f"{what}: status {reply.status}: {reply.text[:1000]}"
    return reply.json()


# --- helpers subclasses use -----------------------------------------------------------------------


def first_party(*names: str) -> list[object]:
    """The plugin modules of gym's first-party plugins ``names``, loaded through their entry points;
    skips the test where one is not installed (a plugin's tests run alone in its venv by `gym test`)."""
    from importlib.metadata import entry_points

    installed = {ep.name: ep for ep in entry_points(group="gym")}
    missing = [name for name in names if name not in installed]
    if missing:
        pytest.skip(f"needs the first-party plugins {', '.join(missing)} (installed in gym's workspace)")
    return [installed[name].load() for name in names]


def plugin_manager(*plugins: object) -> PluginManager:
    """A plugin manager holding exactly ``plugins`` (no entry points), each under its module's name."""
    manager = PluginManager(load_entry_points=False)
    for plugin in plugins:
        manager.register(plugin, name=getattr(plugin, "__name__", None) or type(plugin).__qualname__)
    return manager


T = TypeVar("T")


def wait_until(condition: Callable[[], T], what: str, timeout_s: float = 60.0, interval_s: float = 0.05) -> T:
    """Call ``condition`` every ``interval_s`` until it returns something true, and return that; the
    test fails, naming ``what``, when ``timeout_s`` passes first."""
    deadline = time.monotonic() + timeout_s
    while not (value := condition()):
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {timeout_s:g} s")
        time.sleep(interval_s)
    return value
