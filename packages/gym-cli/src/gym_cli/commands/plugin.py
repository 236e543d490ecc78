"""``gym plugin``: list the plugins gym knows and their server types, show one server type's options,
install a plugin into its own venv (with the plugins its example configs use, from the same package
files), build plugins' sdists and wheels to publish (checked by :mod:`gym_cli.distributions`), copy a
plugin's example data and configs out (:mod:`gym_cli.plugin_examples`), create a new plugin
(:mod:`gym_cli.commands.plugin_new`).

Listing and showing never import a server module or a plugin's heavy dependencies
(:mod:`gym_cli.inventory`).
"""

from __future__ import annotations

import dataclasses
import json
import time
import urllib.parse
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from gym_core.errors import GymError
from gym_core.plugins import SERVER_KINDS

from gym_cli.commands.plugin_new import new

if TYPE_CHECKING:
    from rich.table import Table

    from gym_cli.catalog import Catalog
    from gym_cli.sources import PluginSource
    from gym_cli.venvs import VenvManager

# rich, the catalog (tomlkit) and the plugin sources are imported by the commands that use them, not
# here: `gym --help` imports every command module and should stay well under half a second.

__all__ = ["plugin"]


@click.group()
def plugin() -> None:
    """List, show, install, build, document and create gym plugins, and copy out their examples.

    A plugin is an installable package; it registers one or more server types (a model, a
    resources server with its data (an RL environment), or an agent), which configs name with
    `plugin: <server type>`.

    \b
    Examples:
      gym plugin list
      gym plugin show math
      gym plugin install plugins/resources/my_env
      gym plugin install gym-my-env --find-links dist
      gym plugin build my_env --out dist
      gym plugin build --all --out dist
      gym plugin examples counter
      gym plugin docs my_env
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
    from rich import box
    from rich.table import Table
    from rich.text import Text

    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    table.add_column("option", no_wrap=True)
    table.add_column("type", overflow="fold", max_width=24)
    table.add_column("default", overflow="fold", max_width=24)
    table.add_column("description", overflow="fold", ratio=1)
    rows = sorted((o for o in options if inherited or not o["inherited"]), key=lambda o: o["inherited"])
    for option in rows:
        style = "dim" if option["inherited"] else ""
        table.add_row(
            Text(option["name"], style),
            Text(option["type"], style),
            Text(_default(option), style),
            Text(option["description"], style),
        )
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
    from rich import box
    from rich.markup import escape
    from rich.table import Table
    from rich.text import Text

    from gym_cli.catalog import find_catalog
    from gym_cli.consoles import output_console
    from gym_cli.inventory import collect_plugins

    infos = collect_plugins(find_catalog(), options=verbose)
    if as_json:
        click.echo(
            json.dumps(
                [{k: v for k, v in asdict(info).items() if verbose or k != "options"} for info in infos],
                indent=2,
                default=str,
            )
        )
        return
    console = output_console()
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
                console.print(
                    options_table(info.options, f"{info.name} ({info.kind}): its own options", inherited=False)
                )
            else:
                console.print(f"{info.name} ({info.kind}): no options of its own")
        console.print("\nEvery server type also accepts the common options: see `gym plugin show NAME`.")
    for info in infos:
        if info.error:
            output_console(stderr=True).print(f"[yellow]warning:[/] {info.name}: {escape(info.error)}", highlight=False)


@plugin.command()
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
@click.option(
    "--markdown", is_flag=True, help="Print its own options as a Markdown table: what its README's `## Options` holds."
)
def show(name: str, as_json: bool, markdown: bool) -> None:
    """Show a server type: its kind, plugin and version, description, and every option with its
    type, default and description (the options a config may set under `plugin: NAME`).

    \b
    Examples:
      gym plugin show math
      gym plugin show simple_agent --json
      gym plugin show math --markdown     # the table `gym plugin docs` writes into its README
    """
    from rich.markup import escape

    from gym_cli.catalog import find_catalog
    from gym_cli.consoles import output_console
    from gym_cli.inventory import find_server_type

    if as_json and markdown:
        raise click.UsageError("--json and --markdown exclude each other")
    info = find_server_type(name, find_catalog())
    if as_json:
        click.echo(json.dumps(info.to_dict(), indent=2, default=str))
        return
    if markdown:
        from gym_cli.plugin_docs import options_markdown

        click.echo(options_markdown(info.options), nl=False)
        return
    console = output_console(highlight=False)
    console.print(f"[bold]{escape(info.name)}[/] ({info.kind} server type)")
    plugin_text = f"{info.distribution or '?'} {info.version or ''}".strip()
    for label, value in (
        ("plugin", f"{plugin_text} (entry point {info.entry_point})"),
        ("description", info.description or "-"),
        ("server", info.server + ("; needs Ray" if info.needs_ray else "")),
    ):
        console.print(f"  {label + ':':<13}{escape(value)}")
    console.print()
    console.print(options_table(info.options, "options (dim: common to every server)"))


# --- docs ----------------------------------------------------------------------------------------


def _package_directories(targets: tuple[str, ...], catalog: Catalog) -> list[Path]:
    """The package directories of TARGETS (catalog names or directories); none given: every catalog
    plugin whose source is a directory."""
    from gym_cli.sources import looks_like_path, source_of_directory

    if not targets:
        directories = [entry.path for entry in catalog.entries.values() if entry.path is not None]
        if not directories:
            raise GymError("the catalog (workspace.toml) lists no plugin package directory: name one")
        return list(dict.fromkeys(directories))
    directories = []
    for target in targets:
        entry = catalog.entries.get(target)
        if entry is not None and not looks_like_path(target):
            if entry.path is None:
                raise GymError(
                    f"catalog entry {target!r} is installed from {entry.requirement}, not from a package "
                    "directory: its sources are not here"
                )
            directories.append(entry.path)
        elif looks_like_path(target):
            directories.append(source_of_directory(Path(target))[0].path)
        else:
            raise GymError(
                f"{target!r} is neither a catalog name nor a package directory; catalog: "
                f"{', '.join(sorted(catalog.entries)) or 'empty'}"
            )
    return list(dict.fromkeys(directories))


@plugin.command()
@click.argument("targets", nargs=-1, metavar="[NAME|PATH]...")
@click.option(
    "--check", is_flag=True, help="Change nothing: report what is out of date or missing (exit status 1 if any)."
)
def docs(targets: tuple[str, ...], check: bool) -> None:
    """Regenerate the Options tables in plugin READMEs and check what a plugin README must have.

    For each plugin package (default: every catalog plugin with a package directory), the table of
    each server type it registers, generated from its config struct's descriptions (what `gym plugin
    show NAME --markdown` prints), is written between its marker comments in the README's
    `## Options` section. Then the checks `gym test` and `gym plugin build` make are reported: the
    sections of its kind under their fixed headings, in order (see CONTRIBUTING.md), and an
    environment's data/example.jsonl. Exit status 1 when something is left to fix by hand.

    \b
    Examples:
      gym plugin docs                        # every plugin of the workspace
      gym plugin docs math plugins/resources/my_env
      gym plugin docs --check                # what the docs tests check
    """
    from rich.markup import escape

    from gym_cli.catalog import find_catalog
    from gym_cli.consoles import output_console
    from gym_cli.exits import CommandFailed
    from gym_cli.plugin_docs import check_package, describe_packages, shown_path, write_package

    console = output_console(stderr=True, highlight=False, soft_wrap=True)
    catalog = find_catalog()
    packages = describe_packages(_package_directories(targets, catalog))
    failing = 0
    for package in packages:
        shown = shown_path(package.directory, catalog.root)
        if not check and package.error is None and write_package(package):
            console.print(f"[green]updated[/] {escape(shown)}/README.md")
        problems, notes = check_package(package, shown=shown)
        for note in notes:
            console.print(f"[yellow]note:[/] {escape(shown)}: {escape(note)}")
        for problem in problems:
            console.print(f"[red]{escape(shown)}:[/] {escape(problem)}")
        failing += bool(problems)
    if failing:
        raise CommandFailed(f"{failing} of {len(packages)} plugin packages have README or data problems")
    console.print(f"[bold green]ok[/]: the READMEs and example data of {len(packages)} plugin packages are current")


# --- install -------------------------------------------------------------------------------------


def _resolve_install_target(target: str, catalog: Catalog) -> tuple[PluginSource, str | None]:
    """The source to install for TARGET and its distribution name (None when unknown)."""
    from gym_cli.sources import (
        PluginSource,
        looks_like_path,
        plugin_name_of,
        project_table,
        requirement_name,
        source_of_directory,
        source_of_entry,
    )

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


def _url(url: str, option: str) -> str:
    """``url`` when it carries no credentials: it is recorded in the catalog and in build logs."""
    parsed = urllib.parse.urlparse(url)
    if parsed.scheme not in ("http", "https", "file"):
        raise GymError(f"{option} {url}: give an http(s):// or file:// URL")
    if parsed.username or parsed.password:
        raise GymError(
            f"{option}: the URL holds credentials, which gym would record in the catalog and its logs; "
            "give them to uv instead (~/.netrc, or UV_INDEX_<NAME>_USERNAME/_PASSWORD)"
        )
    return url


def _find_link(link: str) -> str:
    """A ``--find-links`` value as recorded: a URL as given, a directory as an absolute path."""
    if "://" in link:
        return _url(link, "--find-links")
    directory = Path(link).expanduser()
    if not directory.is_dir():
        raise GymError(
            f"--find-links {link}: no such directory (give a directory of wheels and sdists, "
            "like the --out of `gym plugin build`, or a URL)"
        )
    return str(directory.resolve())


@plugin.command()
@click.argument("target", metavar="NAME|PATH|REQUIREMENT")
@click.option(
    "--kind", type=click.Choice(SERVER_KINDS), help="Record only the server types of this kind (an error if none)."
)
@click.option("--rebuild", is_flag=True, help="Delete the plugin's venv first and build it anew.")
@click.option(
    "--find-links",
    "find_links",
    multiple=True,
    metavar="DIR|URL",
    help="Also look for the requirement and its dependencies here: a directory of wheels and sdists "
    "(`gym plugin build --out`) or a URL. Repeatable; recorded for later builds of its venv.",
)
@click.option("--index-url", metavar="URL", help="Look up the requirement on this package index instead of PyPI.")
def install(target: str, kind: str | None, rebuild: bool, find_links: tuple[str, ...], index_url: str | None) -> None:
    """Install a plugin into its own venv and record its server types in the catalog (workspace.toml).

    The argument is a plugin package directory, a requirement (from PyPI, another index with
    --index-url, or package files with --find-links), or the name of a catalog entry (to build its
    venv again). gym builds the venv, loads the plugin there through its entry points, and records
    each server type it registers with its kind. Outside a workspace the catalog is
    $GYM_HOME/workspace.toml, which `gym run` and `gym test` then use anywhere outside a workspace.

    The server types an environment's example configs use (the `plugin:` keys of its configs/*.yaml:
    its agent and model) that no plugin of the catalog registers are installed too, from the wheels
    in the --find-links directories that register them; those found nowhere are named, with the
    packages to install. `gym plugin examples NAME` then copies its data and configs out.

    \b
    Examples:
      gym plugin install plugins/resources/my_env
      gym plugin install "gym-my-env>=0.2"
      gym plugin install gym-my-env --find-links ./dist
      gym plugin install gym-my-env --index-url https://my.index/simple
      gym plugin install counter --rebuild
    """
    from rich.markup import escape

    from gym_cli.catalog import Catalog, find_catalog, user_catalog_file
    from gym_cli.consoles import output_console
    from gym_cli.plugin_examples import wheels_registering
    from gym_cli.sources import plugin_name_of
    from gym_cli.venvs import VenvManager

    console = output_console(stderr=True, highlight=False, soft_wrap=True)
    catalog = find_catalog()
    if catalog.file is None:
        catalog = Catalog(user_catalog_file())  # created by the first entry added
    source, distribution = _resolve_install_target(target, catalog)
    if find_links or index_url:
        if source.requirement is None or target in catalog.entries:
            raise GymError(f"--find-links and --index-url apply to a requirement (like gym-my-env), not to {target!r}")
        source = dataclasses.replace(
            source,
            find_links=tuple(_find_link(link) for link in find_links),
            index_url=_url(index_url, "--index-url") if index_url else None,
        )
    venvs = VenvManager(core_path=catalog.core_path, console=lambda line: console.print(f"[dim]{escape(line)}[/]"))
    needed = _install_source(source, distribution, kind, rebuild, catalog, venvs)
    # The server types its example configs name that no plugin of the catalog registers: from the
    # same package files when they hold them, else named for the user to install.
    installed: set[str] = set()
    while needed - set(catalog.entries) - installed:
        missing = sorted(needed - set(catalog.entries) - installed)
        offered = wheels_registering(source.find_links, missing)
        if not offered:
            packages = " ".join(f"gym-{name.replace('_', '-')}" for name in missing)
            console.print(
                f"[yellow]note:[/] its example configs also use the server types {escape(', '.join(missing))}, "
                f"which no installed plugin registers: install their plugins (probably [bold]gym plugin install "
                f"{escape(packages)}[/]{escape(' --find-links DIR' if source.find_links else '')})"
            )
            break
        for name, requirement in sorted(offered.items()):
            if name in catalog.entries or name in installed:
                continue
            console.print(f"[dim]its example configs use {escape(name)}: installing {escape(requirement)}…[/]")
            also = dataclasses.replace(source, name=plugin_name_of(requirement), requirement=requirement)
            needed |= _install_source(also, requirement, None, False, catalog, venvs)
            installed.add(name)


def _install_source(
    source: PluginSource,
    distribution: str | None,
    kind: str | None,
    rebuild: bool,
    catalog: Catalog,
    venvs: VenvManager,
) -> set[str]:
    """Install ``source`` into its venv and record its server types; returns the server types its example
    configs name."""
    from rich.markup import escape

    from gym_cli.consoles import output_console
    from gym_cli.inventory import check_registration
    from gym_cli.plugin_examples import config_server_types, directory_examples, installed_examples
    from gym_cli.venvs.layout import site_packages

    console = output_console(stderr=True, highlight=False, soft_wrap=True)
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
        recorded = catalog.add(
            server["name"],
            kind=server["kind"],
            path=source.path,
            requirement=source.requirement,
            find_links=source.find_links,
            index_url=source.index_url,
        )
        if previous is not None and previous.source != recorded.source:
            console.print(f"[yellow]replaced[/] the catalog entry {server['name']} (was {escape(previous.source)})")
        if server["name"] != source.name:
            # `gym run` finds venvs by server type name: build the one it will look for.
            venvs.ensure(dataclasses.replace(source, name=server["name"]))
    if source.name not in catalog.entries:
        venvs.remove(source.name)

    versions = ", ".join(f"{name} {version}" for name, version in report["distributions"].items())
    how = "reused" if venv.reused else f"built in {seconds:.1f} s"
    console.print(f"[bold green]installed[/] {escape(versions or what)} (venv {how})")
    for server in servers:
        console.print(f"  {server['name']} ({server['kind']}): {escape(server['description'] or '-')}")
    console.print(f"recorded in {catalog.file}; next: [bold]gym test {servers[0]['name']}[/]")
    if source.path is not None:
        examples = directory_examples(source.path)
    elif distribution is not None:
        examples = installed_examples(site_packages(venv.path), distribution)
    else:
        examples = {}
    if examples:
        console.print(f"its example data and configs: [bold]gym plugin examples {servers[0]['name']}[/]")
    return config_server_types(examples.values()) - {server["name"] for server in report["servers"]}


# --- build ---------------------------------------------------------------------------------------


@plugin.command()
@click.argument("targets", nargs=-1, metavar="[NAME|PATH]...")
@click.option(
    "--out",
    "out",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("dist"),
    show_default=True,
    help="Where the sdist and wheel are written (a directory `gym plugin install --find-links` can read).",
)
@click.option(
    "--all",
    "build_all",
    is_flag=True,
    help="Build every plugin of the catalog that has a package directory (the first-party environments, "
    "agents and models), so that an environment's wheel can be installed with the servers its configs use.",
)
def build(targets: tuple[str, ...], out: Path, build_all: bool) -> None:
    """Build plugins' sdists and wheels, ready to publish, and check their metadata.

    Each NAME|PATH is a catalog name whose source is a package directory, or a package directory. The
    checks: an entry point in group `gym` naming a module the wheel holds; a dependency on gym-core
    with a floor (`gym-core>=0.1`; not bare, not an exact pin, not a development or local version,
    and satisfied by the gym-core running now); a README as the long description, with the sections
    of the plugin's kind and its Options tables current, and an environment's example data (as `gym
    plugin docs --check` reports them). When a check fails nothing is written to --out and every
    problem is listed (exit status 1). A wheel holds the plugin's example data/ and configs/ (`gym plugin
    examples NAME` copies them out where it is installed).

    \b
    Examples:
      gym plugin build my_env
      gym plugin build plugins/resources/my_env --out dist
      gym plugin build --all --out dist                   # every plugin of the workspace
      gym plugin install gym-my-env --find-links dist     # elsewhere: install what was built
      uv publish dist/gym_my_env-0.1.0*                    # publish it
    """
    from gym_cli.catalog import find_catalog
    from gym_cli.exits import CommandFailed

    catalog = find_catalog()
    if build_all == bool(targets):
        raise click.UsageError("name the plugins to build, or give --all (not both)")
    directories = _package_directories(targets, catalog)
    failed = []
    for directory in directories:
        try:
            if not _build_one(directory, out, catalog):
                failed.append(directory)
        except GymError as exc:
            if len(directories) == 1:
                raise
            click.echo(f"error: {exc}", err=True)  # the others are still built
            failed.append(directory)
    if failed:
        raise CommandFailed(
            f"{len(failed)} of {len(directories)} plugins cannot be published: {', '.join(d.name for d in failed)}"
            if len(directories) > 1
            else ""
        )
    if len(directories) > 1:
        click.echo(f"built {len(directories)} plugins into {out}", err=True)


def _build_one(directory: Path, out: Path, catalog: Catalog) -> bool:
    """Build and check one package directory's sdist and wheel into ``out``; False when it cannot be published."""
    from importlib.metadata import PackageNotFoundError, version

    from rich.markup import escape

    from gym_cli.consoles import output_console
    from gym_cli.distributions import build_distributions
    from gym_cli.plugin_docs import check_package, describe_packages, shown_path
    from gym_cli.venvs import find_uv

    console = output_console(stderr=True, highlight=False, soft_wrap=True)
    uv = find_uv()
    if uv is None:
        raise GymError("uv is not installed; gym builds packages with it: pip install uv")
    try:
        core_version: str | None = version("gym-core")
    except PackageNotFoundError:
        core_version = None
    (package,) = describe_packages([directory])
    docs_problems, docs_notes = check_package(package, shown=shown_path(directory, catalog.root))
    console.print(f"[dim]building {escape(str(directory))}…[/]")
    report = build_distributions(directory, out.expanduser().absolute(), uv, core_version, docs_problems)
    report.notes += docs_notes
    for note in report.notes:
        console.print(f"[yellow]note:[/] {escape(note)}")
    if report.problems:
        console.print(
            f"[bold red]{escape(report.wheel.name)} cannot be published[/] (nothing written to {escape(str(out))}):"
        )
        for problem in report.problems:
            console.print(f"  - {escape(problem)}")
        return False
    plugins = ", ".join(f"{name} ({value})" for name, value in report.entry_points.items())
    console.print(f"[bold green]built[/] {escape(report.name)} {escape(report.version)}: plugin {escape(plugins)}")
    for path in (report.sdist, report.wheel):
        console.print(f"  {path}", markup=False)
    console.print(
        f"next: [bold]gym plugin install {escape(report.name)} --find-links {escape(str(out))}[/], "
        f"or publish with [bold]uv publish[/]"
    )
    return True


# --- examples ------------------------------------------------------------------------------------


@plugin.command()
@click.argument("name")
@click.option(
    "--out",
    "out",
    type=click.Path(file_okay=False, path_type=Path),
    help="Where data/ and configs/ are written.  [default: ./NAME]",
)
@click.option("--force", is_flag=True, help="Overwrite files that are already there.")
def examples(name: str, out: Path | None, force: bool) -> None:
    """Copy a plugin's example data and configs out: its data/ (an environment's example tasks) and
    configs/, from its package directory or from the wheel it was installed from.

    NAME is a server type of the catalog. Files already under --out are kept (exit status 2, nothing
    written) unless --force.

    \b
    Examples:
      gym plugin examples counter                 # ./counter/data, ./counter/configs
      gym collect --serve counter/configs/counter_scripted.yaml \\
          --input counter/data/example.jsonl --output rollouts.jsonl
    """
    import shutil
    import sys

    from rich.markup import escape

    from gym_cli.catalog import Catalog, find_catalog, user_catalog_file
    from gym_cli.consoles import output_console
    from gym_cli.inventory import find_server_type
    from gym_cli.plugin_examples import directory_examples, installed_examples
    from gym_cli.sources import requirement_name, source_of_entry
    from gym_cli.venvs import VenvManager
    from gym_cli.venvs.layout import site_packages

    console = output_console(stderr=True, highlight=False, soft_wrap=True)
    catalog = find_catalog()
    if catalog.file is None:
        catalog = Catalog(user_catalog_file())
    entry = catalog.entries.get(name)
    if entry is None:  # installed where gym runs (the error names the known ones)
        distribution = find_server_type(name, catalog).distribution or ""
        files = installed_examples([Path(p) for p in sys.path if p], distribution)
        where = distribution
    elif entry.path is not None:
        files, where = directory_examples(entry.path), entry.source
    else:
        venv = VenvManager(core_path=catalog.core_path).lookup(source_of_entry(entry))
        if venv is None:
            raise GymError(f"the venv of {name} is not built: `gym plugin install {name}` builds it")
        files = installed_examples(site_packages(venv.path), requirement_name(entry.requirement or "") or "")
        where = entry.source
    if not files:
        raise GymError(
            f"{name} ({where}) ships no example data or configs (its wheel holds no "
            "<module>/examples/data or examples/configs: see `gym plugin new`'s pyproject.toml)"
        )
    out = out if out is not None else Path(name)
    existing = [relative for relative in files if (out / relative).exists()]
    if existing and not force:
        raise GymError(
            f"{out} already holds {', '.join(existing[:3])}{'…' if len(existing) > 3 else ''}: "
            "choose another --out, or --force to overwrite"
        )
    for relative, path in files.items():
        target = out / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)
    console.print(f"[bold green]copied[/] {len(files)} files of {escape(name)} to {escape(str(out))}:")
    for directory in sorted({relative.split("/", 1)[0] for relative in files}):
        listed = [r.split("/", 1)[1] for r in files if r.startswith(directory + "/")]
        console.print(f"  {escape(str(out / directory))}/: {escape(', '.join(listed))}")
