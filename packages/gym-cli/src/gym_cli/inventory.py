"""What gym knows about plugins: the server types they register, where each plugin package comes
from, its version, its venv, and each server type's options.

Nothing here imports a server module: versions come from package metadata and pyproject files, kinds
and options from the plugins' light ``plugin`` and ``config`` modules (a server type names its server
class as a ``"module:Class"`` string). A plugin installed only in its own venv is asked there, by a
short script run with the venv's Python (:func:`check_registration`).
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import asdict, dataclass, field
from importlib.metadata import EntryPoint, distributions, entry_points
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gym_core.errors import GymError, did_you_mean
from gym_core.plugins import ENTRY_POINT_GROUP, SERVER_KINDS, get_plugin_manager

from gym_cli.catalog import Catalog
from gym_cli.sources import normalize_name, project_table, source_of_entry
from gym_cli.venvs import VenvManager

if TYPE_CHECKING:
    from gym_core.registry import ServerType

__all__ = [
    "PluginInfo",
    "ServerTypeInfo",
    "collect_plugins",
    "server_type_info",
    "find_server_type",
    "check_registration",
]


@dataclass
class PluginInfo:
    """One line of ``gym plugin list``: a server type (or a plugin registering none) and its plugin."""

    name: str
    kind: str
    version: str | None = None
    description: str = ""
    source: str = ""  # a path relative to the workspace, a requirement, or "<dist> (installed)"
    source_type: str = ""  # "path", "requirement" or "installed"
    distribution: str | None = None  # the plugin package
    installed: bool = False  # importable by the Python running gym
    in_catalog: bool = False
    venv: str = "none"  # "built", "not built", or "none" (runs with the Python running gym)
    venv_path: str | None = None
    error: str | None = None
    options: list[dict[str, Any]] | None = None  # filled by collect_plugins(..., options=True)


@dataclass
class ServerTypeInfo:
    """What ``gym plugin show`` prints about a server type."""

    name: str
    kind: str
    description: str
    server: str
    needs_ray: bool
    entry_point: str  # the registering plugin's entry point name
    distribution: str | None  # the plugin package
    version: str | None
    options: list[dict[str, Any]] = field(default_factory=list)  # gym_core.options.OptionInfo, as dicts

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _options(server_type: ServerType) -> list[dict[str, Any]]:
    from gym_core.options import describe_options

    return [asdict(option) for option in describe_options(server_type.config)]


def _server_path(server: Any) -> str:
    return server if isinstance(server, str) else f"{server.__module__}:{server.__qualname__}"


def server_type_info(server_type: ServerType) -> ServerTypeInfo:
    """A server type registered in this process, described (its plugin package from its entry point)."""
    ep = next((ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name == server_type.provider), None)
    dist = ep.dist if ep is not None else None
    return ServerTypeInfo(
        name=server_type.name,
        kind=server_type.kind,
        description=server_type.description,
        server=_server_path(server_type.server),
        needs_ray=server_type.needs_ray,
        entry_point=server_type.provider,
        distribution=dist.name if dist else None,
        version=dist.version if dist else None,
        options=_options(server_type),
    )


def find_server_type(name: str, catalog: Catalog) -> ServerTypeInfo:
    """The server type called ``name``: registered here, else asked in the venv of its catalog entry.
    A :class:`GymError` saying what to do when it is unknown or its venv is not built."""
    manager = get_plugin_manager()
    servers = manager.servers()
    if name in servers:
        return server_type_info(servers[name])
    entry = catalog.entries.get(name)
    if entry is None:
        known = sorted({*servers, *catalog.entries})
        raise GymError(f"unknown server type {name!r}{did_you_mean(name, known)}; known: {', '.join(known) or 'none'}")
    venv = VenvManager(core_path=catalog.core_path).lookup(source_of_entry(entry))
    if venv is None:
        raise GymError(
            f"{name!r} is in the catalog but not installed here and its venv is not built: "
            f"run `gym plugin install {name}` first"
        )
    report = check_registration(venv.python, None)
    for server in report["servers"]:
        if server["name"] == name:
            return ServerTypeInfo(**server)
    raise GymError(
        f"the plugin of catalog entry {name!r} ({entry.source}) registers no server type {name!r} in its "
        f"venv (it registers: {', '.join(s['name'] for s in report['servers']) or 'nothing'})"
    )


# --- listing ---------------------------------------------------------------------------------------


def _hook_kind(ep: EntryPoint) -> str:
    """What a plugin registering no server type contributes, from the hooks its module implements."""
    try:
        module = ep.load()  # already imported by the plugin manager: no cost
    except Exception:  # noqa: BLE001 - reported as a load error elsewhere
        return "?"
    kinds = {"gym_register_commands": "commands", "gym_aggregate_metrics": "metrics"}
    return ", ".join(word for hook, word in kinds.items() if hasattr(module, hook)) or "-"


def _venv_version(path: Path, plugin_name: str) -> str | None:
    """The version of the distribution providing ``plugin_name`` in the venv at ``path``."""
    for site in sorted(path.glob("lib/python*/site-packages")):
        for dist in distributions(path=[str(site)]):
            if any(ep.group == ENTRY_POINT_GROUP and ep.name == plugin_name for ep in dist.entry_points):
                return dist.version
    return None


def _relative(path: Path, root: Path) -> str:
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)


def collect_plugins(catalog: Catalog, *, options: bool = False) -> list[PluginInfo]:
    """Every server type of the catalog and of the ``gym`` entry points installed here (and each
    installed plugin registering none), without importing anything but their light modules.
    ``options``: describe the options of the server types registered here."""
    manager = get_plugin_manager()
    servers = manager.servers()
    installed = {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}
    infos: dict[str, PluginInfo] = {}

    for server in servers.values():
        ep = installed.get(server.provider)
        dist = ep.dist if ep is not None else None
        infos[server.name] = PluginInfo(
            name=server.name,
            kind=server.kind,
            version=dist.version if dist else None,
            description=server.description,
            source=f"{dist.name} (installed)" if dist else "registered in process",
            source_type="installed",
            distribution=dist.name if dist else None,
            installed=True,
            options=_options(server) if options else None,
        )
    providers = {server.provider for server in servers.values()}
    for name, ep in installed.items():
        if name in providers or name in infos:
            continue
        dist = ep.dist
        info = PluginInfo(
            name=name,
            kind="?",
            version=dist.version if dist else None,
            source=f"{dist.name} (installed)" if dist else "",
            source_type="installed",
            distribution=dist.name if dist else None,
            installed=True,
        )
        if name in manager.load_errors:
            info.error = f"failed to import: {manager.load_errors[name]}"
        elif name not in manager.plugin_names:
            info.error = "disabled by $GYM_PLUGINS / $GYM_DISABLE_PLUGINS"
        else:
            info.kind = _hook_kind(ep)
        infos[name] = info

    venvs = VenvManager(core_path=catalog.core_path)
    for entry in catalog.entries.values():
        info = infos.get(entry.name) or PluginInfo(name=entry.name, kind=entry.kind or "?")
        info.in_catalog = True
        if entry.kind and info.kind in ("?", entry.kind):
            info.kind = entry.kind
        elif entry.kind and info.kind != entry.kind:
            info.error = f"the catalog says kind {entry.kind!r} but the plugin registers a {info.kind} server type"
        if entry.path is not None:
            info.source, info.source_type = _relative(entry.path, catalog.root), "path"
            try:
                project = project_table(entry.path)
                info.version, info.distribution = project.get("version"), project.get("name")
            except GymError as exc:
                info.error = str(exc)
        else:
            info.source, info.source_type = entry.requirement or "", "requirement"
        try:
            venv = venvs.lookup(source_of_entry(entry))
        except GymError as exc:
            info.venv, info.error = "?", info.error or str(exc)
        else:
            info.venv = "built" if venv is not None else "not built"
            if venv is not None:
                info.venv_path = str(venv.path)
                if info.version is None:
                    info.version = _venv_version(venv.path, entry.name)
        infos[entry.name] = info

    order = {kind: i for i, kind in enumerate(SERVER_KINDS)}
    return sorted(infos.values(), key=lambda i: (order.get(i.kind, len(order)), i.name))


# --- asking a venv -----------------------------------------------------------------------------------

# Runs with a venv's Python: loads the entry points the way every gym process does and prints what
# they registered (server types with their options). Its last line is the JSON answer.
CHECK_SCRIPT = r"""
import json
from dataclasses import asdict
from importlib.metadata import entry_points
from gym_core.options import describe_options
from gym_core.plugins import ENTRY_POINT_GROUP, PluginManager

eps = {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}
manager = PluginManager()
servers = []
for s in manager.servers().values():
    dist = eps[s.provider].dist if s.provider in eps else None
    server = s.server if isinstance(s.server, str) else f"{s.server.__module__}:{s.server.__qualname__}"
    servers.append({"name": s.name, "kind": s.kind, "description": s.description, "server": server,
                    "needs_ray": s.needs_ray, "entry_point": s.provider,
                    "distribution": dist.name if dist else None, "version": dist.version if dist else None,
                    "options": [asdict(o) for o in describe_options(s.config)]})
print("GYM-CHECK " + json.dumps({
    "entry_points": {name: ep.dist.name if ep.dist else None for name, ep in eps.items()},
    "servers": servers, "errors": manager.load_errors}, default=str))
"""


def check_registration(python: Path, distribution: str | None) -> dict[str, Any]:
    """What the plugins of the venv of ``python`` register through gym's hooks: ``servers`` (as
    :class:`ServerTypeInfo` fields), ``entry_points`` (name → distribution), ``distributions``
    (name → version) and ``errors`` (entry point → import error), all limited to ``distribution``'s
    when it is given."""
    env = {k: v for k, v in os.environ.items() if k not in ("GYM_PLUGINS", "GYM_DISABLE_PLUGINS")}
    try:
        proc = subprocess.run(
            [str(python), "-I", "-c", CHECK_SCRIPT],
            capture_output=True,
            text=True,
            env=env,
            cwd=python.parent,
            timeout=300,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise GymError(f"cannot load the plugin in its venv ({python}): {exc}") from exc
    answer = next((line for line in reversed(proc.stdout.splitlines()) if line.startswith("GYM-CHECK ")), None)
    if proc.returncode != 0 or answer is None:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise GymError(f"loading the plugin in its venv failed: {tail[0]}")
    report = json.loads(answer[len("GYM-CHECK ") :])
    wanted = normalize_name(distribution) if distribution else None
    ours = {
        name
        for name, dist in report["entry_points"].items()
        if wanted is None or (dist is not None and normalize_name(dist) == wanted)
    }
    servers = [s for s in report["servers"] if s["entry_point"] in ours]
    return {
        "entry_points": sorted(ours),
        "servers": servers,
        "distributions": {s["distribution"]: s["version"] for s in servers if s["distribution"]},
        "errors": {name: error for name, error in report["errors"].items() if name in ours},
    }
