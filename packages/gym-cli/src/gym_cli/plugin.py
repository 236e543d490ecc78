"""``gym plugin``: list the plugins gym knows, install one into its own environment, create a new one.

Listing never imports a plugin's heavy dependencies: versions come from package metadata and
pyproject files, kinds from the catalog and from the plugins' ``plugin`` modules, which import only
gym_core (a server class may be registered as a ``"module:Class"`` string).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from importlib.metadata import EntryPoint, distributions, entry_points
from pathlib import Path
from typing import Any, NoReturn

import click
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from gym_core.errors import GymError
from gym_core.plugins import ENTRY_POINT_GROUP, SERVER_KINDS, get_plugin_manager

from gym_cli._catalog import CATALOG_FILE, Catalog, CatalogEntry, find_catalog
from gym_cli._environments import EnvironmentManager, PluginSource, _read_pyproject

__all__ = ["plugin", "fail", "plugin_source", "source_of_directory"]

# Where `gym plugin new` puts a plugin of each kind inside a workspace.
KIND_DIRECTORIES = {"model": "plugins/models", "resources": "plugins/resources", "agent": "plugins/agents"}
TEMPLATE = ("templates", "plugin")
NAME_PATTERN = re.compile(r"[a-z][a-z0-9]*(?:[-_][a-z0-9]+)*")
REQUIREMENT_NAME = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def fail(message: str | Exception) -> NoReturn:
    """Print ``error: <message>`` on stderr and exit with status 1."""
    Console(stderr=True, highlight=False, soft_wrap=True).print(f"[bold red]error:[/] {escape(str(message))}")
    sys.exit(1)


@click.group()
def plugin() -> None:
    """List, install and create gym plugins.

    \b
    Examples:
      gym plugin list
      gym plugin install plugins/resources/my_env
      gym plugin new resources my-env
    """


# --- sources: where a plugin's package comes from ------------------------------------------------


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _plugin_name_of(distribution: str) -> str:
    """The conventional plugin name of a distribution: ``gym-my-env`` → ``my_env``."""
    name = _normalize(distribution)
    return (name[4:] if name.startswith("gym-") else name).replace("-", "_")


def _project(directory: Path) -> dict[str, Any]:
    try:
        return _read_pyproject(directory).get("project", {})
    except OSError as exc:
        raise GymError(f"cannot read {directory / 'pyproject.toml'}: {exc}") from exc
    except ValueError as exc:  # tomllib.TOMLDecodeError
        raise GymError(f"{directory / 'pyproject.toml'} is not valid TOML: {exc}") from exc


def source_of_directory(directory: Path) -> tuple[PluginSource, str]:
    """The source of the plugin package in ``directory`` and its distribution name.

    The plugin is named after its (first) entry point in group ``gym``; an error says how to fix a
    directory that is not a package or declares no such entry point.
    """
    directory = directory.expanduser().resolve()
    if not directory.is_dir():
        raise GymError(f"{directory} is not a directory: give a plugin package directory, a PyPI requirement or a catalog name")
    if not (directory / "pyproject.toml").is_file():
        raise GymError(f"{directory} has no pyproject.toml: a plugin is a Python package (create one with `gym plugin new`)")
    project = _project(directory)
    distribution = project.get("name") or directory.name
    names = list((project.get("entry-points") or {}).get(ENTRY_POINT_GROUP) or {})
    if not names:
        raise GymError(
            f"{directory / 'pyproject.toml'} declares no entry point in group {ENTRY_POINT_GROUP!r}: add "
            f'[project.entry-points.{ENTRY_POINT_GROUP}] {_plugin_name_of(distribution)} = "<module>.plugin"'
        )
    return PluginSource(name=names[0], path=directory), distribution


def plugin_source(entry: CatalogEntry) -> PluginSource:
    """The environment source of a catalog entry."""
    return PluginSource(name=entry.name, path=entry.path, requirement=entry.requirement)


def _looks_like_path(target: str) -> bool:
    return os.sep in target or target.startswith(".") or target.startswith("~") or Path(target).is_dir()


def _environment_manager(catalog: Catalog, console: Console | None = None) -> EnvironmentManager:
    log = (lambda line: console.print(f"[dim]{escape(line)}[/]")) if console is not None else None
    return EnvironmentManager(core_path=catalog.core_path, console=log)


# --- list ----------------------------------------------------------------------------------------


@dataclass
class PluginInfo:
    name: str
    kind: str
    version: str | None = None
    description: str = ""
    source: str = ""  # a path relative to the workspace, a requirement, or "<dist> (installed)"
    source_type: str = ""  # "path", "requirement" or "installed"
    distribution: str | None = None
    installed: bool = False  # importable in the environment running gym
    in_catalog: bool = False
    environment: str = "current"  # "built", "not built" or "current" (runs in gym's environment)
    environment_path: str | None = None
    error: str | None = None


def _hook_kind(ep: EntryPoint) -> str:
    """What a plugin registering no server contributes, from the hooks its module implements."""
    try:
        module = ep.load()  # already imported by the plugin manager: no cost
    except Exception:  # noqa: BLE001 - reported as a load error elsewhere
        return "?"
    kinds = {"gym_register_commands": "commands", "gym_aggregate_metrics": "metrics"}
    return ", ".join(word for hook, word in kinds.items() if hasattr(module, hook)) or "-"


def _env_version(path: Path, plugin_name: str) -> str | None:
    """The version of the distribution providing ``plugin_name`` in the environment at ``path``."""
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


def collect_plugins(catalog: Catalog) -> list[PluginInfo]:
    """Every plugin of the catalog and of the ``gym`` entry points installed here, without importing
    anything but their light ``plugin`` modules."""
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
        )
    providers = {server.provider for server in servers.values()}
    for name, ep in installed.items():
        if name in providers or name in infos:
            continue
        dist = ep.dist
        info = PluginInfo(
            name=name, kind="?", version=dist.version if dist else None, source=f"{dist.name} (installed)" if dist else "",
            source_type="installed", distribution=dist.name if dist else None, installed=True,
        )
        if name in manager.load_errors:
            info.error = f"failed to import: {manager.load_errors[name]}"
        elif name not in manager.plugin_names:
            info.error = "disabled by $GYM_PLUGINS / $GYM_DISABLE_PLUGINS"
        else:
            info.kind = _hook_kind(ep)
        infos[name] = info

    environments = _environment_manager(catalog)
    for entry in catalog.entries.values():
        info = infos.get(entry.name) or PluginInfo(name=entry.name, kind=entry.kind or "?")
        info.in_catalog = True
        if entry.kind and info.kind in ("?", entry.kind):
            info.kind = entry.kind
        elif entry.kind and info.kind != entry.kind:
            info.error = f"the catalog says kind {entry.kind!r} but the plugin registers a {info.kind} server"
        source = plugin_source(entry)
        if entry.path is not None:
            info.source, info.source_type = _relative(entry.path, catalog.root), "path"
            try:
                project = _project(entry.path)
                info.version, info.distribution = project.get("version"), project.get("name")
            except GymError as exc:
                info.error = str(exc)
        else:
            info.source, info.source_type = entry.requirement or "", "requirement"
        try:
            env = environments.lookup(source)
        except GymError as exc:
            info.environment, info.error = "?", info.error or str(exc)
        else:
            info.environment = "built" if env is not None else "not built"
            if env is not None:
                info.environment_path = str(env.path)
                if info.version is None:
                    info.version = _env_version(env.path, entry.name)
        infos[entry.name] = info

    order = {kind: i for i, kind in enumerate(SERVER_KINDS)}
    return sorted(infos.values(), key=lambda i: (order.get(i.kind, len(order)), i.name))


@plugin.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def list_plugins(as_json: bool) -> None:
    """List every plugin gym knows: the catalog (workspace.toml) and the installed `gym` entry points.

    For each: its kind, version, where it comes from, and whether its isolated environment is built.
    Nothing heavy is imported: listing is safe with plugins that need a GPU.

    \b
    Example:
      gym plugin list
      gym plugin list --json | jq '.[] | select(.kind == "resources") | .name'
    """
    try:
        infos = collect_plugins(find_catalog())
    except GymError as exc:
        fail(exc)
    if as_json:
        click.echo(json.dumps([asdict(info) for info in infos], indent=2))
        return
    console = Console()
    rows = [(i.name, i.kind, i.version or "?", i.source, i.environment) for i in infos]
    headers = ("plugin", "kind", "version", "source", "environment")
    table = Table(title="gym plugins", title_justify="left", box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for header in headers:
        table.add_column(header, no_wrap=True)
    # Descriptions take the width left; the other columns are never cut.
    widths = [max(len(header), *(len(row[i]) for row in rows)) for i, header in enumerate(headers)]
    room = console.width - sum(widths) - 3 * len(widths)
    if room >= 16:
        table.add_column("description", no_wrap=True, overflow="ellipsis", max_width=room)
    env_styles = {"built": "green", "not built": "yellow"}
    for info, row in zip(infos, rows):
        note = Text(info.error, style="red") if info.error else Text(info.description)
        cells = [*map(escape, row[:4]), f"[{env_styles.get(info.environment, 'dim')}]{row[4]}[/]", note]
        table.add_row(*cells[: len(table.columns)])
    console.print(table)
    for info in infos:
        if info.error:
            Console(stderr=True).print(f"[yellow]warning:[/] {info.name}: {escape(info.error)}", highlight=False)


# --- install -------------------------------------------------------------------------------------

# Runs in the plugin's environment: loads the entry points the way every gym process does and
# prints what the distribution registered. Its last line is the JSON answer.
CHECK_SCRIPT = r"""
import json, re, sys
from importlib.metadata import entry_points
from gym_core.plugins import ENTRY_POINT_GROUP, PluginManager

def norm(name):
    return re.sub(r"[-_.]+", "-", name).lower()

wanted = norm(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1] else None
ours = {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)
        if wanted is None or (ep.dist is not None and norm(ep.dist.name) == wanted)}
manager = PluginManager()
servers = [{"name": s.name, "kind": s.kind, "description": s.description, "provider": s.provider}
           for s in manager.servers().values() if s.provider in ours]
dists = {ep.dist.name: ep.dist.version for ep in ours.values() if ep.dist is not None}
print("GYM-CHECK " + json.dumps({"entry_points": sorted(ours), "servers": servers, "distributions": dists,
                                  "errors": {n: e for n, e in manager.load_errors.items() if n in ours}}))
"""


def check_registration(python: Path, distribution: str | None) -> dict[str, Any]:
    """What ``distribution`` registers through gym's hooks when loaded by ``python`` (its environment)."""
    env = {k: v for k, v in os.environ.items() if k not in ("GYM_PLUGINS", "GYM_DISABLE_PLUGINS")}
    try:
        proc = subprocess.run(
            [str(python), "-I", "-c", CHECK_SCRIPT, distribution or ""],
            capture_output=True, text=True, env=env, cwd=python.parent, timeout=300,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise GymError(f"cannot load the plugin in its environment ({python}): {exc}") from exc
    answer = next((line for line in reversed(proc.stdout.splitlines()) if line.startswith("GYM-CHECK ")), None)
    if proc.returncode != 0 or answer is None:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise GymError(f"loading the plugin in its environment failed: {tail[0]}")
    return json.loads(answer[len("GYM-CHECK "):])


def _resolve_install_target(target: str, catalog: Catalog) -> tuple[PluginSource, str | None]:
    """The source to install for TARGET and its distribution name (None when unknown)."""
    if target in catalog.entries and not _looks_like_path(target):
        entry = catalog.entries[target]
        if entry.path is not None:
            return plugin_source(entry), _project(entry.path).get("name")
        match = REQUIREMENT_NAME.match(entry.requirement or "")
        return plugin_source(entry), match.group(1) if match else None
    if _looks_like_path(target):
        return source_of_directory(Path(target))
    match = REQUIREMENT_NAME.match(target)
    if not match or "://" in target:
        raise GymError(
            f"{target!r} is neither a directory, a catalog name nor a PyPI requirement (like gym-my-env>=0.1)"
            f"; catalog: {', '.join(sorted(catalog.entries)) or 'empty'}"
        )
    distribution = match.group(1)
    return PluginSource(name=_plugin_name_of(distribution), requirement=target.strip()), distribution


@plugin.command()
@click.argument("target", metavar="NAME|PATH|REQUIREMENT")
@click.option("--kind", type=click.Choice(SERVER_KINDS), help="Record only the servers of this kind (an error if none).")
@click.option("--rebuild", is_flag=True, help="Delete the plugin's environment first and build it anew.")
def install(target: str, kind: str | None, rebuild: bool) -> None:
    """Install a plugin into its own environment and record it in the catalog (workspace.toml).

    The argument is a plugin package directory, a PyPI requirement, or the name of a catalog entry
    (to build its environment again). gym builds the isolated environment, loads the plugin there
    through its entry points, and records each server it registers with its kind.

    \b
    Examples:
      gym plugin install plugins/resources/my_env
      gym plugin install "gym-my-env>=0.2"
      gym plugin install counter --rebuild
    """
    console = Console(stderr=True, highlight=False, soft_wrap=True)
    catalog = find_catalog()
    if catalog.file is None:
        fail(f"no {CATALOG_FILE} here or above: run inside a gym workspace, or set $GYM_WORKSPACE to one")
    try:
        source, distribution = _resolve_install_target(target, catalog)
        environments = _environment_manager(catalog, console)
        if rebuild:
            environments.remove(source.name)
        started = time.monotonic()
        env = environments.ensure(source)
        seconds = time.monotonic() - started
        report = check_registration(env.python, distribution)
    except GymError as exc:
        fail(exc)
    what = distribution or source.describe()
    if report["errors"]:
        name, error = next(iter(report["errors"].items()))
        fail(f"{what}: its plugin module {name!r} fails to import in its environment: {error}")
    servers = report["servers"]
    if not servers:
        fail(
            f"{what} registers no server through gym's hooks (entry points found: "
            f"{', '.join(report['entry_points']) or 'none'}); its plugin module needs a "
            f"`@hookimpl def gym_register_servers(register)` that calls register(name=..., kind=..., server=...)"
        )
    if kind is not None:
        registered = ", ".join(f"{s['name']} ({s['kind']})" for s in servers)
        servers = [s for s in servers if s["kind"] == kind]
        if not servers:
            fail(f"{what} registers no {kind} server (it registers: {registered})")

    for server in servers:
        previous = catalog.entries.get(server["name"])
        recorded = catalog.add(server["name"], kind=server["kind"], path=source.path, requirement=source.requirement)
        if previous is not None and previous.source != recorded.source:
            console.print(f"[yellow]replaced[/] the catalog entry {server['name']} (was {escape(previous.source)})")
        if server["name"] != source.name:
            # `gym run` finds environments by plugin name: build the one it will look for.
            try:
                environments.ensure(PluginSource(name=server["name"], path=source.path, requirement=source.requirement))
            except GymError as exc:
                fail(exc)
    if source.name not in catalog.entries:
        environments.remove(source.name)

    versions = ", ".join(f"{name} {version}" for name, version in report["distributions"].items())
    how = "reused" if env.reused else f"built in {seconds:.1f} s"
    console.print(f"[bold green]installed[/] {escape(versions or what)} (environment {how})")
    for server in servers:
        console.print(f"  {server['name']} ({server['kind']}): {escape(server['description'] or '-')}")
    console.print(f"recorded in {catalog.file}; next: [bold]gym test {servers[0]['name']}[/]")


# --- new -----------------------------------------------------------------------------------------


def _template_dir() -> Path:
    return Path(__file__).resolve().parent.joinpath(*TEMPLATE)


def _plugin_name(name: str) -> str:
    """NAME as typed (hyphens or underscores, with or without a ``gym-`` prefix) → plugin name."""
    cleaned = name.strip().lower()
    for prefix in ("gym-", "gym_"):
        if cleaned.startswith(prefix):
            cleaned = cleaned[len(prefix):]
    if not NAME_PATTERN.fullmatch(cleaned):
        raise GymError(
            f"{name!r} is not a valid plugin name: use lowercase letters and digits separated by '-' or '_',"
            " starting with a letter (e.g. my-env)"
        )
    return cleaned.replace("-", "_")


def render_template(kind: str, name: str, directory: Path, description: str | None = None) -> dict[str, Any]:
    """Render the plugin template for ``kind``/``name`` into ``directory`` (which must not exist).

    Returns the template's context (``__module_name``, ``__distribution_name``...).
    """
    from importlib.metadata import PackageNotFoundError, version

    from cookiecutter.exceptions import CookiecutterException
    from cookiecutter.generate import generate_context, generate_files
    from cookiecutter.prompt import prompt_for_config

    template = _template_dir()
    try:
        core_version = version("gym-core")
    except PackageNotFoundError:
        core_version = "0.1.0"
    extra = {"kind": kind, "name": name, "directory": directory.name, "gym_core_version": core_version}
    if description:
        extra["description"] = description
    # The library calls, not cookiecutter(): no prompts, no user config, no replay file in $HOME.
    try:
        context = generate_context(context_file=str(template / "cookiecutter.json"), extra_context=extra)
        context["cookiecutter"] = dict(prompt_for_config(context, no_input=True))
        directory.parent.mkdir(parents=True, exist_ok=True)
        generate_files(repo_dir=str(template), context=context, output_dir=str(directory.parent))
    except CookiecutterException as exc:
        raise GymError(f"cannot render the plugin template: {exc}") from exc
    return context["cookiecutter"]


@plugin.command()
@click.argument("kind", type=click.Choice(SERVER_KINDS))
@click.argument("name")
@click.option("--output-dir", type=click.Path(path_type=Path), metavar="DIR",
              help="The new package's directory [default: plugins/<kind>s/<name> in a workspace, else ./<name>].")
@click.option("--description", help="One line saying what the plugin does (pyproject, README, registration).")
def new(kind: str, name: str, output_dir: Path | None, description: str | None) -> None:
    """Create a plugin package of KIND (model, resources or agent) called NAME from gym's template.

    The package is ready to run: a working server of that kind, its hook registration, a config
    using it with gym's first-party plugins, tests that start real servers, and a README. NAME may
    use hyphens or underscores: `my-env` gives the distribution gym-my-env, the module gym_my_env
    and the plugin my_env.

    \b
    Example:
      gym plugin new resources my-env
      gym plugin install plugins/resources/my_env && gym test my_env
    """
    console = Console(stderr=True, highlight=False, soft_wrap=True)
    try:
        plugin_name = _plugin_name(name)
        if description is not None and re.search(r'["\\\n]', description):
            raise GymError("--description must be one line without double quotes or backslashes")
        catalog = find_catalog()
        if plugin_name in catalog.entries:
            raise GymError(f"the catalog already has a plugin named {plugin_name!r} "
                           f"({catalog.entries[plugin_name].source}): choose another name")
        if any(ep.name == plugin_name for ep in entry_points(group=ENTRY_POINT_GROUP)):
            raise GymError(f"an installed package already provides the plugin {plugin_name!r}: choose another name")
        if output_dir is None:
            in_workspace = catalog.file is not None and catalog.file.is_file()
            base = catalog.root / KIND_DIRECTORIES[kind] if in_workspace else Path.cwd()
            output_dir = base / plugin_name
        output_dir = output_dir.expanduser().absolute()
        if output_dir.exists():
            raise GymError(f"{output_dir} already exists: choose another --output-dir, or remove it first")
        context = render_template(kind, plugin_name, output_dir, description)
    except GymError as exc:
        fail(exc)
    shown = _relative(output_dir, Path.cwd().absolute())
    shown = shown if os.sep in shown else f".{os.sep}{shown}"
    console.print(f"[bold green]created[/] {context['__distribution_name']} ({kind} plugin {plugin_name}) in {shown}")
    for path in sorted(p for p in output_dir.rglob("*") if p.is_file()):
        console.print(f"  {path.relative_to(output_dir)}", markup=False)
    console.print("next: build its environment and record it in the catalog, then run its tests:")
    console.print(f"  gym plugin install {shown}", markup=False)
    console.print(f"  gym test {plugin_name}", markup=False)
