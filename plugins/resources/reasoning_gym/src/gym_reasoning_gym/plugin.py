"""Registers the ``reasoning_gym`` resources server through gym's hooks.

This module imports only gym_core and the config: `gym plugin list` loads it in every process that
lists plugins, so the server (and whatever heavy library it needs) is named by a string and imported
only by the process that runs it.
"""

from gym_core import hookimpl

from gym_reasoning_gym.config import ReasoningGymConfig


@hookimpl
def gym_register_servers(register):
    register(
        name="reasoning_gym",
        kind="resources",
        server="gym_reasoning_gym.server:ReasoningGymServer",
        config=ReasoningGymConfig,
        description="A gym environment: tools and a verifier",
    )
