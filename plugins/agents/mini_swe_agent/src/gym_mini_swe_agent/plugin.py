"""Registers the ``mini_swe_agent`` agent server through gym's hooks.

This module imports only gym_core and the config: `gym plugin list` loads it in every process that
lists plugins, so the server (and whatever heavy library it needs) is named by a string and imported
only by the process that runs it.
"""

from gym_core import hookimpl

from gym_mini_swe_agent.config import MiniSweAgentConfig


@hookimpl
def gym_register_servers(register):
    register(
        name="mini_swe_agent",
        kind="agent",
        server="gym_mini_swe_agent.server:MiniSweAgentAgent",
        config=MiniSweAgentConfig,
        description="A gym agent",
    )
