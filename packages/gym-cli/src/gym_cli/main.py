"""The ``gym`` command. Subcommands are plugins registered through ``gym_register_commands``:
gym's own (:mod:`gym_cli.commands`) first, then any installed package's."""

from __future__ import annotations

import sys

import click

from gym_core.errors import GymError
from gym_core.plugins import get_plugin_manager

__all__ = ["main", "cli"]


def cli() -> click.Group:
    """The ``gym`` click group with every registered subcommand."""
    from gym_cli import commands

    plugins = get_plugin_manager()
    if "gym_cli" not in plugins.plugin_names:
        plugins.register(commands, name="gym_cli")

    @click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
    @click.version_option(package_name="gym-cli", prog_name="gym")
    def gym() -> None:
        """gym: build, serve and run reinforcement-learning environments for LLMs.

        \b
        Start here:
          gym collect --serve plugins/resources/math/configs/math_local.yaml \\
              --input plugins/resources/math/data/example.jsonl --output rollouts.jsonl --repeats 4
        """

    for command in plugins.commands().values():
        gym.add_command(command)
    return gym


def main(argv: list[str] | None = None) -> None:
    try:
        group = cli()
    except GymError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    try:
        group.main(args=argv, prog_name="gym", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except GymError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
