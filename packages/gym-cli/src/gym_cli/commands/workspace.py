"""``gym workspace``: keep the workspace's root lists in line with its member packages."""

from __future__ import annotations

from pathlib import Path

import click

from gym_core.errors import GymError

from gym_cli.exits import CommandFailed

__all__ = ["workspace"]


def _root() -> Path:
    from gym_cli.catalog import CATALOG_FILE, find_catalog  # tomlkit: only when a subcommand runs

    catalog = find_catalog()
    if not catalog.in_workspace:
        raise GymError(f"no {CATALOG_FILE} here or above: run inside a gym workspace, or set $GYM_WORKSPACE to one")
    if not (catalog.root / "pyproject.toml").is_file():
        raise GymError(f"{catalog.root} has no pyproject.toml: a gym workspace is a uv workspace")
    return catalog.root


@click.group()
def workspace() -> None:
    """Keep the workspace's root lists in line with its member packages.

    The member packages (the directories the root pyproject.toml's [tool.uv.workspace] globs name)
    are the one source of truth. From them follow the root [project] dependencies and
    [tool.uv.sources], the root `test` dependency group (every member's `test` group together),
    and the workspace.toml entry of each member that is a gym plugin. `gym plugin new` registers
    the plugin it creates; `check` finds what drifted, `sync` fixes it.

    \b
    Examples:
      gym workspace check
      gym workspace sync && uv lock
    """


@workspace.command()
def check() -> None:
    """Report where the root files differ from the members; exit 1 when they do."""
    from rich.markup import escape

    from gym_cli.consoles import output_console
    from gym_cli.workspace import check as find_drift

    root = _root()
    problems = find_drift(root)
    console = output_console(highlight=False, soft_wrap=True)
    if problems:
        for problem in problems:
            console.print(f"  {escape(problem)}")
        raise CommandFailed(f"the workspace at {root} is out of date: run `gym workspace sync`, then `uv lock`")
    console.print(f"the workspace at {escape(str(root))} is in sync with its members")


@workspace.command()
def sync() -> None:
    """Rewrite the root files from the members (comments and layout kept); exit 1 if some drift needs a hand."""
    from rich.markup import escape

    from gym_cli.consoles import output_console
    from gym_cli.workspace import sync as sync_files

    root = _root()
    changes, problems = sync_files(root)
    console = output_console(highlight=False, soft_wrap=True)
    for change in changes:
        console.print(f"  {escape(change)}")
    if problems:
        for problem in problems:
            console.print(f"  [red]{escape(problem)}[/]")
        raise CommandFailed("some of the workspace could not be synced (see above)")
    if changes:
        console.print("next: `uv lock` (or any `uv run`, which locks and installs first)")
    else:
        console.print(f"the workspace at {escape(str(root))} was in sync already")
