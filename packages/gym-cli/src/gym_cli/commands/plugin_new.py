"""``gym plugin new``: a plugin package of one kind, rendered from gym's template
(``gym_cli/templates/plugin``)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import click

from gym_core.errors import GymError
from gym_core.plugins import ENTRY_POINT_GROUP, SERVER_KINDS

from gym_cli.exits import fail

__all__ = ["new", "render_template"]

# Where `gym plugin new` puts a plugin of each kind inside a workspace.
TEMPLATE = ("templates", "plugin")
NAME_PATTERN = re.compile(r"[a-z][a-z0-9]*(?:[-_][a-z0-9]+)*")


def _relative(path: Path, root: Path) -> str:
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)


# --- new -----------------------------------------------------------------------------------------


def _template_dir() -> Path:
    return Path(__file__).resolve().parents[1].joinpath(*TEMPLATE)


def _plugin_name(name: str) -> str:
    """NAME as typed (hyphens or underscores, with or without a ``gym-`` prefix) → plugin name."""
    cleaned = name.strip().lower()
    for prefix in ("gym-", "gym_"):
        if cleaned.startswith(prefix):
            cleaned = cleaned[len(prefix) :]
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
    _write_options_table(directory)
    return context["cookiecutter"]


def _write_options_table(directory: Path) -> None:
    """The README's Options table, generated from the new package's own config (as `gym plugin docs`
    keeps it), so that the template never carries a copy of its configs' descriptions."""
    from gym_cli.plugin_docs import describe_packages, write_package

    (package,) = describe_packages([directory])
    if package.error is not None:
        raise GymError(f"the rendered plugin does not load: {package.error}")
    write_package(package)


@click.command()
@click.argument("kind", type=click.Choice(SERVER_KINDS))
@click.argument("name")
@click.option(
    "--output-dir",
    type=click.Path(path_type=Path),
    metavar="DIR",
    help="The new package's directory [default: plugins/<kind>s/<name> in a workspace, else ./<name>].",
)
@click.option("--description", help="One line saying what the plugin does (pyproject, README, registration).")
def new(kind: str, name: str, output_dir: Path | None, description: str | None) -> None:
    """Create a plugin package of KIND (model, resources or agent) called NAME from gym's template.

    The package is ready to run: a working server of that kind, its hook registration, a config
    using it with gym's first-party plugins, tests that start real servers, and a README. NAME may
    use hyphens or underscores: `my-env` gives the distribution gym-my-env, the module gym_my_env
    and the plugin my_env.

    Inside a gym workspace the package is registered everywhere it must be: the root
    pyproject.toml (dependencies, [tool.uv.sources], the `test` group) and workspace.toml, so that
    `uv run pytest` installs it and runs its tests. See `gym workspace --help`.

    \b
    Example:
      gym plugin new resources my-env
      uv run pytest plugins/resources/my_env
    """
    # Imported here, not at the top: `gym --help` imports every command module.
    from importlib.metadata import entry_points

    from gym_cli.catalog import find_catalog
    from gym_cli.consoles import output_console
    from gym_cli.workspace import KIND_DIRECTORIES

    console = output_console(stderr=True, highlight=False, soft_wrap=True)
    try:
        plugin_name = _plugin_name(name)
        if description is not None and re.search(r'["\\\n]', description):
            raise GymError("--description must be one line without double quotes or backslashes")
        catalog = find_catalog()
        if plugin_name in catalog.entries:
            raise GymError(
                f"the catalog already has a plugin named {plugin_name!r} "
                f"({catalog.entries[plugin_name].source}): choose another name"
            )
        if any(ep.name == plugin_name for ep in entry_points(group=ENTRY_POINT_GROUP)):
            raise GymError(f"an installed package already provides the plugin {plugin_name!r}: choose another name")
        if output_dir is None:
            in_workspace = catalog.in_workspace
            base = catalog.root / KIND_DIRECTORIES[kind] if in_workspace else Path.cwd()
            output_dir = base / plugin_name
        output_dir = output_dir.expanduser().absolute()
        if output_dir.exists():
            raise GymError(f"{output_dir} already exists: choose another --output-dir, or remove it first")
        context = render_template(kind, plugin_name, output_dir, description)
        # Inside the workspace, the new package becomes a member everywhere it must be.
        inside = catalog.in_workspace and output_dir.resolve().is_relative_to(catalog.root.resolve())
        if inside:
            from gym_cli.workspace import is_uv_workspace, register_member

            registered = register_member(catalog.root, output_dir, kind, plugin_name, context["__distribution_name"])
    except GymError as exc:
        fail(exc)
    shown = _relative(output_dir, Path.cwd().absolute())
    shown = shown if os.sep in shown else f".{os.sep}{shown}"
    console.print(f"[bold green]created[/] {context['__distribution_name']} ({kind} plugin {plugin_name}) in {shown}")
    for path in sorted(p for p in output_dir.rglob("*") if p.is_file()):
        console.print(f"  {path.relative_to(output_dir)}", markup=False)
    if inside:
        console.print("registered in the workspace:")
        for change in registered:
            console.print(f"  {change}", markup=False)
    if inside and is_uv_workspace(catalog.root):
        console.print("next: run its tests (`uv run` locks the workspace and installs the new member first):")
        console.print(f"  uv run pytest {shown}", markup=False)
        return
    console.print("next: build its venv and record it in the catalog, then run its tests:")
    console.print(f"  gym plugin install {shown}", markup=False)
    console.print(f"  gym test {plugin_name}", markup=False)
