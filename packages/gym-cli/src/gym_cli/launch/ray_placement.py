"""Servers placed on a Ray cluster: one Ray actor per server process, which runs it on its node.

With ``ray:`` in the config (or ``ray_head_node_address``), ``gym run`` joins that cluster (``address``)
or starts a local one (``ray: {}``, ``ray: true``, address ``local``) with :func:`connect`, writes the
cluster's address back to the config as ``ray_head_node_address``, and gives every server process the
environment variable ``RAY_ADDRESS``, which ``ray.init()`` honours.

:class:`Placement` then hosts each server process (each replica of an instance too) in an actor of its
own, a :class:`ServerHost`, scheduled as its instance's ``resources:`` say
(:class:`~gym_core.config.ServerResources`: CPUs, GPUs, memory, custom resources, a node): the actor
holds those resources for as long as it lives and starts the server's command (its plugin's venv python,
``-m gym_core.serve``) on its node, in a process group of its own that gets SIGTERM if the actor dies.
The server binds its node's IP address and a port free there; those are the addresses the config and
the head server publish, reachable from the other nodes.

The launcher sees each hosted process through a :class:`RayProcess`, which looks like the
``subprocess.Popen`` the supervisor starts locally (pid, output lines, return code, signals to its
group), so readiness, restarts and shutdown are the supervisor's, as for local processes. A restart
reuses the actor: the same node and port, so the published URL stays true. A launcher that dies takes
its actors with it (Ray ends the actors of a driver that is gone) and they their servers.

Ray is imported only here, and this module only when the config asks for Ray. On a cluster of several
machines each node needs gym installed where the cluster's workers import from (the actors are gym code)
and the server's python at the same path (a ``$GYM_HOME`` on a shared filesystem, or built on each node
at the same path); a node that lacks it says so when a server is started there.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from gym_core.errors import ConfigError, GymError

if TYPE_CHECKING:
    from gym_core.config import GlobalConfig, RayConfig, ServerResources

__all__ = ["RAY_ADDRESS_ENV", "RayCluster", "connect", "Placement", "PlacedServer", "ServerHost", "RayProcess"]

RAY_ADDRESS_ENV = "RAY_ADDRESS"
"""Ray's own variable for the cluster ``ray.init()`` joins; every server process of a Ray run gets it."""

_CALL_TIMEOUT_S = 30.0  # one call to a hosting actor (they answer in milliseconds; a loaded node is slower)
_OUTPUT_LINES = 5000  # output lines an actor keeps for the launcher to fetch


def _import_ray(why: str) -> Any:
    try:
        import ray  # type: ignore[import-not-found]
    except ImportError:
        raise GymError(f"Ray is needed ({why}) but not installed: pip install ray (or gym-cli[ray])") from None
    return ray


@dataclass
class RayCluster:
    """The cluster a run uses: its address (what servers get as ``RAY_ADDRESS``) and whether this
    process started it (then :meth:`disconnect` stops it)."""

    address: str
    started_here: bool
    connected_here: bool = True

    def disconnect(self) -> None:
        """Leave the cluster (stopping it when this process started it); nothing if we found it connected."""
        if self.connected_here:
            import ray  # type: ignore[import-not-found]

            with contextlib.suppress(Exception):  # already gone: nothing left to leave
                ray.shutdown()


def connect(settings: RayConfig, why: str, notice: Callable[[str], None]) -> RayCluster:
    """Join the cluster at ``settings.address``, or start a local one (no address, or ``local``).
    A GymError when Ray is not installed (naming ``why`` it is needed) or no cluster answers there."""
    # Under `uv run`, Ray would make every worker re-run the driver's `uv run` in a copy of the working
    # directory (slow, and not the servers' venvs): gym places servers with their own venvs instead.
    # Read when Ray is imported; set it to 1 to have Ray do it anyway.
    os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
    ray = _import_ray(why)
    if ray.is_initialized():  # a notebook or test that already joined one: use it, leave it be
        return RayCluster(_address_of(ray, settings.address), started_here=False, connected_here=False)
    address = settings.address or "local"
    if not settings.local and address != "auto" and not address.startswith("ray://"):
        _check_reachable(address)
    notice(f"Ray: {'starting a local cluster' if settings.local else 'joining the cluster at ' + address}…")
    kwargs: dict[str, Any] = {"log_to_driver": False}  # servers' output comes through the supervisor
    if settings.local:
        kwargs.update(address="local", include_dashboard=False, num_cpus=settings.num_cpus, num_gpus=settings.num_gpus)
    else:
        kwargs["address"] = address
    # ray.init installs its own SIGTERM handler, which ends the process at once: `gym stop` would then
    # skip the launcher's orderly shutdown. Keep the handler the caller had.
    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.getsignal(signal.SIGTERM) if main_thread else None
    try:
        ray.init(**kwargs)
    except Exception as exc:  # noqa: BLE001 - Ray raises many kinds (ConnectionError, timeouts...): one clear line
        raise GymError(
            f"could not {'start a local Ray cluster' if settings.local else 'join the Ray cluster at ' + address}: "
            f"{exc}"
        ) from None
    finally:
        if main_thread and previous is not None:
            signal.signal(signal.SIGTERM, previous)
    return RayCluster(_address_of(ray, address), started_here=settings.local)


def _address_of(ray: Any, given: str | None) -> str:
    if given and given.startswith("ray://"):  # a Ray Client connection: servers join the same way
        return given
    return str(ray.get_runtime_context().gcs_address)


def _check_reachable(address: str, timeout_s: float = 5.0) -> None:
    """A clear error at once when nothing listens at ``HOST:PORT`` (Ray itself retries for minutes)."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ConfigError(f"ray.address: {address!r} is not a Ray address (HOST:PORT, ray://HOST:PORT, auto or local)")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
            pass
    except OSError as exc:
        raise GymError(
            f"no Ray cluster answers at {address} ({exc}); is it running (`ray status --address {address}`)?"
        ) from None


# --- the actor -------------------------------------------------------------------------------------


class _Hosted:
    """One process a ServerHost started: its output lines (the last ones, with their absolute index)
    and return code."""

    def __init__(self, proc: subprocess.Popen[bytes]):
        self.proc = proc
        self.lines: deque[str] = deque(maxlen=_OUTPUT_LINES)
        self.first = 0  # absolute index of lines[0]
        self.eof = False
        self.returncode: int | None = None
        self.exited_at: float | None = None
        self.cond = threading.Condition()

    def pump(self) -> None:
        assert self.proc.stdout is not None
        with contextlib.suppress(OSError, ValueError):
            for raw in iter(self.proc.stdout.readline, b""):
                with self.cond:
                    if len(self.lines) == self.lines.maxlen:
                        self.first += 1
                    self.lines.append(raw.decode("utf-8", errors="replace").rstrip("\r\n"))
                    self.cond.notify_all()
        with self.cond:
            self.eof = True
            self.cond.notify_all()

    def reap(self) -> None:
        code = self.proc.wait()
        with self.cond:
            self.returncode, self.exited_at = code, time.monotonic()
            self.cond.notify_all()

    def done(self) -> bool:
        # Exited, and its output read to the end (or a grandchild holds the pipe: not waited for long).
        return self.returncode is not None and (self.eof or time.monotonic() - (self.exited_at or 0) > 1.0)


class ServerHost:
    """A Ray actor (made one by :class:`Placement`) that runs server processes on its node: one at a
    time in practice (a restart is the next), each in its own process group, forked by one thread that
    lives as long as the actor so that ``PR_SET_PDEATHSIG`` stops them if the actor dies."""

    def __init__(self) -> None:
        self._hosted: dict[int, _Hosted] = {}
        self._spawner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gym-host-spawn")

    def where(self) -> dict[str, Any]:
        """The node this actor runs on: ``node_id``, ``node_ip``, ``hostname``, and the actor's ``pid``."""
        import ray  # type: ignore[import-not-found]

        return {
            "node_id": ray.get_runtime_context().get_node_id(),
            "node_ip": ray.util.get_node_ip_address(),
            "hostname": socket.gethostname(),
            "pid": os.getpid(),
        }

    def free_port(self, host: str, avoid: list[int]) -> int:
        """A port free on ``host`` of this node now, not in ``avoid``."""
        from gym_core.config import free_port

        return free_port(host, avoid)

    def port_free(self, host: str, port: int) -> bool:
        """Whether ``port`` on ``host`` of this node can be bound now."""
        from gym_core.config import port_is_free

        return port_is_free(port, host)

    def start(self, argv: list[str], env: dict[str, str], cwd: str | None, stdin: bytes | None = None) -> int:
        """Start ``argv`` with this node's environment plus ``env`` and ``stdin`` written to its standard
        input (then closed; None: nothing to read); its pid (also its process group)."""
        from gym_cli.launch.supervisor import die_with, feed_stdin

        if not Path(argv[0]).exists():
            raise GymError(
                f"{argv[0]} does not exist on node {socket.gethostname()} ({self.where()['node_ip']}): "
                "the server's venv must be at the same path on every node (share $GYM_HOME, or build "
                "the venvs there)"
            )
        proc = self._spawner.submit(
            subprocess.Popen,
            list(argv),
            cwd=cwd,
            env={**os.environ, **env},
            stdin=subprocess.DEVNULL if stdin is None else subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
            preexec_fn=die_with(os.getpid()),
        ).result()
        feed_stdin(proc, stdin, str(proc.pid))
        hosted = self._hosted[proc.pid] = _Hosted(proc)
        for target in (hosted.pump, hosted.reap):
            threading.Thread(target=target, name=f"gym-host-{proc.pid}", daemon=True).start()
        return int(proc.pid)

    def read(self, pid: int, cursor: int, wait_s: float) -> tuple[list[str], int, int | None]:
        """The output lines of process ``pid`` from absolute index ``cursor`` (waiting up to ``wait_s``
        seconds for one), the next cursor, and its return code once it exited and all was read."""
        hosted = self._hosted[pid]
        with hosted.cond:
            hosted.cond.wait_for(lambda: hosted.first + len(hosted.lines) > cursor or hosted.done(), timeout=wait_s)
            start = max(cursor, hosted.first) - hosted.first
            lines = list(hosted.lines)[start:]
            end = hosted.first + len(hosted.lines)
            return lines, end, (hosted.returncode if hosted.done() and end <= cursor + len(lines) else None)

    def signal_group(self, pid: int, signum: int) -> None:
        """Send ``signum`` to the process group of process ``pid``."""
        from gym_cli.launch.runstate import signal_group

        signal_group(pid, signum)

    def group_alive(self, pid: int) -> bool:
        """Whether the process group of ``pid`` still has a live member."""
        from gym_cli.launch.runstate import group_alive

        return group_alive(pid)

    def stop_all(self, grace_s: float) -> None:
        """SIGTERM every group this actor started, SIGKILL those alive after ``grace_s`` (the last word
        before the actor is killed)."""
        from gym_cli.launch.runstate import stop_groups

        stop_groups(list(self._hosted), grace_s)


class RayProcess:
    """A process hosted by a :class:`ServerHost`, as the supervisor sees a ``subprocess.Popen``: ``pid``
    (on its node), ``stdout`` (its output lines, fetched from the actor by a thread), ``poll()``,
    ``wait()``, and ``signal_group()`` / ``group_alive()`` for its process group. If the actor dies
    (its node left the cluster, say), the process counts as killed (``-SIGKILL``)."""

    def __init__(self, actor: Any, pid: int, argv: list[str], where: str):
        self.actor, self.pid, self.args, self.where = actor, pid, argv, where
        self.returncode: int | None = None
        read_fd, write_fd = os.pipe()
        self.stdout = os.fdopen(read_fd, "rb")
        self._sink = os.fdopen(write_fd, "wb")
        self._done = threading.Event()
        threading.Thread(target=self._fetch, name=f"gym-ray-out-{pid}", daemon=True).start()

    def _fetch(self) -> None:
        import ray  # type: ignore[import-not-found]
        from ray.exceptions import GetTimeoutError  # type: ignore[import-not-found]

        cursor, code = 0, None
        try:
            while code is None:
                try:
                    lines, cursor, code = ray.get(
                        self.actor.read.remote(self.pid, cursor, 1.0), timeout=_CALL_TIMEOUT_S
                    )
                except GetTimeoutError:
                    continue  # a slow node: ask again; a dead actor raises below
                except Exception as exc:  # noqa: BLE001 - the actor is gone (RayActorError), or Ray is shut down
                    lines = [
                        f"gym: the Ray actor hosting this server on {self.where} is gone: "
                        f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
                    ]
                    code = -int(signal.SIGKILL)
                with contextlib.suppress(OSError, ValueError):
                    for line in lines:
                        self._sink.write(line.encode() + b"\n")
                    self._sink.flush()
        finally:
            self.returncode = code if code is not None else -int(signal.SIGKILL)
            with contextlib.suppress(OSError):
                self._sink.close()
            self._done.set()

    def poll(self) -> int | None:
        return self.returncode if self._done.is_set() else None

    def wait(self, timeout: float | None = None) -> int:
        if not self._done.wait(timeout):
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        return int(self.returncode if self.returncode is not None else -signal.SIGKILL)

    def signal_group(self, signum: int) -> None:
        """Send ``signum`` to its process group, through the actor (nothing if the actor is gone)."""
        import ray  # type: ignore[import-not-found]

        with contextlib.suppress(Exception):
            ray.get(self.actor.signal_group.remote(self.pid, int(signum)), timeout=_CALL_TIMEOUT_S)

    def group_alive(self) -> bool:
        """Whether its process group has a live member (False once the actor is gone: so is the group)."""
        import ray  # type: ignore[import-not-found]

        try:
            return bool(ray.get(self.actor.group_alive.remote(self.pid), timeout=_CALL_TIMEOUT_S))
        except Exception:  # noqa: BLE001 - a dead actor's processes got SIGTERM with it
            return False


# --- placement -------------------------------------------------------------------------------------


@dataclass
class PlacedServer:
    """One server process placed on the cluster: its actor and where it runs."""

    name: str  # the replica's name (``counter#1``), or the instance's
    instance: str
    actor: Any
    options: dict[str, Any]  # the actor's Ray options, to place it again on the same node
    node_id: str = ""
    node_ip: str = ""
    port: int = 0

    def node(self) -> dict[str, str]:
        """What the head server publishes about where it runs."""
        return {"id": self.node_id, "ip": self.node_ip}


@dataclass
class Placement:
    """The actors that host a run's servers on the cluster (see the module docstring)."""

    timeout_s: float = 120.0
    notice: Callable[[str], None] = print
    servers: dict[str, PlacedServer] = field(default_factory=dict)
    _actors: list[Any] = field(default_factory=list)

    def place(self, config: GlobalConfig, avoid_ports: Iterable[int] = ()) -> None:
        """Place every server process of ``config`` on a node, within ``timeout_s``, and write each one's
        host (its node's IP) and port (free there, unless the config gave one) into ``config``.
        A ConfigError when no node could ever hold an instance's ``resources``, a GymError when they
        are not placed in time (the cluster is busy)."""
        import msgspec
        import ray  # type: ignore[import-not-found]

        from gym_core.config import ServerResources

        nodes = [node for node in ray.nodes() if node.get("Alive")]
        problems, wanted = [], []
        for inst in config.instances.values():
            try:
                resources = msgspec.convert(inst.resources or {}, ServerResources, str_keys=True)
                options = _actor_options(inst.name, resources, nodes)
            except ConfigError as exc:
                problems.extend(exc.problems)
                continue
            wanted += [(inst.name, name, options) for name in inst.replica_names]
        if problems:
            raise ConfigError(problems)
        host_class = ray.remote(ServerHost)
        for instance, name, options in wanted:
            actor = host_class.options(**options).remote()
            self._actors.append(actor)
            self.servers[name] = PlacedServer(name, instance, actor, options)
        calls = {server.actor.where.remote(): server for server in self.servers.values()}
        self.notice(f"Ray: placing {len(calls)} server process(es) on the cluster…")
        ready, pending = ray.wait(list(calls), num_returns=len(calls), timeout=self.timeout_s)
        if pending:
            waiting = ", ".join(f"{calls[ref].name} ({_describe(calls[ref].options)})" for ref in pending)
            raise GymError(
                f"Ray could not place within ray.placement_timeout_s ({self.timeout_s:g} s): {waiting}; "
                f"free on the cluster now: {_resources_text(ray.available_resources())}"
            )
        for ref in ready:
            server = calls[ref]
            try:
                where = ray.get(ref, timeout=_CALL_TIMEOUT_S)
            except Exception as exc:  # noqa: BLE001 - the actor failed to start: name it
                raise GymError(f"the Ray actor for {server.name} failed to start: {exc}") from None
            server.node_id, server.node_ip = where["node_id"], where["node_ip"]
        self._assign_addresses(config, set(avoid_ports))

    def _assign_addresses(self, config: GlobalConfig, used: set[int]) -> None:
        import ray  # type: ignore[import-not-found]

        for inst in config.instances.values():
            hosts, ports = [], []
            for index, name in enumerate(inst.replica_names):
                server = self.servers[name]
                given = inst.replica_ports[index] if index < len(inst.replica_ports) else 0
                given = given or (inst.port if index == 0 else 0)
                if given:
                    if not ray.get(server.actor.port_free.remote(server.node_ip, given), timeout=_CALL_TIMEOUT_S):
                        key = "port" if index == 0 else f"replica_ports[{index}]"
                        raise GymError(
                            f"{inst.name}.{key}: port {given} is in use on node {server.node_ip} "
                            f"({server.node_id[:12]}), where Ray placed {name}"
                        )
                    server.port = given
                else:
                    server.port = ray.get(
                        server.actor.free_port.remote(server.node_ip, sorted(used)), timeout=_CALL_TIMEOUT_S
                    )
                used.add(server.port)
                hosts.append(server.node_ip)
                ports.append(server.port)
            entry = config.data[inst.name]
            inst.host, inst.port = hosts[0], ports[0]
            entry["host"], entry["port"] = hosts[0], ports[0]
            if inst.replicas > 1:
                inst.replica_ports, inst.replica_hosts = ports, hosts
                entry["replica_ports"], entry["replica_hosts"] = list(ports), list(hosts)

    def starter(self, name: str) -> Callable[[list[str], dict[str, str], str | None, bytes | None], RayProcess]:
        """What starts server process ``name`` on its actor (the supervisor calls it again to restart it);
        a dead actor is placed again on the same node first."""

        def start(argv: list[str], env: dict[str, str], cwd: str | None, stdin: bytes | None) -> RayProcess:
            import ray  # type: ignore[import-not-found]
            from ray.exceptions import RayActorError, RayTaskError  # type: ignore[import-not-found]

            server = self.servers[name]
            try:
                pid = cast(int, ray.get(server.actor.start.remote(argv, env, cwd, stdin), timeout=_CALL_TIMEOUT_S))
            except RayActorError:
                self._replace(server)
                pid = cast(int, ray.get(server.actor.start.remote(argv, env, cwd, stdin), timeout=_CALL_TIMEOUT_S))
            except RayTaskError as exc:  # the actor refused: say why, not Ray's traceback
                raise GymError(f"{name}: {exc.cause if exc.cause is not None else exc}") from None
            return RayProcess(server.actor, pid, argv, f"node {server.node_ip} ({server.node_id[:12]})")

        return start

    def _replace(self, server: PlacedServer) -> None:
        """A new actor for ``server`` on a node with its IP (so its URL stays true), within the timeout."""
        import ray  # type: ignore[import-not-found]

        options = {**server.options}
        options.pop("scheduling_strategy", None)
        options["resources"] = {**options.get("resources", {}), f"node:{server.node_ip}": 0.001}
        self.notice(f"gym: the Ray actor of {server.name} is gone; placing a new one on {server.node_ip}")
        server.actor = ray.remote(ServerHost).options(**options).remote()
        self._actors.append(server.actor)
        where = cast(dict[str, str], ray.get(server.actor.where.remote(), timeout=self.timeout_s))
        server.node_id = where["node_id"]

    def where(self) -> dict[str, dict[str, str]]:
        """Each placed server process's node (``id``, ``ip``), by name."""
        return {name: server.node() for name, server in self.servers.items()}

    def close(self, grace_s: float = 5.0) -> None:
        """Stop whatever the actors still run and kill the actors (bounded; never raises)."""
        try:
            import ray  # type: ignore[import-not-found]

            refs = [actor.stop_all.remote(grace_s) for actor in self._actors]
            with contextlib.suppress(Exception):
                ray.wait(refs, num_returns=len(refs), timeout=grace_s + 5)
            for actor in self._actors:
                with contextlib.suppress(Exception):
                    ray.kill(actor, no_restart=True)
        except Exception as exc:  # noqa: BLE001 - shutting down: report, never mask the real error
            self.notice(f"gym: could not stop the Ray actors cleanly: {exc}")


def _actor_options(instance: str, resources: ServerResources, nodes: list[Mapping[str, Any]]) -> dict[str, Any]:
    """Ray options of the actor hosting a process of ``instance``; a ConfigError when no alive node
    could hold it (naming the nodes and what they have)."""
    demand: dict[str, float] = {
        "CPU": resources.num_cpus,
        "GPU": resources.num_gpus,
        "memory": float(resources.memory),
        **resources.custom,
    }
    options: dict[str, Any] = {
        "num_cpus": resources.num_cpus,
        "num_gpus": resources.num_gpus,
        "max_concurrency": 8,
        "max_restarts": 0,
    }
    if resources.memory:
        options["memory"] = resources.memory
    custom = dict(resources.custom)
    candidates = list(nodes)
    if resources.node is not None:
        candidates = _nodes_named(resources.node, nodes)
        if not candidates:
            raise ConfigError(
                f"{instance}.resources.node: no alive node of the Ray cluster is {resources.node!r}; "
                f"its nodes: {_nodes_text(nodes)}"
            )
        if len(candidates) == 1 and candidates[0]["NodeID"].startswith(resources.node):
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy  # type: ignore[import-not-found]

            options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(candidates[0]["NodeID"], soft=False)
        else:  # an IP address: Ray gives each node the resource node:<ip>
            custom[f"node:{resources.node}"] = 0.001
    if custom:
        options["resources"] = custom
    fits = [n for n in candidates if all(n.get("Resources", {}).get(k, 0.0) >= v for k, v in demand.items() if v)]
    if not fits:
        wanted = _resources_text({k: v for k, v in demand.items() if v}) or "nothing"
        where = f" on {resources.node!r}" if resources.node is not None else ""
        raise ConfigError(
            f"{instance}.resources: no node of the Ray cluster{where} has {wanted}; "
            f"its nodes: {_nodes_text(candidates or nodes)}"
        )
    return options


def _nodes_named(name: str, nodes: list[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The nodes ``name`` designates: the node with that id (or the one id it is a prefix of, 6+ digits),
    else those with that IP address."""
    exact = [n for n in nodes if n["NodeID"] == name]
    if exact:
        return exact
    prefixed = [n for n in nodes if len(name) >= 6 and n["NodeID"].startswith(name)]
    if len(prefixed) == 1:
        return prefixed
    return [n for n in nodes if n.get("NodeManagerAddress") == name]


def _nodes_text(nodes: list[Mapping[str, Any]]) -> str:
    return (
        "; ".join(
            f"{n['NodeID'][:12]} ({n.get('NodeManagerAddress', '?')}): {_resources_text(n.get('Resources', {}))}"
            for n in nodes
        )
        or "none"
    )


def _resources_text(resources: Mapping[str, float]) -> str:
    """``CPU 2, env_node 4`` (Ray's bookkeeping resources left out)."""
    shown = {
        k: v
        for k, v in resources.items()
        if not k.startswith("node:") and k not in ("object_store_memory",) and not k.startswith("accelerator_type")
    }
    return ", ".join(f"{k} {v:g}" for k, v in sorted(shown.items()))


def _describe(options: Mapping[str, Any]) -> str:
    parts = {"CPU": options.get("num_cpus", 0), "GPU": options.get("num_gpus", 0), **options.get("resources", {})}
    text = _resources_text({k: v for k, v in parts.items() if v})
    if "scheduling_strategy" in options:
        text += f"{', ' if text else ''}on node {options['scheduling_strategy'].node_id[:12]}"
    return text or "no resources"
