"""The ``gym`` command. Subcommands are plugins registered through ``gym_register_commands``:
gym's own (:mod:`gym_cli.commands`) first, then any installed package's.

The exit status of every subcommand is decided here, once (:func:`exit_code`): see
:class:`gym_cli.exits.ExitCode`.
"""

from __future__ import annotations

import sys

import click

from gym_core.errors import GymError, ServerCallError
from gym_core.plugins import get_plugin_manager

from gym_cli.exits import EXIT_CODES_HELP, CommandFailed, ExitCode

__all__ = ["main", "cli", "exit_code", "GymGroup"]


class GymGroup(click.Group):
    """The ``gym`` group: applies the exit-status policy to every subcommand, however it is invoked
    (the ``gym`` script, ``python -m gym_cli``, click's test runner)."""

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except click.exceptions.Exit:
            raise
        except BaseException as exc:
            code = exit_code(exc)  # re-raises what is not gym's to handle (a bug shows its traceback)
            _report(exc)
            raise click.exceptions.Exit(code) from None


def cli() -> click.Group:
    """The ``gym`` click group with every registered subcommand."""
    from gym_cli import commands

    plugins = get_plugin_manager()
    if "gym_cli" not in plugins.plugin_names:
        plugins.register(commands, name="gym_cli")

    @click.group(
        cls=GymGroup,
        context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
        epilog=EXIT_CODES_HELP,
    )
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


def exit_code(exc: BaseException) -> int:
    """The exit status for an exception that ended a command: the policy of :class:`ExitCode`.
    Re-raises an exception the policy does not cover."""
    if isinstance(exc, (KeyboardInterrupt, click.exceptions.Abort)):
        return ExitCode.INTERRUPTED
    if isinstance(exc, click.exceptions.Exit):  # --help, --version
        return exc.exit_code
    if isinstance(exc, click.ClickException):  # usage: a missing or bad option or argument
        return ExitCode.USAGE
    if isinstance(exc, (CommandFailed, ServerCallError)):  # the work ran; some of it, or a server, failed
        return ExitCode.FAILED
    if isinstance(exc, GymError):  # bad config or input: nothing was run
        return ExitCode.USAGE
    raise exc


def _report(exc: BaseException) -> None:
    if isinstance(exc, (KeyboardInterrupt, click.exceptions.Abort)):
        click.echo("interrupted", err=True)
    elif isinstance(exc, click.ClickException):
        exc.show()
    elif str(exc):
        from rich.console import Console
        from rich.markup import escape

        Console(stderr=True, highlight=False, soft_wrap=True).print(f"[bold red]error:[/] {escape(str(exc))}")


def main(argv: list[str] | None = None) -> None:
    """Run ``gym`` with ``argv`` (default: the command line) and exit with the policy's status."""
    try:
        group = cli()
    except GymError as exc:  # a plugin broke the command list itself
        _report(exc)
        sys.exit(ExitCode.USAGE)
    group.main(args=argv, prog_name="gym")


if __name__ == "__main__":
    main()
