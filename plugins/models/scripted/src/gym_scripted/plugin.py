"""Registers the ``scripted`` model server type through gym's hooks.

The server is named by its ``"module:Class"`` path, so listing plugins imports no server code.
"""

from gym_core import hookimpl

from gym_scripted.config import ScriptedModelConfig


@hookimpl
def gym_register_servers(register):
    register(
        name="scripted",
        kind="model",
        server="gym_scripted.server:ScriptedModel",
        config=ScriptedModelConfig,
        description="Deterministic replies from a script, for tests and benchmarks",
    )
