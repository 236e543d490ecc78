"""Launching a config: head server in this process, every instance as its own process.

Used by ``gym run`` and ``gym collect --serve``. Each instance runs ``python -m gym_core.serve`` in
the isolated uv environment of its plugin (``isolation="uv"``) or in this environment
(``isolation="none"``); the global config and the instance name reach it through the environment.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console
from rich.table import Table

from gym_core.config import CONFIG_ENV, INSTANCE_ENV, GlobalConfig, load_config
from gym_core.errors import GymError
from gym_core.head import build_head_app
from gym_core.plugins import PluginManager, get_plugin_manager
from gym_core.serving import ServerThread

from gym_cli._catalog import Catalog, find_catalog

__all__ = ["Launch", "launch", "ISOLATION_MODES"]

ISOLATION_MODES = ("uv", "none")


@dataclass
class Launch:
    config: GlobalConfig
    rows: list[dict[str, Any]] = field(default_factory=list)
    supervisor: Any = None
    head: ServerThread | None = None
    started_at: float = field(default_factory=time.monotonic)
    ready_after_s: float | None = None

    def describe(self) -> list[dict[str, Any]]:
        """The live instance list the head server publishes."""
        exited = {}
        if self.supervisor is not None:
            exited = {name: code for name, code, _ in self.supervisor.poll_crashed()}
        return [{**row, "alive": row["name"] not in exited} for row in self.rows]

    def table(self) -> Table:
        table = Table(title="gym servers")
        for column in ("instance", "kind", "plugin", "url", "environment"):
            table.add_column(column)
        table.add_row("head", "head", "-", self.config.head_url, "this process")
        for row in self.rows:
            table.add_row(row["name"], row["kind"], row["plugin"], row["url"], row["environment"])
        return table


def _check_port_free(host: str, port: int, what: str, fix: str) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            raise GymError(f"port {port} on {host} is in use ({what}); {fix}") from None


def _maybe_start_ray(config: GlobalConfig, needs_ray: list[str], console: Console) -> None:
    """Ray costs seconds to start: only when the config joins a cluster or a plugin needs it."""
    address = config.ray_head_node_address
    if not address and not needs_ray:
        return
    try:
        import ray  # type: ignore[import-not-found]
    except ImportError:
        raise GymError(
            f"Ray is needed ({'ray_head_node_address is set' if address else 'plugins ' + ', '.join(needs_ray)})"
            " but not installed: pip install ray"
        ) from None
    console.print(f"starting Ray ({'joining ' + address if address else 'local'})…")
    ray.init(address=address or None, ignore_reinit_error=True)


@contextlib.contextmanager
def launch(
    config_paths: Sequence[str],
    overrides: Sequence[str] = (),
    *,
    isolation: str = "uv",
    console: Console | None = None,
    ready_timeout_s: float = 600.0,
    env_file: str | None = "env.yaml",
    plugins: PluginManager | None = None,
    catalog: Catalog | None = None,
) -> Iterator[Launch]:
    """Start the head server and every instance; stop them all on exit. Yields once all are ready."""
    from gym_cli._processes import ChildSpec, Supervisor

    if isolation not in ISOLATION_MODES:
        raise GymError(f"--isolation must be one of {', '.join(ISOLATION_MODES)}, not {isolation!r}")
    console = console or Console(stderr=True, soft_wrap=True)
    plugins = plugins or get_plugin_manager()
    catalog = catalog or find_catalog()
    known = plugins.servers()
    config = load_config(
        config_paths, overrides, env_file=env_file, plugins=plugins, external_plugins=catalog.entries.keys()
    )
    if not config.instances:
        raise GymError("the config defines no server instances (entries like `name: {plugin: ...}`)")
    _check_port_free(
        config.head_host, config.head_port, "head server; another `gym run`?", "stop it or set head_server.port=<free port>"
    )
    for inst in config.instances.values():
        _check_port_free(inst.host, inst.port, f"instance {inst.name}", f"stop what uses it or set {inst.name}.port=<free port>")

    _maybe_start_ray(config, [n for n, p in known.items() if p.needs_ray and n in {i.plugin for i in config.instances.values()}], console)

    pythons = _environments(config, isolation, catalog, console)
    state = Launch(config)
    state.head = ServerThread(build_head_app(config, state.describe), config.head_host, config.head_port).start()
    supervisor = Supervisor()
    state.supervisor = supervisor
    try:
        child_env = {CONFIG_ENV: config.to_json(), "PYTHONUNBUFFERED": "1"}
        for inst in config.instances.values():
            python, where = pythons[inst.plugin]
            kind = known[inst.plugin].kind if inst.plugin in known else (catalog.entries[inst.plugin].kind or "?")
            state.rows.append(
                {"name": inst.name, "kind": kind, "plugin": inst.plugin, "url": inst.url, "environment": where}
            )
            supervisor.start(
                ChildSpec(
                    name=inst.name,
                    argv=[python, "-m", "gym_core.serve"],
                    env={**child_env, INSTANCE_ENV: inst.name},
                    ready_url=f"{inst.url}/ready",
                    cwd=None,
                )
            )
        supervisor.wait_ready(ready_timeout_s)
        state.ready_after_s = time.monotonic() - state.started_at
        yield state
    finally:
        supervisor.shutdown()
        state.head.stop()


def _environments(config: GlobalConfig, isolation: str, catalog: Catalog, console: Console) -> dict[str, tuple[str, str]]:
    """The python each plugin runs with, and a word on where it comes from."""
    used = sorted({i.plugin for i in config.instances.values()})
    if isolation == "none":
        return {name: (sys.executable, "current") for name in used}
    from gym_cli._environments import EnvironmentManager, PluginSource

    missing = [name for name in used if name not in catalog.entries]
    result = {name: (sys.executable, "current (not in catalog)") for name in missing}
    sources = []
    for name in used:
        entry = catalog.entries.get(name)
        if entry is not None:
            sources.append(PluginSource(name=name, path=entry.path, requirement=entry.requirement))
    if sources:
        manager = EnvironmentManager(core_path=catalog.core_path, console=lambda msg: console.print(msg, highlight=False))
        for source, env in zip(sources, manager.ensure_many(sources)):
            result[source.name] = (str(env.python), "reused" if env.reused else "built")
    return result


def default_env_file() -> str | None:
    return os.environ.get("GYM_ENV_FILE", "env.yaml")
