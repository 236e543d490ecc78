"""gym's built-in subcommands, registered through the same hook third-party commands use."""

from gym_core import hookimpl


@hookimpl
def gym_register_commands(register):
    from gym_cli.collect import collect
    from gym_cli.plugin import plugin
    from gym_cli.profile import profile
    from gym_cli.run import run
    from gym_cli.status import status
    from gym_cli.test import test

    for command in (run, status, collect, profile, plugin, test):
        register(command)
