"""running_servers: a head and every instance on loopback, stopped on exit."""

from __future__ import annotations

import socket
from typing import Any

import pytest
from litestar import Request

from gym_core import hookimpl
from gym_core.client import ServerClient
from gym_core.plugins import PluginManager
from gym_core.servers import GymServer
from gym_core.testing import running_servers


class Hello(GymServer):
    kind = "resources"

    def routes(self) -> list[Any]:
        async def hello(request: Request) -> Any:
            return {"from": self.name, "head": self.global_config.head_url}

        return [*super().routes(), self.post_json("/hello", hello)]


class HelloPlugin:
    @hookimpl
    def gym_register_servers(self, register):
        register(name="hello", kind="resources", server=Hello)


def refused(url: str) -> bool:
    host, port = url.removeprefix("http://").split(":")
    try:
        socket.create_connection((host, int(port)), timeout=0.5).close()
    except OSError:
        return True
    return False


async def test_running_servers_starts_and_stops_everything():
    plugins = PluginManager(load_entry_points=False)
    plugins.register(HelloPlugin(), name="hello_plugin")
    with running_servers({"one": {"plugin": "hello"}, "two": {"plugin": "hello"}}, plugins) as config:
        urls = [config.head_url, *(i.url for i in config.instances.values())]
        assert len(set(urls)) == 3
        async with await ServerClient.from_head(config.head_url) as client:
            assert await client.post("one", "/hello", {}) == {"from": "one", "head": config.head_url}
            assert await client.post("two", "/hello", {}) == {"from": "two", "head": config.head_url}
    assert all(refused(url) for url in urls)


def test_running_servers_rejects_a_bad_config_before_starting_anything():
    plugins = PluginManager(load_entry_points=False)
    plugins.register(HelloPlugin(), name="hello_plugin")
    with pytest.raises(Exception, match="did you mean 'hello'"):
        with running_servers({"one": {"plugin": "helo"}}, plugins):
            pass
