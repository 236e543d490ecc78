"""``gym repo-tasks``: bug-fix tasks for the ``repo`` environment, generated offline.

Defining the commands imports click only (``gym --help`` imports every command module); running
``generate`` imports the generator and starts gym's sandbox.
"""

from __future__ import annotations

import time
from pathlib import Path

import click

__all__ = ["repo_tasks"]


@click.group("repo-tasks")
def repo_tasks() -> None:
    """Bug-fix tasks for the repo environment, made on this machine (no download)."""


@repo_tasks.command()
@click.option("-n", "count", type=click.IntRange(min=1), default=10, show_default=True, help="How many tasks.")
@click.option("--seed", type=int, default=0, show_default=True, help="The same seed gives the same tasks.")
@click.option(
    "--output",
    "-o",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    help="Where to write the tasks, one JSON object per line (rows of the repo environment).",
)
@click.option(
    "--concurrency",
    type=click.IntRange(min=1),
    default=2,
    show_default=True,
    help="Sandboxed test runs at once (the tasks do not depend on it).",
)
@click.option(
    "--runner",
    type=click.Choice(["unittest", "pytest"]),
    default="unittest",
    show_default=True,
    help="The hidden tests' framework: unittest classes, or pytest functions (rows with test_runner: pytest).",
)
def generate(count: int, seed: int, output: Path, concurrency: int, runner: str) -> None:
    """Generate COUNT validated bug-fix tasks.

    Each task is a small generated Python package with one semantic mutation (an operator swapped,
    a constant off by one, a condition negated, a statement dropped), kept only when its tests
    (unittest, or pytest with --runner pytest) go from all passing to some failing in gym's sandbox. A row carries the broken repository,
    the issue text (from the first failing test), the hidden tests, tests_to_fix (failing, must pass),
    tests_to_keep (passing, must stay so) and the reference fix (reference_patch, a unified diff).

    \b
    Example:
      gym repo-tasks generate -n 50 --seed 0 --output repo_tasks.jsonl
      gym repo-tasks generate -n 50 --runner pytest --output repo_pytest_tasks.jsonl
    """
    import asyncio  # here, not at the top: `gym --help` imports every command's module

    from gym_repo.generate import generate_tasks, write_jsonl

    started = time.monotonic()
    tasks = asyncio.run(generate_tasks(count, seed, concurrency=concurrency, runner=runner))
    elapsed = time.monotonic() - started
    output.parent.mkdir(parents=True, exist_ok=True)
    write_jsonl(tasks, str(output))
    rate = len(tasks) / elapsed * 60 if elapsed > 0 else 0.0
    click.echo(f"{len(tasks)} tasks (seed {seed}) written to {output} in {elapsed:.1f} s ({rate:.0f} tasks/min)")
