"""``gym profile``: rollouts → per-task and overall reward statistics, pass@k and majority@k, and a
breakdown by environment, agent or model with turns and tokens per rollout."""

from __future__ import annotations

from pathlib import Path

import click

from gym_cli.cli_options import track_options

__all__ = ["profile"]


@click.command()
@click.argument("rollouts", type=click.Path(path_type=Path))
@click.option("--output", type=click.Path(path_type=Path), help="JSON file (default: ROLLOUTS with .profile.json).")
@click.option("-k", "ks", type=click.IntRange(min=1), multiple=True, help="k of pass@k (repeatable; default 1, 4, 16).")
@click.option("--answer-field", help="Field holding the extracted answer, for majority@k (default: auto).")
@click.option(
    "--by",
    type=click.Choice(["environment", "agent", "model"]),
    default="environment",
    show_default=True,
    help="Group rollouts by the environment that verified them, the agent that ran them, or the model.",
)
@track_options
def profile(
    rollouts: Path,
    output: Path | None,
    ks: tuple[int, ...],
    answer_field: str | None,
    by: str,
    track: tuple[str, ...],
    track_dir: Path | None,
    run_name: str | None,
) -> None:
    """Reward statistics of a rollouts file: per task and overall, with pass@k and majority@k; per
    group (--by), rollouts, mean reward, pass@k, and turns and tokens per rollout where rows record them.

    \b
    Example:
      gym profile rollouts.jsonl -k 1 -k 4 --by model
      gym profile rollouts.jsonl --track mlflow --track wandb --track-dir runs/
    """
    from gym_cli.consoles import output_console
    from gym_cli.reward_profile import DEFAULT_KS, print_profile, profile_file
    from gym_cli.tracking import log_profile, tracking

    tags = {"command": "gym profile", "rollouts": str(rollouts)}
    # The runs open first: a store that cannot be opened stops the command before it writes anything.
    with tracking(track, track_dir, run_name, tags) as runs:
        result = profile_file(rollouts, output, ks or DEFAULT_KS, answer_field, by)
        print_profile(result, output_console())
        log_profile(runs, result, [rollouts])
    for run in runs:
        output_console(stderr=True).print(f"tracked ({run.name}): {run.where}")
