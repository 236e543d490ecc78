"""Command-line options that several subcommands share, in a leaf module: defining a command must not
import what running it needs (``gym --help`` imports every command module; :mod:`gym_cli.launch`
imports rich, tomlkit and the catalog)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["ISOLATION_MODES", "serve_options", "served_overrides", "progress_option", "TRACKERS", "track_options"]

ISOLATION_MODES = ("venv", "none")
"""``venv``: each plugin in its own venv; ``none``: every server with the interpreter running gym."""


def serve_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """The options of a data command that finds its servers through
    :func:`gym_cli.launch.launcher.head_or_served`: ``--head``, ``--serve`` (repeatable), ``--set``
    (repeatable) and ``--isolation``, passed as ``head``, ``serve_configs``, ``overrides`` and ``isolation``
    (``head`` None: :func:`gym_cli.head.find_head` finds the run)."""
    import click

    from gym_cli.head import head_help

    for option in reversed(
        (
            click.option("--head", default=None, metavar="URL", help=head_help()),
            click.option(
                "--serve",
                "serve_configs",
                multiple=True,
                type=click.Path(),
                help="Start the servers of this config first (repeatable), stop them at the end.",
            ),
            click.option(
                "--set", "overrides", multiple=True, help="Override for --serve configs, Hydra grammar (repeatable)."
            ),
            click.option(
                "--isolation",
                type=click.Choice(ISOLATION_MODES),
                default="venv",
                show_default=True,
                help="Where --serve servers run: venv, each plugin's own; none, the Python running gym.",
            ),
        )
    ):
        command = option(command)
    return command


def served_overrides(overrides: tuple[str, ...] | list[str]) -> list[str]:
    """The overrides ``--serve`` starts its servers with: the head server on a free port (nobody needs to
    find it on the default one: the command talks to it, and ``gym status`` finds it through its state
    file; a `gym run` already on 11000 does not stop it), then ``--set`` (which may set another)."""
    return ["head_server.port=0", *overrides]


def progress_option(help: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``--progress`` (passed as ``progress_mode``): how a command shows what it is doing, one of
    :data:`gym_cli.live.PROGRESS_MODES` (default ``auto``), rendered by
    :func:`gym_cli.live.make_reporter`; ``help`` says what the command shows in each mode."""
    import click

    from gym_cli.live import PROGRESS_MODES

    return click.option(
        "--progress",
        "progress_mode",
        type=click.Choice(PROGRESS_MODES),
        default="auto",
        show_default=True,
        help=help,
    )


TRACKERS = ("mlflow", "wandb")
"""The experiment trackers ``--track`` logs to (:mod:`gym_cli.tracking`)."""


def track_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """The options of a command that logs its reward profile to experiment trackers
    (:mod:`gym_cli.tracking`): ``--track`` (repeatable), ``--track-dir`` and ``--run-name``, passed as
    ``track``, ``track_dir`` and ``run_name``."""
    import click

    for option in reversed(
        (
            click.option(
                "--track",
                multiple=True,
                type=click.Choice(TRACKERS),
                help="Log the profile's metrics and files to MLflow or Weights & Biases (repeatable; needs "
                "pip install 'gym-cli[mlflow]' or 'gym-cli[wandb]'). MLflow: a local file store, or "
                "MLFLOW_TRACKING_URI; W&B: an offline run unless WANDB_MODE says otherwise.",
            ),
            click.option(
                "--track-dir",
                type=click.Path(file_okay=False, path_type=Path),
                metavar="DIR",
                help="Where --track writes: MLflow's store in DIR/mlruns, W&B's runs in DIR/wandb "
                "(default: MLFLOW_TRACKING_URI or ./mlruns; WANDB_DIR or the current directory).",
            ),
            click.option("--run-name", help="Name of the tracked run (default: the tracker's own)."),
        )
    ):
        command = option(command)
    return command
