"""gym's built-in subcommands, one module each, registered through the same hook third-party
commands use. A subcommand module depends on gym_cli's shared modules, never on another subcommand."""

from gym_core import hookimpl

__all__ = ["gym_register_commands"]


@hookimpl
def gym_register_commands(register):
    from gym_cli.commands.collect import collect
    from gym_cli.commands.config import config
    from gym_cli.commands.data import data
    from gym_cli.commands.examples import examples
    from gym_cli.commands.export import export
    from gym_cli.commands.mcp import mcp
    from gym_cli.commands.plugin import plugin
    from gym_cli.commands.profile import profile
    from gym_cli.commands.redteam import redteam
    from gym_cli.commands.report import report
    from gym_cli.commands.reverify import reverify
    from gym_cli.commands.run import run
    from gym_cli.commands.status import status
    from gym_cli.commands.stop import stop
    from gym_cli.commands.test import test
    from gym_cli.commands.workspace import workspace

    for command in (
        run,
        status,
        stop,
        collect,
        reverify,
        profile,
        report,
        export,
        data,
        config,
        plugin,
        test,
        workspace,
        examples,
        redteam,
        mcp,
    ):
        register(command)
