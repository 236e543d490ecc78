"""gym-train's gym plugin: the ``gym train`` command (registered like any third party's)."""

from gym_core import hookimpl

__all__ = ["gym_register_commands"]


@hookimpl
def gym_register_commands(register):
    # The command module imports click and gym_cli only; torch loads when the command runs.
    from gym_train.command import train

    register(train)
