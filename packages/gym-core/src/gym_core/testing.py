"""Helpers for testing gym plugins: real servers on loopback, in threads of the test process."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from gym_core.config import GlobalConfig, load_config
from gym_core.head import build_head_app
from gym_core.plugins import PluginManager, get_plugin_manager
from gym_core.serving import ServerThread, build_server

__all__ = ["running_servers"]


@contextlib.contextmanager
def running_servers(config: dict[str, Any], plugins: PluginManager | None = None) -> Iterator[GlobalConfig]:
    """Start a head server and every instance of ``config`` (real uvicorn, real HTTP) in threads.

    Yields the resolved global config (ports assigned); stops everything on exit.
    """
    plugins = plugins or get_plugin_manager()
    config = {"head_server": {"port": 0}, **config}
    global_config = load_config(base=config, env_file=None, plugins=plugins)
    threads = [ServerThread(build_head_app(global_config), port=global_config.head_port).start()]
    try:
        for name, instance in global_config.instances.items():
            server = build_server(global_config, name, plugins)
            threads.append(ServerThread(server.build_app(), instance.host, instance.port).start())
        yield global_config
    finally:
        for thread in reversed(threads):
            thread.stop()
