"""Registers the ``multi_step`` resources server through gym's hooks.

This module imports only gym_core and the config: `gym plugin list` loads it in every process that
lists plugins, so the server (and whatever heavy library it needs) is named by a string and imported
only by the process that runs it.
"""

from gym_core import hookimpl

from gym_multi_step.config import MultiStepConfig


@hookimpl
def gym_register_servers(register):
    register(
        name="multi_step",
        kind="resources",
        server="gym_multi_step.server:MultiStepServer",
        config=MultiStepConfig,
        description="A gym environment: tools and a verifier",
    )
