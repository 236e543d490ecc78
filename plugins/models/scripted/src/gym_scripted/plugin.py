"""Registers the ``scripted`` model server through gym's hooks."""

from gym_core import hookimpl

from gym_scripted.server import ScriptedModelConfig


@hookimpl
def gym_register_servers(register):
    register(
        name="scripted",
        kind="model",
        server="gym_scripted.server:ScriptedModel",
        config=ScriptedModelConfig,
        description="Deterministic replies from a script, for tests and benchmarks",
    )
