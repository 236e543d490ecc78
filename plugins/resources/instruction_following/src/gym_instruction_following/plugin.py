"""Registers the ``instruction_following`` resources server through gym's hooks.

This module imports only gym_core and the config: `gym plugin list` loads it in every process that
lists plugins, so the server (and whatever heavy library it needs) is named by a string and imported
only by the process that runs it.
"""

from gym_core import hookimpl

from gym_instruction_following.config import InstructionFollowingConfig


@hookimpl
def gym_register_servers(register):
    register(
        name="instruction_following",
        kind="resources",
        server="gym_instruction_following.server:InstructionFollowingServer",
        config=InstructionFollowingConfig,
        description="A gym environment: tools and a verifier",
    )
