"""Launching a config: head server in this process, every instance as its own process.

Used by ``gym run`` and ``gym collect --serve``. Each instance runs ``python -m gym_core.serve`` in
its plugin's venv (``isolation="venv"``) or with the interpreter running gym (``isolation="none"``);
the global config and the instance name reach it through environment variables. The head server
publishes :meth:`Launch.describe`, which reads the supervisor's state and changes nothing.

A server that dies after start-up is restarted as the config's ``server_restarts`` says (see
:class:`~gym_cli.launch.supervisor.RestartPolicy`; default 3 restarts within 60 s). Before starting
anything, the launcher stops the servers left running by a launcher that was killed (``kill -9``), as
recorded in its state file (:mod:`~gym_cli.launch.runstate`), and keeps its own state file current.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table

from gym_core.errors import GymError

from gym_cli.catalog import Catalog, find_catalog
from gym_cli.launch.runstate import RunStateFile, clean_stale_runs, runs_dir
from gym_cli.launch.supervisor import ChildSpec, RestartPolicy, Supervisor
from gym_cli.sources import source_of_entry

if TYPE_CHECKING:  # the server stack loads when something is launched, not when `gym --help` runs
    from gym_core.config import GlobalConfig
    from gym_core.plugins import PluginManager
    from gym_core.serving import ServerThread

__all__ = ["Launch", "launch", "ISOLATION_MODES", "default_env_file", "resolve_config", "split_config_args",
           "restart_policy", "RESTARTS_KEY", "head_or_served", "serve_options"]

RESTARTS_KEY = "server_restarts"
"""The config key of the restart policy: ``server_restarts: {attempts: 3, window_s: 60, backoff_s: 1}``."""

ISOLATION_MODES = ("venv", "none")
"""``venv``: each plugin in its own venv; ``none``: every server with the interpreter running gym."""


@dataclass
class Launch:
    """A launched config: its servers (``rows``), their supervisor and the head server."""

    config: GlobalConfig
    rows: list[dict[str, Any]] = field(default_factory=list)
    supervisor: Supervisor | None = None
    head: ServerThread | None = None
    started_at: float = field(default_factory=time.monotonic)
    ready_after_s: float | None = None

    def describe(self) -> list[dict[str, Any]]:
        """The live instance list the head server publishes: each row with ``pid``, ``alive``,
        ``exit_code`` (None while it runs), ``state`` (``starting``, ``running``, ``restarting``: a client
        may wait for it, ``exited``) and ``restarts``. A read: it never consumes what ``gym run`` watches for."""
        codes = self.supervisor.returncodes() if self.supervisor is not None else {}
        pids = self.supervisor.pids() if self.supervisor is not None else {}
        states = self.supervisor.states() if self.supervisor is not None else {}
        described = []
        for row in self.rows:
            code = codes.get(row["name"])
            state = states.get(row["name"], {"state": "starting", "restarts": 0})
            described.append({**row, "pid": pids.get(row["name"]), "alive": code is None, "exit_code": code, **state})
        return described

    def table(self) -> Table:
        table = Table(title="gym servers")
        for column in ("instance", "kind", "server type", "url", "venv"):
            table.add_column(column)
        table.add_row("head", "head", "-", self.config.head_url, "this process")
        for row in self.rows:
            table.add_row(row["name"], row["kind"], row["plugin"], row["url"], row["venv"])
        return table


def _check_port_free(host: str, port: int, what: str, fix: str) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            raise GymError(f"port {port} on {host} is in use ({what}); {fix}") from None


def _maybe_start_ray(config: GlobalConfig, needs_ray: list[str], console: Console) -> None:
    """Ray costs seconds to start: only when the config joins a cluster or a server type needs it."""
    address = config.ray_head_node_address
    if not address and not needs_ray:
        return
    try:
        import ray  # type: ignore[import-not-found]
    except ImportError:
        raise GymError(
            f"Ray is needed ({'ray_head_node_address is set' if address else 'server types ' + ', '.join(needs_ray)})"
            " but not installed: pip install ray"
        ) from None
    console.print(f"starting Ray ({'joining ' + address if address else 'local'})…")
    ray.init(address=address or None, ignore_reinit_error=True)


@contextlib.contextmanager
def launch(
    config_paths: Sequence[str],
    overrides: Sequence[str] = (),
    *,
    isolation: str = "venv",
    console: Console | None = None,
    ready_timeout_s: float = 600.0,
    env_file: str | None = "env.yaml",
    plugins: PluginManager | None = None,
    catalog: Catalog | None = None,
) -> Iterator[Launch]:
    """Start the head server and every instance; stop them all on exit. Yields once all are ready."""
    from gym_core.auth import new_token, token_file, write_token
    from gym_core.config import CONFIG_ENV, INSTANCE_ENV
    from gym_core.head import build_head_app

    from gym_cli.venvs.layout import default_home
    from gym_core.plugins import get_plugin_manager
    from gym_core.serving import ServerThread

    if isolation not in ISOLATION_MODES:
        raise GymError(f"--isolation must be one of {', '.join(ISOLATION_MODES)}, not {isolation!r}")
    console = console or Console(stderr=True, soft_wrap=True)
    plugins = plugins or get_plugin_manager()
    catalog = catalog or find_catalog()
    known = plugins.servers()
    config = resolve_config(config_paths, overrides, env_file=env_file, plugins=plugins, catalog=catalog)
    if not config.instances:
        raise GymError("the config defines no server instances (entries like `name: {plugin: ...}`)")
    policy = restart_policy(config, ready_timeout_s)
    # A launcher killed with -9 may have left servers on the ports this one needs.
    clean_stale_runs(runs_dir(), lambda message: console.print(message, markup=False, highlight=False))
    _check_port_free(
        config.head_host, config.head_port, "head server; another `gym run`?", "stop it or set head_server.port=<free port>"
    )
    for inst in config.instances.values():
        _check_port_free(inst.host, inst.port, f"instance {inst.name}", f"stop what uses it or set {inst.name}.port=<free port>")

    _maybe_start_ray(config, [n for n, p in known.items() if p.needs_ray and n in {i.plugin for i in config.instances.values()}], console)

    pythons = _pythons(config, isolation, catalog, console)
    # Every server of the run requires its token; clients find it in a file only this user reads.
    token = config.auth_token or new_token()
    config.data["auth_token"] = token
    token_path = token_file(default_home(), config.head_host, config.head_port)
    write_token(token_path, token)
    state = Launch(config)
    state.head = ServerThread(build_head_app(config, state.describe), config.head_host, config.head_port).start()
    run_state = RunStateFile(runs_dir(), config.head_url)
    supervisor = Supervisor(
        restart=policy,
        notice=lambda message: console.print(message, markup=False, highlight=False),
        on_spawn=lambda: run_state.record(supervisor.pids()),
    )
    state.supervisor = supervisor
    # SIGTERM's default ends this process at once, orphaning the servers: make it unwind like Ctrl+C,
    # through the `finally` below, whichever command launched them (gym run, gym collect --serve...).
    restore = _sigterm_as_interrupt()
    try:
        for inst in config.instances.values():
            python, where = pythons[inst.plugin]
            kind = known[inst.plugin].kind if inst.plugin in known else (catalog.entries[inst.plugin].kind or "?")
            state.rows.append(
                {"name": inst.name, "kind": kind, "plugin": inst.plugin, "url": inst.url, "venv": where}
            )
            supervisor.start(
                ChildSpec(
                    name=inst.name,
                    argv=[python, "-m", "gym_core.serve"],
                    # Its own options whole; other instances' secrets redacted.
                    env={CONFIG_ENV: config.for_instance(inst.name).to_json(), "PYTHONUNBUFFERED": "1",
                         INSTANCE_ENV: inst.name},
                    ready_url=f"{inst.url}/ready",
                    ready_headers={"Authorization": f"Bearer {token}"},
                    cwd=None,
                )
            )
        supervisor.wait_ready(ready_timeout_s)
        state.ready_after_s = time.monotonic() - state.started_at
        yield state
    finally:
        try:
            supervisor.shutdown()
            state.head.stop()
        finally:
            run_state.remove()
            token_path.unlink(missing_ok=True)
            restore()


def restart_policy(config: GlobalConfig, ready_timeout_s: float = 600.0) -> RestartPolicy:
    """The config's ``server_restarts`` (a restart must be ready within ``ready_timeout_s`` unless it
    says otherwise); a :class:`~gym_core.errors.ConfigError` naming the bad key."""
    import msgspec

    from gym_core.errors import ConfigError

    raw = config.data.get(RESTARTS_KEY) or {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{RESTARTS_KEY}: expected a mapping like {{attempts: 3, window_s: 60, backoff_s: 1}}, "
                          f"got {raw!r}")
    try:
        return msgspec.convert({"ready_timeout_s": ready_timeout_s, **raw}, RestartPolicy)
    except msgspec.ValidationError as exc:
        raise ConfigError(f"{RESTARTS_KEY}: {str(exc).replace('$.', '')}") from None


def _sigterm_as_interrupt() -> Callable[[], None]:
    """Raise KeyboardInterrupt on SIGTERM until the returned function restores the old handler
    (main thread only: elsewhere signal handlers cannot be set, and the caller's own handling stands)."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    return lambda: signal.signal(signal.SIGTERM, previous)


def _pythons(config: GlobalConfig, isolation: str, catalog: Catalog, console: Console) -> dict[str, tuple[str, str]]:
    """The python each server type runs with, and a word on its venv."""
    used = sorted({i.plugin for i in config.instances.values()})
    if isolation == "none":
        return {name: (sys.executable, "none (gym's)") for name in used}
    from gym_cli.venvs import VenvManager

    missing = [name for name in used if name not in catalog.entries]
    result = {name: (sys.executable, "none (not in catalog)") for name in missing}
    sources = [source_of_entry(catalog.entries[name]) for name in used if name in catalog.entries]
    if sources:
        manager = VenvManager(core_path=catalog.core_path, console=lambda msg: console.print(msg, highlight=False))
        for source, venv in zip(sources, manager.ensure_many(sources)):
            result[source.name] = (str(venv.python), "reused" if venv.reused else "built")
    return result


def split_config_args(args: Sequence[str]) -> tuple[list[str], list[str]]:
    """``gym run``-style arguments: config files, then overrides in Hydra's grammar (``key=value``,
    ``+key=value``, ``~key``)."""
    paths = [a for a in args if "=" not in a and not a.startswith(("+", "~"))]
    return paths, [a for a in args if a not in paths]


def resolve_config(
    config_paths: Sequence[str], overrides: Sequence[str] = (), *, env_file: str | None = "env.yaml",
    plugins: PluginManager | None = None, catalog: Catalog | None = None, allocate_ports: bool = True,
) -> GlobalConfig:
    """The config as ``gym run`` resolves and validates it (files merged, overrides, ``env.yaml``,
    every instance's options checked against its server type); ConfigError lists every problem.
    ``allocate_ports``: a port left 0 gets a free one now (off: it stays 0, "free one at start")."""
    from gym_core.config import load_config
    from gym_core.plugins import get_plugin_manager

    plugins = plugins or get_plugin_manager()
    catalog = catalog or find_catalog()
    return load_config(
        config_paths, overrides, env_file=env_file, server_types=plugins.servers(), load_errors=plugins.load_errors,
        external_types=catalog.entries.keys(), allocate_ports=allocate_ports,
    )


def default_env_file() -> str | None:
    """The env file every config loads (secrets, local paths): ``$GYM_ENV_FILE``, else ``env.yaml``."""
    return os.environ.get("GYM_ENV_FILE", "env.yaml")


@contextlib.contextmanager
def head_or_served(head: str, config_paths: Sequence[str], overrides: Sequence[str] = (), *, isolation: str = "venv",
                   console: Console | None = None) -> Iterator[str]:
    """The head server a data command (``gym collect``, ``gym reverify``) talks to: ``head`` (``--head``,
    a running ``gym run``), or, with ``config_paths`` (``--serve``), the head of the servers started
    from them with ``overrides`` (``--set``), reported ready on ``console`` and stopped on exit."""
    if not config_paths:
        yield head
        return
    console = console or Console(stderr=True)
    with launch(list(config_paths), overrides, isolation=isolation, console=console, env_file=default_env_file()) as state:
        console.print(state.table())
        console.print(f"[bold green]All servers ready[/] in {state.ready_after_s:.1f} s")
        yield state.config.head_url


def serve_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """The options of a data command that finds its servers through :func:`head_or_served`:
    ``--head``, ``--serve`` (repeatable), ``--set`` (repeatable) and ``--isolation``, passed as
    ``head``, ``serve_configs``, ``overrides`` and ``isolation``."""
    import click

    from gym_cli.head import default_head

    for option in reversed((
        click.option("--head", default=default_head(), show_default=True, help="Head server of a running `gym run`."),
        click.option("--serve", "serve_configs", multiple=True, type=click.Path(),
                     help="Start the servers of this config first (repeatable), stop them at the end."),
        click.option("--set", "overrides", multiple=True, help="Override for --serve configs, Hydra grammar (repeatable)."),
        click.option("--isolation", type=click.Choice(ISOLATION_MODES), default="venv", show_default=True,
                     help="Where --serve servers run: venv, each plugin's own; none, the Python running gym."),
    )):
        command = option(command)
    return command
