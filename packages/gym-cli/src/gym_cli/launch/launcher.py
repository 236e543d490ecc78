"""Launching a config: head server in this process, every instance as its own process.

Used by ``gym run`` and ``gym collect --serve``. Each instance runs ``python -m gym_core.serve`` in
its plugin's venv (``isolation="venv"``) or with the interpreter running gym (``isolation="none"``);
the instance name reaches it in an environment variable, the global config on its standard input
(``GYM_CONFIG=-``: a config can be larger than an environment variable may be, and the environment is
shown by ``ps e``; a pipe leaves nothing on disk, and a restart is handed the config again). An instance with
``replicas: N`` is N such processes (``counter#0``...), each on its own port (the config's
``replica_ports``), each supervised and restarted on its own. The head server publishes
:meth:`Launch.describe`, which reads the supervisor's state and changes nothing.

With ``ray:`` in the config (or ``ray_head_node_address``) the run joins that Ray cluster or starts a
local one, every server process gets ``RAY_ADDRESS``, and each one is placed on a node of the cluster by
an actor of its own that runs it there, as its instance's ``resources:`` say
(:mod:`~gym_cli.launch.ray_placement`); without, Ray is never imported (unless a server type needs it:
then a local cluster, servers staying local processes).

A server that dies after start-up is restarted as the config's ``server_restarts`` says (see
:class:`~gym_cli.launch.supervisor.RestartPolicy`; default 3 restarts within 60 s). Before starting
anything, the launcher stops the servers left running by a launcher that was killed (``kill -9``), as
recorded in its state file (:mod:`~gym_cli.launch.runstate`), and keeps its own state file current: written
as soon as the config is resolved (before venvs are built), so ``gym stop`` finds a run that is still
starting, and updated as servers start.

``kinds`` launches part of a config: the instances of those kinds and, transitively, the instances their
reference options name (:func:`needed_instances`); the others are left out of the run and its config
(``gym reverify --serve`` starts the resources servers, and a judge model only when one is referenced).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table

from gym_core.errors import GymError

from gym_cli.catalog import Catalog, find_catalog
from gym_cli.cli_options import ISOLATION_MODES, serve_options  # defined in a leaf, for `gym --help`
from gym_cli.head import node_label
from gym_cli.launch.runstate import RunStateFile, clean_stale_runs, runs_dir
from gym_cli.launch.supervisor import ChildExitedError, ChildSpec, ReadyTimeoutError, RestartPolicy, Supervisor
from gym_cli.sources import source_of_entry

if TYPE_CHECKING:  # the server stack loads when something is launched, not when `gym --help` runs
    from gym_core.config import GlobalConfig, InstanceConfig
    from gym_core.plugins import PluginManager
    from gym_core.registry import ServerType
    from gym_core.serving import ServerThread

    from gym_cli.launch.ray_placement import Placement, RayCluster
    from gym_cli.live import StartupEvent, StartupPhase
    from gym_cli.sources import PluginSource
    from gym_cli.venvs import Venv

__all__ = [
    "Launch",
    "launch",
    "ISOLATION_MODES",
    "default_env_file",
    "resolve_config",
    "split_config_args",
    "restart_policy",
    "RESTARTS_KEY",
    "head_or_served",
    "serve_options",
    "instance_references",
    "needed_instances",
]

RESTARTS_KEY = "server_restarts"
"""The config key of the restart policy: ``server_restarts: {attempts: 3, window_s: 60, backoff_s: 1}``."""


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
        may wait for it, ``exited``) and ``restarts``. A replicated instance's row also lists its
        ``replicas``, each with ``name``, ``url`` and those fields; the row's own are the summary
        (``pid``: the first replica's, ``alive``: all are, ``state``: the worst, ``restarts``: the sum).
        A read: it never consumes what ``gym run`` watches for."""
        codes = self.supervisor.returncodes() if self.supervisor is not None else {}
        pids = self.supervisor.pids() if self.supervisor is not None else {}
        states = self.supervisor.states() if self.supervisor is not None else {}

        def live(name: str) -> dict[str, Any]:
            code = codes.get(name)
            state = states.get(name, {"state": "starting", "restarts": 0})
            return {"pid": pids.get(name), "alive": code is None, "exit_code": code, **state}

        described = []
        for row in self.rows:
            if "replicas" not in row:
                described.append({**row, **live(row["name"])})
                continue
            replicas = [{**replica, **live(replica["name"])} for replica in row["replicas"]]
            worst = min((r["state"] for r in replicas), key=_STATE_ORDER.index)
            described.append(
                {
                    **row,
                    "replicas": replicas,
                    "pid": replicas[0]["pid"],
                    "alive": all(r["alive"] for r in replicas),
                    "exit_code": next((r["exit_code"] for r in replicas if r["exit_code"] is not None), None),
                    "state": worst,
                    "restarts": sum(r["restarts"] for r in replicas),
                }
            )
        return described

    def table(self) -> Table:
        table = Table(title="gym servers")
        placed = any("node" in replica for row in self.rows for replica in row.get("replicas") or [row])
        for column in ("instance", "kind", "server type", "url", "venv", *(["Ray node"] if placed else [])):
            table.add_column(column)
        table.add_row("head", "head", "-", self.config.head_url, "this process", *(["-"] if placed else []))
        for row in self.rows:
            for replica in row.get("replicas") or [row]:
                node = [node_label(replica.get("node"))] if placed else []
                table.add_row(replica["name"], row["kind"], row["plugin"], replica["url"], row["venv"], *node)
        return table


# The state of a replicated instance is that of its replica furthest from running.
_STATE_ORDER = ("exited", "restarting", "starting", "running")


def _check_port_free(host: str, port: int, what: str, fix: str) -> None:
    from gym_core.config import port_is_free

    if not port_is_free(port, host):
        raise GymError(f"port {port} on {host} is in use ({what}); {fix}")


def _maybe_start_ray(config: GlobalConfig, needs_ray: list[str], console: Console) -> RayCluster | None:
    """Ray costs seconds to start: only when the config asks for it (``ray:``, ``ray_head_node_address``)
    or a server type needs it (then a local cluster); the cluster joined or started, else None."""
    settings = config.ray
    if settings is None and not needs_ray:
        return None
    from gym_cli.launch.ray_placement import connect

    if settings is None:
        from gym_core.config import RayConfig

        settings, why = RayConfig(), "server types " + ", ".join(needs_ray)
    else:
        why = "ray_head_node_address is set" if config.ray_head_node_address else "the config sets ray"
    return connect(settings, why, lambda message: console.print(message, markup=False, highlight=False))


def _assign_head_port(config: GlobalConfig) -> None:
    """The head server's port (a free one for 0), before the servers' ports: Ray placement picks those
    on their nodes."""
    from gym_core.config import free_port

    head = config.data.setdefault("head_server", {})
    if not head.get("port"):
        head["port"] = free_port(head.setdefault("host", config.head_host))
    config.head_port = int(head["port"])


def _share_cluster_address(config: GlobalConfig, cluster: RayCluster) -> dict[str, str]:
    """Write the cluster's address into the config every server gets (``ray_head_node_address``, and
    ``ray.address``: a server reads the cluster it is on, not how it was found); the environment
    every server process gets (``RAY_ADDRESS``)."""
    from gym_cli.launch.ray_placement import RAY_ADDRESS_ENV

    config.data["ray_head_node_address"] = cluster.address
    if isinstance(config.data.get("ray"), dict):
        ray = {k: v for k, v in config.data["ray"].items() if k not in ("num_cpus", "num_gpus")}
        config.data["ray"] = {**ray, "address": cluster.address}
    return {RAY_ADDRESS_ENV: cluster.address}


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
    kinds: Collection[str] | None = None,
    on_startup: Callable[[StartupEvent], None] | None = None,
) -> Iterator[Launch]:
    """Start the head server and every instance; stop them all on exit. Yields once all are ready.

    ``on_startup`` is told each step (:class:`~gym_cli.live.StartupEvent`): each plugin's venv
    prepared, the servers started, each server ready (a model server's ``/ready`` answers once its
    model is loaded), then all; or a server exited before it was ready (then the
    :class:`~gym_cli.launch.supervisor.ChildExitedError` naming it is raised), or those still not
    ready when ``ready_timeout_s`` passed (:class:`~gym_cli.launch.supervisor.ReadyTimeoutError`).

    ``kinds`` (e.g. ``{"resources"}``): start only the instances of those kinds and those they need
    (:func:`needed_instances`); the others are dropped from the run's config, and a line on ``console``
    names them. A GymError when the config has no instance of those kinds."""
    from gym_core.auth import new_token, token_file, write_token
    from gym_core.config import CONFIG_ENV, CONFIG_FROM_STDIN, INSTANCE_ENV
    from gym_core.plugins import get_plugin_manager

    from gym_cli.venvs.layout import default_home

    if isolation not in ISOLATION_MODES:
        raise GymError(f"--isolation must be one of {', '.join(ISOLATION_MODES)}, not {isolation!r}")
    console = console or Console(stderr=True, soft_wrap=True)
    plugins = plugins or get_plugin_manager()
    catalog = catalog or find_catalog()
    known = plugins.servers()
    config = resolve_config(
        config_paths, overrides, env_file=env_file, plugins=plugins, catalog=catalog, allocate_ports=False
    )
    ray_settings = config.ray  # validated: with it, servers are placed on the cluster and get ports there
    if ray_settings is None:
        from gym_core.config import assign_ports

        assign_ports(config)  # what resolve_config does by default
    else:
        _assign_head_port(config)
    if not config.instances:
        raise GymError("the config defines no server instances (entries like `name: {plugin: ...}`)")

    def kind_of(inst: InstanceConfig) -> str:
        return known[inst.plugin].kind if inst.plugin in known else (catalog.entries[inst.plugin].kind or "?")

    if kinds is not None:
        _keep_needed(config, kinds, known, kind_of, console)
    policy = restart_policy(config, ready_timeout_s)
    # A launcher killed with -9 may have left servers on the ports this one needs.
    clean_stale_runs(runs_dir(), lambda message: console.print(message, markup=False, highlight=False))
    state = Launch(config)
    step = _Step(on_startup, state.started_at)
    supervisor: Supervisor | None = None
    cluster: RayCluster | None = None
    placement: Placement | None = None
    token_path = None
    run_state = RunStateFile(runs_dir(), config.head_url)
    # SIGTERM's default ends this process at once, orphaning the servers: make it unwind like Ctrl+C,
    # through the `finally` below, whichever command launched them (gym run, gym collect --serve...).
    # Set before the state file exists: from then on `gym stop` may send it, even while venvs build.
    restore = _sigterm_as_interrupt()
    try:
        run_state.record({})  # no servers yet: `gym stop` can already find (and stop) this run
        _check_port_free(
            config.head_host,
            config.head_port,
            "head server; another `gym run`?",
            "stop it or set head_server.port=0 (any free port; gym collect and gym status find the run)",
        )
        for inst in config.instances.values() if ray_settings is None else ():  # placed: checked on their nodes
            ports = inst.replica_ports if inst.replicas > 1 else [inst.port]
            for name, port in zip(inst.replica_names, ports):
                fix = (
                    f"set {inst.name}.port=<free port>" if port == inst.port else f"leave {inst.name}.replica_ports out"
                )
                _check_port_free(inst.host, port, f"instance {name}", f"stop what uses it or {fix}")

        used = {i.plugin for i in config.instances.values()}
        cluster = _maybe_start_ray(config, [n for n, p in known.items() if p.needs_ray and n in used], console)
        ray_env = _share_cluster_address(config, cluster) if cluster is not None else {}
        if ray_settings is not None:
            from gym_cli.launch import ray_placement

            placement = ray_placement.Placement(
                timeout_s=ray_settings.placement_timeout_s,
                notice=lambda message: console.print(message, markup=False, highlight=False),
            )
            placement.place(config, avoid_ports={config.head_port})
            from gym_core.config import assign_ports

            assign_ports(config)  # every port is set by now: this syncs each instance's options
        else:
            unused = [f"{name}.resources" for name, inst in config.instances.items() if inst.resources]
            if unused:
                console.print(
                    f"{', '.join(unused)}: not used, the config asks for no Ray cluster (ray: {{}} for a "
                    "local one, ray: {address: HOST:PORT} to join one)",
                    highlight=False,
                    markup=False,
                )

        pythons = _pythons(config, isolation, catalog, console, step)
        # Every server of the run requires its token; clients find it in a file only this user reads.
        token = config.auth_token or new_token()
        config.data["auth_token"] = token
        token_path = token_file(default_home(), config.head_host, config.head_port)
        write_token(token_path, token)
        supervisor = started = Supervisor(
            restart=policy,
            notice=lambda message: console.print(message, markup=False, highlight=False),
            on_spawn=lambda: run_state.record(started.pids()),
        )
        state.supervisor = supervisor
        children = [(name, kind_of(inst)) for inst in config.instances.values() for name in inst.replica_names]
        step("servers", "starting", total=len(children))
        for inst in config.instances.values():
            python, where = pythons[inst.plugin]
            kind = kind_of(inst)
            row: dict[str, Any] = {
                "name": inst.name,
                "kind": kind,
                "plugin": inst.plugin,
                "url": inst.url,
                "venv": where,
            }
            if inst.replicas > 1:
                row["replicas"] = [
                    {"name": name, "index": index, "url": url}
                    for index, (name, url) in enumerate(zip(inst.replica_names, inst.replica_urls))
                ]
            if placement is not None:  # where Ray placed each process, published by the head
                for replica in row.get("replicas") or [row]:
                    replica["node"] = placement.servers[replica["name"]].node()
            state.rows.append(row)
            for index, (name, url) in enumerate(zip(inst.replica_names, inst.replica_urls)):
                supervisor.start(
                    ChildSpec(
                        name=name,  # a replica's (counter#1): its process, log prefix and restarts are its own
                        argv=[python, "-m", "gym_core.serve"],
                        env={
                            CONFIG_ENV: CONFIG_FROM_STDIN,
                            "PYTHONUNBUFFERED": "1",
                            INSTANCE_ENV: inst.name,
                            **ray_env,
                        },
                        # Its own options whole, its own port; other instances' secrets redacted.
                        stdin=config.for_replica(inst.name, index).to_json().encode(),
                        ready_url=f"{url}/ready",
                        ready_headers={"Authorization": f"Bearer {token}"},
                        cwd=None,
                        start=placement.starter(name) if placement is not None else None,
                    )
                )
        # The head after the servers: they get their config on their standard input, not from it, so
        # importing its web stack here overlaps their start-up instead of delaying it.
        from gym_core.head import build_head_app
        from gym_core.serving import ServerThread

        state.head = ServerThread(build_head_app(config, state.describe), config.head_host, config.head_port).start()
        for name, kind in children:
            step("ready", "waiting", name, kind, total=len(children))
        ready: list[str] = []
        kinds_of = dict(children)

        def server_ready(name: str) -> None:
            ready.append(name)
            step("ready", "ready", name, kinds_of.get(name), done=len(ready), total=len(children))

        told = [time.monotonic()]

        def still_waiting(pending: list[str]) -> None:
            # A model that loads for minutes: its waiting step again every STILL_WAITING_S.
            if time.monotonic() - told[0] >= STILL_WAITING_S:
                told[0] = time.monotonic()
                for name in pending:
                    step("ready", "waiting", name, kinds_of.get(name), done=len(ready), total=len(children))

        try:
            supervisor.wait_ready(ready_timeout_s, on_ready=server_ready, on_waiting=still_waiting)
        except ChildExitedError as exc:  # the error names its exit status and last lines
            step("ready", "exited", exc.name, kinds_of.get(exc.name), done=len(ready), total=len(children))
            raise
        except ReadyTimeoutError as exc:  # the error names them and their last lines
            for name in exc.names:
                step("ready", "timeout", name, kinds_of.get(name), done=len(ready), total=len(children))
            raise
        step("ready", "all", done=len(children), total=len(children))
        state.ready_after_s = time.monotonic() - state.started_at
        yield state
    finally:
        try:
            if supervisor is not None:
                supervisor.shutdown()
            if placement is not None:
                placement.close()
            if state.head is not None:
                state.head.stop()
            if cluster is not None:
                cluster.disconnect()  # a local cluster started here stops with it
        finally:
            run_state.remove()
            if token_path is not None:
                token_path.unlink(missing_ok=True)
            restore()


def instance_references(
    config: GlobalConfig, name: str, known_types: Mapping[str, ServerType]
) -> list[tuple[str, str]]:
    """The ``(option, instance)`` pairs instance ``name`` refers to through its reference options (fields
    typed :data:`~gym_core.options.ModelRef`, ``ResourcesRef``, ``AgentRef``, ``ServerRef``; defaults
    included). A server type not loaded here (another venv's) cannot say which options are references:
    every option whose value names another instance counts, so that nothing it may call is left out."""
    import typing

    from gym_core.config import validate_instance_options
    from gym_core.options import ref_of

    instance = config.instances[name]
    server_type = known_types.get(instance.plugin)
    if server_type is None:
        values = instance.options.items()
    else:
        struct = validate_instance_options(config, name, server_type.config)
        hints = typing.get_type_hints(server_type.config, include_extras=True)
        values = [(field, getattr(struct, field, None)) for field, hint in hints.items() if ref_of(hint) is not None]
    found = []
    for option, value in values:
        for target in value if isinstance(value, (list, tuple)) else [value]:  # list[ModelRef] too
            if isinstance(target, str) and target in config.instances and target != name:
                found.append((option, target))
    return found


def needed_instances(
    config: GlobalConfig, roots: Sequence[str], known_types: Mapping[str, ServerType]
) -> dict[str, str | None]:
    """The instances ``roots`` need, themselves included: each root, and transitively every instance a
    needed one refers to (:func:`instance_references`); each mapped to why it is needed (None for a root,
    else ``"<instance>.<option>"``, the first reference found), in the order they were found."""
    needed: dict[str, str | None] = {name: None for name in roots}
    queue = list(roots)
    while queue:
        name = queue.pop(0)
        for option, target in instance_references(config, name, known_types):
            if target not in needed:
                needed[target] = f"{name}.{option}"
                queue.append(target)
    return needed


def _keep_needed(
    config: GlobalConfig,
    kinds: Collection[str],
    known_types: Mapping[str, ServerType],
    kind_of: Callable[[InstanceConfig], str],
    console: Console,
) -> None:
    """Drop from ``config`` every instance that is neither of ``kinds`` nor needed by one that is (the
    head then publishes only what runs), saying which were left out and which were kept for a reference."""
    roots = [name for name, inst in config.instances.items() if kind_of(inst) in kinds]
    wanted = " or ".join(sorted(kinds))
    if not roots:
        listing = ", ".join(f"{name} ({kind_of(inst)})" for name, inst in config.instances.items())
        raise GymError(
            f"the config defines no {wanted} server instance, and only those are started here; its instances: {listing}"
        )
    needed = needed_instances(config, roots, known_types)
    for name, why in needed.items():
        if why is not None:
            console.print(f"starting {name} ({kind_of(config.instances[name])}): {why} refers to it", highlight=False)
    left_out = [name for name in config.instances if name not in needed]
    if left_out:
        listing = ", ".join(f"{name} ({kind_of(config.instances[name])})" for name in left_out)
        console.print(
            f"left out {listing}: only {wanted} servers and the instances they refer to are started here",
            highlight=False,
        )
    for name in left_out:
        del config.instances[name]
        del config.data[name]


def restart_policy(config: GlobalConfig, ready_timeout_s: float = 600.0) -> RestartPolicy:
    """The config's ``server_restarts`` (a restart must be ready within ``ready_timeout_s`` unless it
    says otherwise); a :class:`~gym_core.errors.ConfigError` naming the bad key."""
    import msgspec

    from gym_core.errors import ConfigError

    raw = config.data.get(RESTARTS_KEY) or {}
    if not isinstance(raw, dict):
        raise ConfigError(
            f"{RESTARTS_KEY}: expected a mapping like {{attempts: 3, window_s: 60, backoff_s: 1}}, got {raw!r}"
        )
    try:
        return msgspec.convert({"ready_timeout_s": ready_timeout_s, **raw}, RestartPolicy)
    except msgspec.ValidationError as exc:
        raise ConfigError(f"{RESTARTS_KEY}: {str(exc).replace('$.', '')}") from None


def _sigterm_as_interrupt() -> Callable[[], None]:
    """Raise KeyboardInterrupt on SIGTERM until the returned function restores the old handler
    (main thread only: elsewhere signal handlers cannot be set, and the caller's own handling stands).
    Venv builds in progress are stopped too: unlike Ctrl+C in a terminal, SIGTERM (``gym stop``) reaches
    this process alone, and the interrupted launcher would wait for them to finish."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    from gym_cli.venvs.uv import allow_builds, stop_builds  # now: not in a signal handler, mid-import maybe

    def interrupt(signum: int, frame: Any) -> None:
        stop_builds()
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)

    def restore() -> None:
        signal.signal(signal.SIGTERM, previous)
        allow_builds()  # a later launch in this process (tests, a notebook) builds again

    return restore


# While servers are not ready (a model loading), how often their waiting step is told again.
STILL_WAITING_S = 10.0


class _Step:
    """Tells a start-up step to ``on_startup`` (nothing without one), with the time since ``started``."""

    def __init__(self, on_startup: Callable[[StartupEvent], None] | None, started: float):
        self.on_startup = on_startup
        self.started = started
        self._lock = threading.Lock()  # venv builds report from their threads

    def __call__(
        self,
        phase: StartupPhase,
        state: str,
        name: str | None = None,
        kind: str | None = None,
        *,
        done: int = 0,
        total: int = 0,
    ) -> None:
        if self.on_startup is None:
            return
        from gym_cli.live import StartupEvent

        elapsed = round(time.monotonic() - self.started, 3)
        with self._lock:
            self.on_startup(
                StartupEvent(phase=phase, state=state, name=name, kind=kind, done=done, total=total, elapsed_s=elapsed)
            )


def _pythons(
    config: GlobalConfig, isolation: str, catalog: Catalog, console: Console, step: _Step | None = None
) -> dict[str, tuple[str, str]]:
    """The python each server type runs with, and a word on its venv (each venv a step of ``step``)."""
    used = sorted({i.plugin for i in config.instances.values()})
    if isolation == "none":
        return {name: (sys.executable, "none (gym's)") for name in used}
    from gym_cli.venvs import VenvManager

    missing = [name for name in used if name not in catalog.entries]
    result = {name: (sys.executable, "none (not in catalog)") for name in missing}
    # On a Ray cluster a plugin's `ray` extra (code_gen's: its executions fan out as Ray tasks) comes too.
    extras = ("ray",) if config.ray is not None else ()
    sources = [source_of_entry(catalog.entries[name], extras) for name in used if name in catalog.entries]
    if sources:
        manager = VenvManager(core_path=catalog.core_path, console=lambda msg: console.print(msg, highlight=False))
        step = step or _Step(None, 0.0)
        for source in sources:
            step("venv", "preparing", source.name, total=len(sources))
        prepared: list[str] = []

        def venv_ready(source: PluginSource, venv: Venv) -> None:
            prepared.append(source.name)
            state = "reused" if venv.reused else "built"
            step("venv", state, source.name, done=len(prepared), total=len(sources))

        def venv_building(source: PluginSource) -> None:
            step("venv", "building", source.name, done=len(prepared), total=len(sources))

        built = manager.ensure_many(sources, on_ready=venv_ready, on_building=venv_building)
        for source, venv in zip(sources, built):
            result[source.name] = (str(venv.python), "reused" if venv.reused else "built")
    return result


def split_config_args(args: Sequence[str]) -> tuple[list[str], list[str]]:
    """``gym run``-style arguments: config files, then overrides in Hydra's grammar (``key=value``,
    ``+key=value``, ``~key``)."""
    paths = [a for a in args if "=" not in a and not a.startswith(("+", "~"))]
    return paths, [a for a in args if a not in paths]


def resolve_config(
    config_paths: Sequence[str],
    overrides: Sequence[str] = (),
    *,
    env_file: str | None = "env.yaml",
    plugins: PluginManager | None = None,
    catalog: Catalog | None = None,
    allocate_ports: bool = True,
) -> GlobalConfig:
    """The config as ``gym run`` resolves and validates it (files merged, overrides, ``env.yaml``,
    every instance's options checked against its server type); ConfigError lists every problem.
    ``allocate_ports``: a port left 0 gets a free one now (off: it stays 0, "free one at start")."""
    from gym_core.config import load_config
    from gym_core.plugins import get_plugin_manager

    plugins = plugins or get_plugin_manager()
    catalog = catalog or find_catalog()
    return load_config(
        config_paths,
        overrides,
        env_file=env_file,
        server_types=plugins.servers(),
        load_errors=plugins.load_errors,
        external_types=catalog.entries.keys(),
        allocate_ports=allocate_ports,
    )


def default_env_file() -> str | None:
    """The env file every config loads (secrets, local paths): ``$GYM_ENV_FILE``, else ``env.yaml``."""
    return os.environ.get("GYM_ENV_FILE", "env.yaml")


@contextlib.contextmanager
def head_or_served(
    head: str,
    config_paths: Sequence[str],
    overrides: Sequence[str] = (),
    *,
    isolation: str = "venv",
    console: Console | None = None,
    kinds: Collection[str] | None = None,
    on_startup: Callable[[StartupEvent], None] | None = None,
) -> Iterator[str]:
    """The head server a data command (``gym collect``, ``gym reverify``) talks to: ``head`` (``--head``,
    a running ``gym run``), or, with ``config_paths`` (``--serve``), the head of the servers started
    from them with ``overrides`` (``--set``), reported ready on ``console`` and stopped on exit.
    ``kinds``: start only the instances of those kinds and those they refer to; ``on_startup``: told
    each step of the start-up (see :func:`launch`)."""
    if not config_paths:
        yield head
        return
    console = console or Console(stderr=True)
    with launch(
        list(config_paths),
        overrides,
        isolation=isolation,
        console=console,
        env_file=default_env_file(),
        kinds=kinds,
        on_startup=on_startup,
    ) as state:
        console.print(state.table())
        console.print(f"[bold green]All servers ready[/] in {state.ready_after_s:.1f} s")
        yield state.config.head_url
