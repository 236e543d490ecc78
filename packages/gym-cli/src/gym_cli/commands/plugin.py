"""``gym plugin``: list the plugins gym knows and their server types, show one server type's options,
install a plugin into its own venv, create a new plugin (:mod:`gym_cli.commands.plugin_new`).

Listing and showing never import a server module or a plugin's heavy dependencies
(:mod:`gym_cli.inventory`).
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import click
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from gym_core.errors import GymError
from gym_core.plugins import SERVER_KINDS

from gym_cli.catalog import CATALOG_FILE, Catalog, find_catalog
from gym_cli.commands.plugin_new import new
from gym_cli.sources import (
    PluginSource,
    looks_like_path,
    plugin_name_of,
    project_table,
    requirement_name,
    source_of_directory,
    source_of_entry,
)

__all__ = ["plugin"]


@click.group()
def plugin() -> None:
    """List, show, install and create gym plugins.

    A plugin is an installable package; it registers one or more server types (a model, a
    resources server with its data (an RL environment), or an agent), which configs name with
    `plugin: <server type>`.

    \b
    Examples:
      gym plugin list
      gym plugin show math
      gym plugin install plugins/resources/my_env
      gym plugin new resources my-env
    """


plugin.add_command(new)


# --- list and show -------------------------------------------------------------------------------


def _default(option: dict[str, Any], width: int = 24) -> str:
    if option["required"]:
        return "required"
    text = json.dumps(option["default"])
    return text if len(text) <= width else text[: width - 1] + "…"  # nested structs: their own defaults


def options_table(options: list[dict[str, Any]], title: str | None = None, *, inherited: bool = True) -> Table:
    """A server type's options: name, type, default and description; ``inherited``: with those every
    server has (``host``, ``port``...), after its own."""
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    table.add_column("option", no_wrap=True)
    table.add_column("type", overflow="fold", max_width=24)
    table.add_column("default", overflow="fold", max_width=24)
    table.add_column("description", overflow="fold", ratio=1)
    rows = sorted((o for o in options if inherited or not o["inherited"]), key=lambda o: o["inherited"])
    for option in rows:
        style = "dim" if option["inherited"] else ""
        table.add_row(Text(option["name"], style), Text(option["type"], style), Text(_default(option), style),
                      Text(option["description"], style))
    return table


@plugin.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.option("-v", "--verbose", is_flag=True, help="Also each server type's own options (type, default, description).")
def list_plugins(as_json: bool, verbose: bool) -> None:
    """List every server type gym knows, by plugin: the catalog (workspace.toml) and the installed
    `gym` entry points.

    For each: its kind, its plugin's version and source, and whether the plugin's venv is built.
    Nothing heavy is imported: listing is safe with plugins that need a GPU.

    \b
    Example:
      gym plugin list
      gym plugin list --verbose
      gym plugin list --json | jq '.[] | select(.kind == "resources") | .name'
    """
    from gym_cli.inventory import collect_plugins

    infos = collect_plugins(find_catalog(), options=verbose)
    if as_json:
        click.echo(json.dumps([{k: v for k, v in asdict(info).items() if verbose or k != "options"} for info in infos],
                              indent=2, default=str))
        return
    console = Console()
    rows = [(i.name, i.kind, i.version or "?", i.source, i.venv) for i in infos]
    headers = ("server type", "kind", "version", "source", "venv")
    table = Table(title="gym plugins", title_justify="left", box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for header in headers:
        table.add_column(header, no_wrap=True)
    # Descriptions take the width left; the other columns are never cut.
    widths = [max(len(header), *(len(row[i]) for row in rows)) for i, header in enumerate(headers)]
    room = console.width - sum(widths) - 3 * len(widths)
    if room >= 16:
        table.add_column("description", no_wrap=True, overflow="ellipsis", max_width=room)
    venv_styles = {"built": "green", "not built": "yellow"}
    for info, row in zip(infos, rows):
        note = Text(info.error, style="red") if info.error else Text(info.description)
        cells = [*map(escape, row[:4]), f"[{venv_styles.get(info.venv, 'dim')}]{row[4]}[/]", note]
        table.add_row(*cells[: len(table.columns)])
    console.print(table)
    if verbose:
        for info in infos:
            if info.options is None:
                continue
            console.print()
            if any(not option["inherited"] for option in info.options):
                console.print(options_table(info.options, f"{info.name} ({info.kind}): its own options", inherited=False))
            else:
                console.print(f"{info.name} ({info.kind}): no options of its own")
        console.print("\nEvery server type also accepts the common options: see `gym plugin show NAME`.")
    for info in infos:
        if info.error:
            Console(stderr=True).print(f"[yellow]warning:[/] {info.name}: {escape(info.error)}", highlight=False)


@plugin.command()
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
def show(name: str, as_json: bool) -> None:
    """Show a server type: its kind, plugin and version, description, and every option with its
    type, default and description (the options a config may set under `plugin: NAME`).

    \b
    Examples:
      gym plugin show math
      gym plugin show simple_agent --json
    """
    from gym_cli.inventory import find_server_type

    info = find_server_type(name, find_catalog())
    if as_json:
        click.echo(json.dumps(info.to_dict(), indent=2, default=str))
        return
    console = Console(highlight=False)
    console.print(f"[bold]{escape(info.name)}[/] ({info.kind} server type)")
    plugin_text = f"{info.distribution or '?'} {info.version or ''}".strip()
    for label, value in (("plugin", f"{plugin_text} (entry point {info.entry_point})"),
                         ("description", info.description or "-"),
                         ("server", info.server + ("; needs Ray" if info.needs_ray else ""))):
        console.print(f"  {label + ':':<13}{escape(value)}")
    console.print()
    console.print(options_table(info.options, "options (dim: common to every server)"))


# --- install -------------------------------------------------------------------------------------


def _resolve_install_target(target: str, catalog: Catalog) -> tuple[PluginSource, str | None]:
    """The source to install for TARGET and its distribution name (None when unknown)."""
    if target in catalog.entries and not looks_like_path(target):
        entry = catalog.entries[target]
        if entry.path is not None:
            return source_of_entry(entry), project_table(entry.path).get("name")
        return source_of_entry(entry), requirement_name(entry.requirement or "")
    if looks_like_path(target):
        return source_of_directory(Path(target))
    distribution = requirement_name(target)
    if distribution is None or "://" in target:
        raise GymError(
            f"{target!r} is neither a directory, a catalog name nor a PyPI requirement (like gym-my-env>=0.1)"
            f"; catalog: {', '.join(sorted(catalog.entries)) or 'empty'}"
        )
    return PluginSource(name=plugin_name_of(distribution), requirement=target.strip()), distribution


@plugin.command()
@click.argument("target", metavar="NAME|PATH|REQUIREMENT")
@click.option("--kind", type=click.Choice(SERVER_KINDS), help="Record only the server types of this kind (an error if none).")
@click.option("--rebuild", is_flag=True, help="Delete the plugin's venv first and build it anew.")
def install(target: str, kind: str | None, rebuild: bool) -> None:
    """Install a plugin into its own venv and record its server types in the catalog (workspace.toml).

    The argument is a plugin package directory, a PyPI requirement, or the name of a catalog entry
    (to build its venv again). gym builds the venv, loads the plugin there through its entry points,
    and records each server type it registers with its kind.

    \b
    Examples:
      gym plugin install plugins/resources/my_env
      gym plugin install "gym-my-env>=0.2"
      gym plugin install counter --rebuild
    """
    from gym_cli.inventory import check_registration
    from gym_cli.venvs import VenvManager

    console = Console(stderr=True, highlight=False, soft_wrap=True)
    catalog = find_catalog()
    if catalog.file is None:
        raise GymError(f"no {CATALOG_FILE} here or above: run inside a gym workspace, or set $GYM_WORKSPACE to one")
    source, distribution = _resolve_install_target(target, catalog)
    venvs = VenvManager(core_path=catalog.core_path, console=lambda line: console.print(f"[dim]{escape(line)}[/]"))
    if rebuild:
        venvs.remove(source.name)
    started = time.monotonic()
    venv = venvs.ensure(source)
    seconds = time.monotonic() - started
    report = check_registration(venv.python, distribution)
    what = distribution or source.describe()
    if report["errors"]:
        name, error = next(iter(report["errors"].items()))
        raise GymError(f"{what}: its plugin module {name!r} fails to import in its venv: {error}")
    servers = report["servers"]
    if not servers:
        raise GymError(
            f"{what} registers no server type through gym's hooks (entry points found: "
            f"{', '.join(report['entry_points']) or 'none'}); its plugin module needs a "
            f"`@hookimpl def gym_register_servers(register)` that calls register(name=..., kind=..., server=...)"
        )
    if kind is not None:
        registered = ", ".join(f"{s['name']} ({s['kind']})" for s in servers)
        servers = [s for s in servers if s["kind"] == kind]
        if not servers:
            raise GymError(f"{what} registers no {kind} server type (it registers: {registered})")

    for server in servers:
        previous = catalog.entries.get(server["name"])
        recorded = catalog.add(server["name"], kind=server["kind"], path=source.path, requirement=source.requirement)
        if previous is not None and previous.source != recorded.source:
            console.print(f"[yellow]replaced[/] the catalog entry {server['name']} (was {escape(previous.source)})")
        if server["name"] != source.name:
            # `gym run` finds venvs by server type name: build the one it will look for.
            venvs.ensure(PluginSource(name=server["name"], path=source.path, requirement=source.requirement))
    if source.name not in catalog.entries:
        venvs.remove(source.name)

    versions = ", ".join(f"{name} {version}" for name, version in report["distributions"].items())
    how = "reused" if venv.reused else f"built in {seconds:.1f} s"
    console.print(f"[bold green]installed[/] {escape(versions or what)} (venv {how})")
    for server in servers:
        console.print(f"  {server['name']} ({server['kind']}): {escape(server['description'] or '-')}")
    console.print(f"recorded in {catalog.file}; next: [bold]gym test {servers[0]['name']}[/]")
