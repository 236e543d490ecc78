"""``gym examples``: the example files every environment keeps beside its tasks, written from them."""

from __future__ import annotations

import click

from gym_core.errors import GymError

from gym_cli.exits import CommandFailed

__all__ = ["examples"]


@click.group()
def examples() -> None:
    """The example files every environment keeps beside its tasks, written from them."""


@examples.command("rollouts")
@click.argument("names", nargs=-1)
@click.option("--check", is_flag=True, help="Write nothing; exit 1 when a file is missing or not what it would be.")
def rollouts(names: tuple[str, ...], check: bool) -> None:
    """Write each environment's data/example_rollouts.jsonl: its example tasks played by the scripted model.

    Each task of the environment's data/example.jsonl whose conformance field the scripted model can
    say is collected once, by gym collect's own code, on the environment's servers started in this
    process with every model scripted (no network, no weights), and written as gym collect writes
    it, sorted by task, ids, timestamps and timings fixed. NAME is a directory under
    plugins/resources (default: every environment there).

    \b
    Example:
      gym examples rollouts counter math
      gym examples rollouts --check      # what the tests check
    """
    from rich.markup import escape

    from gym_core.errors import did_you_mean

    from gym_cli.catalog import CATALOG_FILE, find_catalog
    from gym_cli.consoles import output_console
    from gym_cli.example_rollouts import COMMAND, EXAMPLE_ROLLOUTS, environment_directories, example_rollouts, render

    catalog = find_catalog()
    if not catalog.in_workspace:
        raise GymError(f"no {CATALOG_FILE} here or above: run inside a gym workspace, or set $GYM_WORKSPACE to one")
    found = {d.name: d for d in environment_directories(catalog.root)}
    for name in names:
        if name not in found:
            raise GymError(f"no environment {name!r} under plugins/resources{did_you_mean(name, found)}")
    console = output_console(stderr=True)
    failed: list[str] = []
    stale: list[str] = []
    for name in names or sorted(found):
        path = found[name] / EXAMPLE_ROLLOUTS
        shown = escape(str(path.relative_to(catalog.root)))
        try:
            text = render(rows := example_rollouts(found[name]))
        except GymError as exc:
            console.print(f"[red]{escape(name)}: failed[/red]: {escape(str(exc))}")
            failed.append(name)
            continue
        mean = sum(float(row["reward"]) for row in rows) / len(rows)
        current = path.read_text() if path.is_file() else None
        if current == text:
            console.print(f"{shown}: current ({len(rows)} rollouts, mean reward {mean:.3g})")
        elif check:
            console.print(f"[red]{shown}: {'missing' if current is None else 'out of date'}[/red]")
            stale.append(name)
        else:
            path.write_text(text)
            console.print(f"{shown}: written ({len(rows)} rollouts, mean reward {mean:.3g})")
    problems = [f"the example rollouts of {', '.join(failed)} failed"] if failed else []
    if stale:
        problems.append(
            f"the example rollouts of {', '.join(stale)} are not current: run `{COMMAND} {' '.join(stale)}`"
        )
    if problems:
        raise CommandFailed("; ".join(problems))
