"""``gym profile``: rollouts → per-task and overall reward statistics, pass@k and majority@k."""

from __future__ import annotations

from pathlib import Path

import click
from rich.console import Console

__all__ = ["profile"]


@click.command()
@click.argument("rollouts", type=click.Path(path_type=Path))
@click.option("--output", type=click.Path(path_type=Path), help="JSON file (default: ROLLOUTS with .profile.json).")
@click.option("-k", "ks", type=click.IntRange(min=1), multiple=True, help="k of pass@k (repeatable; default 1, 4, 16).")
@click.option("--answer-field", help="Field holding the extracted answer, for majority@k (default: auto).")
def profile(rollouts: Path, output: Path | None, ks: tuple[int, ...], answer_field: str | None) -> None:
    """Reward statistics of a rollouts file: per task and overall, with pass@k and majority@k.

    \b
    Example:
      gym profile rollouts.jsonl -k 1 -k 4
    """
    from gym_cli.reward_profile import DEFAULT_KS, print_profile, profile_file

    print_profile(profile_file(rollouts, output, ks or DEFAULT_KS, answer_field), Console())
