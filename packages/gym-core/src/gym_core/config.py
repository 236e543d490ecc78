"""Configuration: YAML files, then ``env.yaml`` (secrets), then command-line overrides; later wins.

A config is a mapping whose entries are server instances, written ``name: {plugin: X, ...options}``
(``replicas: N`` runs N processes of the instance behind its one name; :mod:`gym_core.routing`),
plus a few reserved keys (``head_server``, ``ray_head_node_address``, ``ray``, ``server_restarts``,
``auth_token``) and free variables
(scalars, or mappings whose name starts with ``_``) usable through OmegaConf interpolation.
Overrides use Hydra's grammar, leniently: ``math.port=9000`` sets an option whether or not the files
set it (``+`` and ``++`` are accepted and mean the same), ``~a.b`` deletes one; a new top-level name
needs ``+`` (``+judge.plugin=...``), so that a misspelt instance name is an error with a did-you-mean.

The ``plugin:`` key names the instance's *server type* (what a plugin registered, e.g. ``math``).
Options are validated against the server type's config struct (a :class:`~gym_core.ServerConfig`
subclass) with the path of the bad key; fields typed :data:`~gym_core.options.ModelRef`,
``ResourcesRef``, ``AgentRef`` or ``ServerRef`` must name another instance (did-you-mean included).
Every problem found is reported at once in a :class:`~gym_core.errors.ConfigError`.
"""

from __future__ import annotations

import functools
import json
import os
import re
import socket
import sys
import typing
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import msgspec
import yaml
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from gym_core.errors import ConfigError, GymError, did_you_mean
from gym_core.options import DEFAULT_HEAD_PORT, DEFAULT_HOST, ref_of
from gym_core.routing import replica_name

if TYPE_CHECKING:
    from gym_core.registry import ServerType

__all__ = [
    "GlobalConfig",
    "InstanceConfig",
    "load_config",
    "DEFAULT_HEAD_PORT",
    "RESERVED_KEYS",
    "validate_instance_options",
    "SECRET_KEY",
    "REDACTED",
    "INSTANCE_KEYS",
    "RayConfig",
    "ServerResources",
    "free_port",
    "port_is_free",
]

RESERVED_KEYS = frozenset({"head_server", "ray_head_node_address", "ray", "server_restarts", "auth_token"})
# The resolved global config given to every server process: its JSON, or CONFIG_FROM_STDIN, which says
# the JSON comes on standard input (what `gym run` does: an environment variable is limited to 128 KiB,
# and `ps e` and /proc/PID/environ show it to anyone who can see the process).
CONFIG_ENV = "GYM_CONFIG"
CONFIG_FROM_STDIN = "-"
INSTANCE_ENV = "GYM_INSTANCE"  # which instance of it a server process is
# Keys of an instance entry that are the launcher's, not options of its server type: ``replica_ports``
# (one port per replica, the first being ``port``) is filled in when ports are assigned; ``resources``
# says where a Ray cluster may place it; ``replica_hosts`` (each replica's node) is filled in by that placement.
INSTANCE_KEYS = frozenset({"plugin", "replicas", "replica_ports", "resources", "replica_hosts"})


class ServerResources(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """An instance's ``resources:`` on a Ray cluster (each of its processes gets them): what the actor
    hosting it reserves (``num_cpus``, ``num_gpus``, ``memory`` in bytes, ``custom`` resources by name)
    and ``node``, a node it must run on (a node id, a unique prefix of one, or a node's IP address)."""

    num_cpus: Annotated[float, msgspec.Meta(ge=0)] = 0.0
    num_gpus: Annotated[float, msgspec.Meta(ge=0)] = 0.0
    memory: Annotated[int, msgspec.Meta(ge=0)] = 0
    custom: dict[str, Annotated[float, msgspec.Meta(gt=0)]] = {}
    node: Annotated[str, msgspec.Meta(min_length=1)] | None = None


class RayConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """The config's ``ray:`` (``true`` or ``{}``: a local cluster gym starts and stops; ``address``: join
    that cluster, ``"local"`` being a new local one). ``num_cpus``/``num_gpus`` size a local cluster;
    ``placement_timeout_s`` bounds the wait for every server to be placed on a node."""

    address: str | None = None
    num_cpus: Annotated[int, msgspec.Meta(ge=0)] | None = None
    num_gpus: Annotated[int, msgspec.Meta(ge=0)] | None = None
    placement_timeout_s: Annotated[float, msgspec.Meta(gt=0)] = 120.0

    @property
    def local(self) -> bool:
        """Whether gym starts this cluster itself (no address, or ``local``)."""
        return self.address in (None, "", "local")


@dataclass
class InstanceConfig:
    """One server instance of a config: its server type (``plugin``), address, options, and with
    ``replicas`` > 1 the port of each replica (``replica_ports``, the first is ``port``)."""

    name: str
    plugin: str
    host: str
    port: int
    options: dict[str, Any] = field(default_factory=dict)
    replicas: int = 1
    replica_ports: list[int] = field(default_factory=list)
    resources: dict[str, Any] | None = None  # ``resources:`` as written (ServerResources' fields)
    replica_hosts: list[str] = field(default_factory=list)  # each replica's host, when placed on nodes

    @property
    def url(self) -> str:
        """The URL of this process (a replica's own, in a replica's config; else replica 0's)."""
        return f"http://{self.host}:{self.port}"

    @property
    def replica_names(self) -> list[str]:
        """Each replica's name (``counter#0``...; the instance's own name when it has one replica)."""
        return [replica_name(self.name, i) for i in range(self.replicas)] if self.replicas > 1 else [self.name]

    @property
    def replica_urls(self) -> list[str]:
        """Each replica's URL, in replica order (``[url]`` with one replica or before ports are assigned)."""
        if self.replicas > 1 and len(self.replica_ports) == self.replicas:
            hosts = self.replica_hosts if len(self.replica_hosts) == self.replicas else [self.host] * self.replicas
            return [f"http://{host}:{port}" for host, port in zip(hosts, self.replica_ports)]
        return [self.url]


# Option names whose values are secrets wherever they appear (``api_key``, ``session_secret``,
# ``hf_token``, ``password``...; not ``max_tokens``).
SECRET_KEY = re.compile(r"(api_?key|secret|passw(or)?d|(^|_)token|authorization|credentials?)$", re.IGNORECASE)
REDACTED = "<redacted>"
# Keys of env.yaml whose values are addresses, not secrets: clients need them to find servers.
_PUBLIC_KEYS = frozenset({"host", "port", "plugin"})


class GlobalConfig:
    """The resolved configuration shared by every process of one ``gym run``.

    ``secrets``: the string values that came from ``env.yaml``; with every value of an option named
    like a secret (:data:`SECRET_KEY`), they are replaced by ``<redacted>`` in what is published
    (:meth:`redacted`, the head server) or logged.
    """

    def __init__(self, data: dict[str, Any], *, secrets: Iterable[str] = ()):
        self.data = data
        self.secrets = frozenset(s for s in secrets if s)
        self.instances: dict[str, InstanceConfig] = {}
        for name, value in data.items():
            if _is_instance(name, value):
                options = {k: v for k, v in value.items() if k not in INSTANCE_KEYS}
                replicas = value.get("replicas", 1)
                self.instances[name] = InstanceConfig(
                    name,
                    value["plugin"],
                    value.get("host", DEFAULT_HOST),
                    int(value.get("port") or 0),
                    options,
                    replicas=int(replicas) if _replicas_problem(replicas) is None else 1,
                    replica_ports=[int(p) for p in value.get("replica_ports") or ()],
                    resources=value.get("resources"),
                    replica_hosts=[str(h) for h in value.get("replica_hosts") or ()],
                )
        head = data.get("head_server") or {}
        self.head_host: str = head.get("host", DEFAULT_HOST)
        self.head_port: int = int(head.get("port", DEFAULT_HEAD_PORT))

    @property
    def head_url(self) -> str:
        return f"http://{self.head_host}:{self.head_port}"

    @property
    def auth_token(self) -> str | None:
        """The bearer token every server of the run requires (``gym run`` sets one per run), or None."""
        token = self.data.get("auth_token")
        return str(token) if token and token != REDACTED else None  # a published config has none

    @property
    def ray_head_node_address(self) -> str | None:
        return self.data.get("ray_head_node_address")

    @property
    def ray(self) -> RayConfig | None:
        """What the config asks of Ray (``ray:``, or ``ray_head_node_address``, which wins as the address:
        the launcher writes the cluster's own there); None: no Ray. A ConfigError when malformed."""
        problems, ray = _ray_config(self.data)
        if problems:
            raise ConfigError(problems)
        return ray

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.data, sort_keys=False)

    def redacted(self) -> dict[str, Any]:
        """A copy of the config safe to publish or log: secrets replaced by ``<redacted>``."""
        return _redact(self.data, self.secrets)

    def for_instance(self, name: str) -> GlobalConfig:
        """The config a server process of instance ``name`` gets at spawn time: its own options
        whole (secrets included), every other instance's secrets redacted, the run's token kept."""
        data = _redact(self.data, self.secrets)
        data[name] = self.data[name]
        if "auth_token" in self.data:
            data["auth_token"] = self.data["auth_token"]
        return GlobalConfig(data)

    def for_replica(self, name: str, index: int) -> GlobalConfig:
        """:meth:`for_instance` for replica ``index`` of ``name``: the same, with ``port`` its own
        (what the server process listens on), every replica's port still in ``replica_ports``."""
        instance = self.instances[name]
        config = self.for_instance(name)
        if instance.replicas > 1:
            port = instance.replica_ports[index]
            host = instance.replica_hosts[index] if len(instance.replica_hosts) == instance.replicas else instance.host
            config.data[name] = {**config.data[name], "port": port, "host": host}
            config.instances[name].port, config.instances[name].host = port, host
            config.instances[name].options.update(port=port, host=host)
        return config

    def redact_text(self, text: str) -> str:
        """``text`` with every ``env.yaml`` secret in it replaced (for log lines and messages)."""
        for secret in sorted(self.secrets, key=len, reverse=True):
            text = text.replace(secret, REDACTED)
        return text

    def to_json(self) -> str:
        return json.dumps(self.data)

    @classmethod
    def from_yaml(cls, text: str) -> GlobalConfig:
        return cls(yaml.safe_load(text) or {})

    @classmethod
    def from_json(cls, text: str) -> GlobalConfig:
        return cls(json.loads(text))

    @classmethod
    def from_env(cls) -> GlobalConfig:
        """The config of a server process: ``$GYM_CONFIG``'s JSON, or, when it is ``-``, the JSON read
        from standard input to its end (how ``gym run`` hands it over)."""
        text = os.environ.get(CONFIG_ENV)
        if not text:
            raise ConfigError(f"${CONFIG_ENV} is not set: server processes are started by `gym run`")
        where = f"${CONFIG_ENV}"
        if text == CONFIG_FROM_STDIN:
            where = f"standard input (${CONFIG_ENV} is {CONFIG_FROM_STDIN})"
            text = sys.stdin.buffer.read().decode() if sys.stdin is not None else ""
            if not text.strip():
                raise ConfigError(f"no config on {where}: server processes are started by `gym run`")
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise ConfigError(f"the config on {where} is not JSON: {exc}") from None
        if not isinstance(data, dict):
            raise ConfigError(f"the config on {where} is not a JSON object")
        return cls(data)


def _redact(value: Any, secrets: frozenset[str], key: str = "") -> Any:
    if isinstance(value, dict):
        return {k: _redact(v, secrets, str(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [_redact(v, secrets, key) for v in value]
    if value is not None and SECRET_KEY.search(key):
        return REDACTED
    if isinstance(value, str) and any(secret in value for secret in secrets):  # also "Bearer <key>"
        return REDACTED
    return value


def _secret_strings(value: Any, key: str = "") -> set[str]:
    """The string leaves of env.yaml that are secrets (all but addresses and plugin names)."""
    if isinstance(value, dict):
        return set().union(*(_secret_strings(v, str(k)) for k, v in value.items()))
    if isinstance(value, list):
        return set().union(*(_secret_strings(v, key) for v in value))
    if isinstance(value, str) and key not in _PUBLIC_KEYS and len(value) >= 4:
        return {value}
    return set()


def _is_instance(name: str, value: Any) -> bool:
    return isinstance(value, dict) and name not in RESERVED_KEYS and not name.startswith("_") and "plugin" in value


# --- loading ------------------------------------------------------------------------------------


def load_config(
    config_paths: Sequence[str | Path] = (),
    overrides: Sequence[str] = (),
    *,
    env_file: str | Path | None = "env.yaml",
    base: dict[str, Any] | None = None,
    server_types: Mapping[str, ServerType] | None = None,
    load_errors: Mapping[str, str] | None = None,
    external_types: Iterable[str] = (),
    allocate_ports: bool = True,
) -> GlobalConfig:
    """Merge config files, ``env_file`` (skipped when absent) and overrides; validate; assign ports.

    ``base`` is merged first (programmatic defaults). With ``server_types`` (the registered server
    types by name, ``PluginManager.servers()``), each instance's options are validated against
    its type's config struct and references between instances checked; ``load_errors`` (plugin
    name -> import error) explain a type that is missing because its plugin failed to import.
    Types named in ``external_types`` (installed only in their own isolated venv) are accepted as
    they are and validated by their server process.
    """
    problems: list[str] = []
    defaults = {"head_server": {"host": DEFAULT_HOST, "port": DEFAULT_HEAD_PORT}}
    layers: list[DictConfig] = [OmegaConf.create(defaults), OmegaConf.create(base or {})]
    for path in config_paths:
        layers.append(_load_yaml(Path(path)))
    secrets: set[str] = set()
    if env_file is not None and Path(env_file).is_file():
        env_layer = _load_yaml(Path(env_file))
        layers.append(env_layer)
        try:
            secrets = _secret_strings(OmegaConf.to_container(env_layer, resolve=False))
        except OmegaConfBaseException:
            pass  # the merge below reports it
    try:
        cfg = OmegaConf.merge(*layers)
    except OmegaConfBaseException as exc:
        raise ConfigError(f"cannot merge config files: {exc}") from exc
    assert isinstance(cfg, DictConfig)
    _apply_overrides(cfg, overrides)
    # Values that cannot be resolved (``???``, an unset environment variable...) are reported, each with
    # its path, and left empty, so that what else is wrong is reported with them.
    unresolved = _unresolved(cfg)
    problems.extend(unresolved.values())
    try:
        container = OmegaConf.to_container(cfg, resolve=True)
    except OmegaConfBaseException as exc:
        raise ConfigError(problems + [f"cannot resolve interpolation: {_omegaconf_message(exc)}"]) from exc
    assert isinstance(container, dict)
    data: dict[str, Any] = {}
    for key, value in container.items():
        if isinstance(key, str):
            data[key] = value
        else:  # YAML reads `1:` or `true:` as a number or a boolean
            problems.append(f"{key!r}: a top-level key names a server instance or a setting: it must be a string")

    for name, value in data.items():
        if name in RESERVED_KEYS or name.startswith("_") or not isinstance(value, dict):
            continue
        if "plugin" not in value:
            problems.append(
                f"{name}: a server instance needs a 'plugin' key ({name}: {{plugin: <plugin name>, ...}});"
                " prefix the key with '_' if it is a variable block"
            )
    # Ports and replicas are read before any option is validated (GlobalConfig, assign_ports): check them first.
    port_problems = [
        f"{name}.port: {problem}"
        for name, value in data.items()
        if isinstance(value, dict)
        and (name == "head_server" or _is_instance(name, value))
        and (problem := _port_problem(value.get("port")))
    ]
    port_problems += [
        problem
        for name, value in data.items()
        if _is_instance(name, value)
        for problem in _replica_problems(name, value) + _resources_problems(name, value)
    ]
    port_problems += _ray_config(data)[0]
    problems += port_problems
    if server_types is not None:
        # Validated with the launcher's keys that are wrong left out (reported above), so that every
        # other problem is reported too.
        bad = {problem.partition(".")[0] for problem in port_problems}
        checked = GlobalConfig(data if not bad else _without_launcher_keys(data, bad), secrets=secrets)
        found = _validate_against_types(checked, server_types, load_errors or {}, set(external_types))
        problems += [p for p in found if not any(p.startswith(f"{path}:") for path in unresolved)]
    if problems:
        raise ConfigError(problems)
    config = GlobalConfig(data, secrets=secrets)
    if allocate_ports:
        assign_ports(config)
    return config


def _without_launcher_keys(data: dict[str, Any], names: set[str]) -> dict[str, Any]:
    """``data`` with the port and launcher keys of the instances ``names`` left out."""
    drop = {"port", "replicas", "replica_ports", "resources"}
    return {
        name: {k: v for k, v in value.items() if k not in drop} if name in names and isinstance(value, dict) else value
        for name, value in data.items()
    }


_ENV_NOT_FOUND = re.compile(r"Environment variable '([^']+)' not found")


def _omegaconf_message(exc: OmegaConfBaseException) -> str:
    """OmegaConf's message without its report lines (``full_key:``, ``object_type=``) and wrapper text."""
    message = str(getattr(exc, "msg", None) or exc).splitlines()[0]
    return message.replace("KeyError raised while resolving interpolation: ", "").strip('"')


def _unresolved(cfg: DictConfig | ListConfig, prefix: str = "") -> dict[str, str]:
    """Every value of ``cfg`` that cannot be resolved (path -> problem), set to None in ``cfg``: a
    missing value (``???``), an unset environment variable (``${oc.env:NAME}``), a reference to a key
    that does not exist."""
    problems: dict[str, str] = {}
    keys: list[Any] = list(range(len(cfg))) if isinstance(cfg, ListConfig) else list(cfg.keys())
    for key in keys:
        path = f"{prefix}[{key}]" if isinstance(cfg, ListConfig) else f"{prefix}{'.' if prefix else ''}{key}"
        if OmegaConf.is_missing(cfg, key):
            problems[path] = f"{path}: missing required value (set it in a config file, env.yaml, or as {path}=...)"
            cfg[key] = None
            continue
        try:
            value = cfg[key]
        except OmegaConfBaseException as exc:
            message = _omegaconf_message(exc)
            if variable := _ENV_NOT_FOUND.search(message):
                name = variable.group(1)
                message = (
                    f"environment variable {name} is not set (the config reads it); set it "
                    f"(export {name}=...) or write the value in env.yaml"
                )
            problems[path] = f"{path}: {message}"
            cfg[key] = None
            continue
        if isinstance(value, (DictConfig, ListConfig)):
            problems.update(_unresolved(value, path))
    return problems


def _port_problem(port: Any) -> str | None:
    """Why ``port`` is not a port number, or None. Digit strings pass (``${oc.env:PORT}`` is one)."""
    if port is None:
        return None
    if isinstance(port, str) and port.strip().isdigit():
        port = int(port)
    if isinstance(port, bool) or not isinstance(port, int):
        return f"{port!r} is not a port number (an integer from 0 to 65535; 0: any free port)"
    if not 0 <= port <= 65535:
        return f"{port} is out of range (0 to 65535; 0: any free port)"
    return None


def _replicas_problem(replicas: Any) -> str | None:
    """Why ``replicas`` is not a replica count, or None."""
    if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 1:
        return f"{replicas!r} is not a number of replicas (an integer, at least 1)"
    return None


def _replica_problems(name: str, value: dict[str, Any]) -> list[str]:
    """What is wrong with an instance's ``replicas`` and ``replica_ports`` (the launcher's keys)."""
    replicas = value.get("replicas", 1)
    problem = _replicas_problem(replicas)
    if problem:
        return [f"{name}.replicas: {problem}"]
    ports = value.get("replica_ports")
    if ports is None:
        return []
    if not isinstance(ports, list) or len(ports) != replicas:
        return [
            f"{name}.replica_ports: expected a list of {replicas} ports (one per replica), got {ports!r};"
            " leave it out to have free ports assigned"
        ]
    problems = [
        f"{name}.replica_ports[{i}]: {problem}" for i, port in enumerate(ports) if (problem := _port_problem(port))
    ]
    if not problems:
        given = [int(p) for p in ports if int(p)]
        if len(set(given)) != len(given):
            problems.append(f"{name}.replica_ports: a port appears twice in {ports!r}")
        elif value.get("port") and ports[0] and int(value["port"]) != int(ports[0]):
            problems.append(
                f"{name}.replica_ports: the first replica's port must be {name}.port ({value['port']}), not {ports[0]}"
            )
    return problems


def _resources_problems(name: str, value: dict[str, Any]) -> list[str]:
    """What is wrong with an instance's ``resources:`` (see :class:`ServerResources`), each with its path."""
    resources = value.get("resources")
    if resources is None:
        return []
    if not isinstance(resources, dict):
        return [
            f"{name}.resources: expected a mapping like {{num_cpus: 1, num_gpus: 0, custom: {{name: 1}}, "
            f"node: <node id or IP>}}, got {resources!r}"
        ]
    known = {f.encode_name for f in msgspec.structs.fields(ServerResources)}
    unknown = [
        f"{name}.resources.{key}: unknown key{did_you_mean(str(key), known)}; expected one of "
        f"{', '.join(sorted(known))} (other resources go under custom: {{{key}: <amount>}})"
        for key in resources
        if key not in known
    ]
    if unknown:
        return unknown
    custom = resources.get("custom")
    if isinstance(custom, dict):  # msgspec would say `custom[...]`: name the resource
        bad = [
            f"{name}.resources.custom.{key}: expected an amount > 0, got {amount!r}"
            for key, amount in custom.items()
            if isinstance(amount, bool) or not isinstance(amount, (int, float)) or amount <= 0
        ]
        if bad:
            return bad
    try:
        msgspec.convert(resources, ServerResources, str_keys=True)
    except msgspec.ValidationError as exc:
        return [f"{name}.resources: {str(exc).replace('`$.', f'`{name}.resources.')}"]
    return []


def _ray_config(data: Mapping[str, Any]) -> tuple[list[str], RayConfig | None]:
    """The problems of the config's ``ray`` and ``ray_head_node_address`` keys, and what they ask (None: no Ray)."""
    raw, address = data.get("ray"), data.get("ray_head_node_address")
    if address is not None and (not isinstance(address, str) or not address.strip()):
        return [
            f"ray_head_node_address: expected a Ray address (HOST:PORT, ray://HOST:PORT or auto), got {address!r}"
        ], None
    if raw is None or raw is False:
        if raw is False and address:
            return ["ray: false, yet ray_head_node_address is set; drop one of them"], None
        return [], RayConfig(address=address) if address else None
    if raw is True:
        raw = {}
    if not isinstance(raw, dict):
        return [
            f"ray: expected true, false or a mapping like {{address: HOST:PORT}} (no address: a local cluster), "
            f"got {raw!r}"
        ], None
    known = {f.encode_name for f in msgspec.structs.fields(RayConfig)}
    unknown = [
        f"ray.{key}: unknown key{did_you_mean(str(key), known)}; expected one of {', '.join(sorted(known))}"
        for key in raw
        if key not in known
    ]
    if unknown:
        return unknown, None
    try:
        ray = msgspec.convert(raw, RayConfig, str_keys=True)
    except msgspec.ValidationError as exc:
        return [f"ray: {str(exc).replace('`$.', '`ray.')}"], None
    if not ray.local and (ray.num_cpus is not None or ray.num_gpus is not None):
        key = "num_cpus" if ray.num_cpus is not None else "num_gpus"
        return [f"ray.{key}: sizes a local cluster only; a cluster joined at {ray.address} has its own"], None
    if address:  # the cluster's own address, which the launcher writes back, is the one to join
        if ray.address and not ray.local and ray.address != address:
            return [
                f"ray.address: {ray.address!r} differs from ray_head_node_address {address!r}; set one of them"
            ], None
        ray = msgspec.structs.replace(ray, address=address)
    return [], ray


def _load_yaml(path: Path) -> DictConfig:
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    try:
        cfg = OmegaConf.load(path)
    except (OmegaConfBaseException, yaml.YAMLError) as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
    if not isinstance(cfg, DictConfig):
        raise ConfigError(f"{path}: the top level must be a mapping of server instances")
    return cfg


def _apply_overrides(cfg: DictConfig, overrides: Sequence[str]) -> None:
    """Apply overrides in Hydra's grammar, with Hydra's rules for ``+``, ``++`` and ``~``."""
    if not overrides:
        return
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    try:
        parsed = OverridesParser.create().parse_overrides(overrides=list(overrides))
    except HydraException as exc:
        raise ConfigError(f"bad override: {exc}") from exc
    problems = []
    for override in parsed:
        key = override.key_or_group
        text = override.input_line
        if override.is_sweep_override():
            problems.append(f"{text}: sweeps are not supported here")
            continue
        parent_key, _, leaf = key.rpartition(".")
        exists = OmegaConf.select(cfg, key, default=_ABSENT, throw_on_missing=False) is not _ABSENT
        if not exists:  # select reports a '???' value as absent, but it is there to be set
            parent = OmegaConf.select(cfg, parent_key, default=None) if parent_key else cfg
            exists = isinstance(parent, DictConfig) and OmegaConf.is_missing(parent, leaf)
        if override.is_delete():
            if not exists:
                problems.append(f"{text}: cannot delete {key!r}, it is not in the config")
                continue
            parent = OmegaConf.select(cfg, parent_key) if parent_key else cfg
            del parent[leaf]
            continue
        # An option of an instance (or setting) the config has: set, whether or not the files set it; a
        # misspelt option is then reported by validation, with its did-you-mean. A new top-level name
        # takes a `+`: without one it is most likely a misspelt instance.
        top = key.split(".")[0]
        if top not in cfg and not (override.is_add() or override.is_force_add()):
            if top in RESERVED_KEYS or top.startswith("_"):
                pass
            else:
                names = [str(name) for name in cfg.keys()]
                hint = did_you_mean(top, [*names, *RESERVED_KEYS])
                problems.append(
                    f"{text}: the config has no instance or setting named {top!r}{hint}; instances: "
                    f"{', '.join(sorted(name for name in names if not name.startswith('_') and name not in RESERVED_KEYS))}"
                    f" (+{key}=... adds a new one)"
                )
                continue
        OmegaConf.update(cfg, key, override.value(), merge=False, force_add=True)
    if problems:
        raise ConfigError(problems)


_ABSENT = object()


# --- validation against server types -------------------------------------------------------------


def _validate_against_types(
    config: GlobalConfig, known: Mapping[str, ServerType], load_errors: Mapping[str, str], external: set[str]
) -> list[str]:
    problems: list[str] = []
    for name, instance in config.instances.items():
        if instance.plugin not in known and instance.plugin in external:
            continue
        if instance.plugin not in known:
            if instance.plugin in load_errors:
                problems.append(
                    f"{name}.plugin: plugin {instance.plugin!r} failed to import: {load_errors[instance.plugin]}"
                )
            else:
                problems.append(
                    f"{name}.plugin: unknown server type {instance.plugin!r}{did_you_mean(instance.plugin, {*known, *external})};"
                    f" known: {', '.join(sorted({*known, *external})) or 'none'}"
                    f"; a plugin's server type needs that plugin installed"
                    f" (`gym plugin install gym-{instance.plugin.replace('_', '-')}`, say)"
                )
            continue
        try:
            validate_instance_options(config, name, known[instance.plugin].config, known)
        except ConfigError as exc:
            problems.extend(exc.problems)
    return problems


def validate_instance_options(
    config: GlobalConfig,
    name: str,
    config_type: type[msgspec.Struct],
    known_types: Mapping[str, ServerType] | None = None,
) -> msgspec.Struct:
    """Convert an instance's options to its server type's config struct, or a ConfigError with paths.

    With ``known_types``, a reference option is also checked to name an instance of the right kind.
    """
    instance = config.instances[name]
    problems = []
    field_names = {f.name for f in msgspec.structs.fields(config_type)}
    for f in msgspec.structs.fields(config_type):
        if f.required and f.encode_name not in instance.options:
            problems.append(f"{name}.{f.encode_name}: missing required option of server type {instance.plugin!r}")
    for key in instance.options:
        if key not in field_names:
            problems.append(
                f"{name}.{key}: unknown option of server type {instance.plugin!r}{did_you_mean(key, field_names)}"
            )
    # msgspec stops at the first bad value: each option is also checked alone, to report them all.
    problems += _option_type_problems(name, instance.options, config_type)
    if problems:
        raise ConfigError(problems)
    try:
        struct = msgspec.convert(instance.options, config_type, str_keys=True)
    except msgspec.ValidationError as exc:
        message = str(exc).replace("`$.", f"`{name}.").replace("`$`", f"`{name}`")
        raise ConfigError(f"{name}: {message}") from exc
    hints = typing.get_type_hints(config_type, include_extras=True)
    for field_name, hint in hints.items():
        ref = ref_of(hint)
        value = getattr(struct, field_name, None)
        if ref is None or not isinstance(value, str):
            continue
        target = config.instances.get(value)
        if target is None:
            problems.append(
                f"{name}.{field_name}: no server instance named {value!r}{did_you_mean(value, config.instances)};"
                f" instances: {', '.join(sorted(config.instances)) or 'none'}"
            )
        elif ref.kind and known_types and target.plugin in known_types:
            target_kind = known_types[target.plugin].kind
            if target_kind != ref.kind:
                problems.append(
                    f"{name}.{field_name}: {value!r} is a {target_kind} server, expected a {ref.kind} server"
                )
    if problems:
        raise ConfigError(problems)
    return struct


@functools.cache
def _one_option_struct(config_type: type[msgspec.Struct], field_name: str) -> type[msgspec.Struct]:
    """A struct of ``config_type``'s one field ``field_name``, made once. Converting a field's bare
    type instead (``msgspec.convert(value, f.type)``) frees a ``Meta(pattern=...)``'s compiled regex
    with the temporary type info in msgspec 0.19-0.22, and a later convert of the config then reads
    freed memory; a struct keeps its type info for good."""
    f = next(f for f in msgspec.structs.fields(config_type) if f.name == field_name)
    return msgspec.defstruct(f"{config_type.__name__}_{field_name}", [(f.encode_name, f.type)], kw_only=True)


def _option_type_problems(name: str, options: Mapping[str, Any], config_type: type[msgspec.Struct]) -> list[str]:
    """The options of instance ``name`` whose value does not fit their field's type, each alone, with its path."""
    problems = []
    for f in msgspec.structs.fields(config_type):
        if f.encode_name not in options:
            continue
        try:
            one = _one_option_struct(config_type, f.name)
            msgspec.convert({f.encode_name: options[f.encode_name]}, one, str_keys=True)
        except msgspec.ValidationError as exc:
            path = f"{name}.{f.encode_name}"
            message = str(exc).replace("`$.", f"`{name}.")
            # a nested option's error ends "- at `PATH`": lead with that path, as every other line does
            head, sep, where = message.rpartition(" - at `")
            if sep and where.endswith("`"):
                path, message = where[:-1], head
            problems.append(f"{path}: {message}")
    return problems


# --- ports --------------------------------------------------------------------------------------


def free_port(host: str = DEFAULT_HOST, avoid: Iterable[int] = ()) -> int:
    """A port the OS reports free now, not in ``avoid``."""
    avoid = set(avoid)
    for _ in range(100):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((host, 0))
            port = sock.getsockname()[1]
        if port not in avoid:
            return port
    raise GymError("could not find a free port")


def port_is_free(port: int, host: str = DEFAULT_HOST) -> bool:
    """Whether ``port`` on ``host`` can be bound now (a port in TIME_WAIT counts as free, as it does
    for a server, which binds with SO_REUSEADDR)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def assign_ports(config: GlobalConfig) -> None:
    """Give every instance (every replica) without a port a free one; no two share a port."""
    for instance in config.instances.values():
        # ``port`` is the first replica's: a port given only there (or only in replica_ports) is both.
        if instance.replicas > 1 and instance.replica_ports and not instance.port:
            instance.port = instance.replica_ports[0]
            if instance.port:
                config.data[instance.name]["port"] = instance.port
    used = {i.port for i in config.instances.values() if i.port}
    used |= {p for i in config.instances.values() for p in i.replica_ports if p}
    explicit: dict[int, str] = {}
    for instance in config.instances.values():
        ports = [(instance.port, "port")] if instance.port else []
        ports += [(p, f"replica_ports[{k}]") for k, p in enumerate(instance.replica_ports) if p and k > 0]
        for port, key in ports:
            if port in explicit:
                raise ConfigError(f"{instance.name}.{key}: port {port} is also used by {explicit[port]}")
            explicit[port] = instance.name
    head = config.data.setdefault("head_server", {})
    head.setdefault("host", DEFAULT_HOST)
    if "port" not in head:
        head["port"] = DEFAULT_HEAD_PORT
    elif not head["port"]:  # port 0 asks for any free port
        head["port"] = free_port(head["host"], avoid=used)
    config.head_port = int(head["port"])
    if config.head_port in explicit:
        name = explicit[config.head_port]
        raise ConfigError(f"{name}.port: port {config.head_port} is also used by head_server")
    used.add(config.head_port)
    for instance in config.instances.values():
        if not instance.port:
            instance.port = free_port(instance.host, avoid=used)
            used.add(instance.port)
            config.data[instance.name]["port"] = instance.port
        if instance.replicas > 1:
            given = instance.replica_ports or [0] * instance.replicas
            ports = [instance.port]
            for port in given[1:]:
                if not port:
                    port = free_port(instance.host, avoid=used)
                    used.add(port)
                ports.append(port)
            instance.replica_ports = ports
            config.data[instance.name]["replica_ports"] = list(ports)
        config.data[instance.name].setdefault("host", instance.host)
        # The options as a server process reads them back from the published config.
        instance.options.update(port=instance.port, host=instance.host)
