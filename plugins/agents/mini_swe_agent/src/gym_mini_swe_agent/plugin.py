"""Registers the ``mini_swe_agent`` agent server through gym's hooks.

This module imports only gym_core and the config: `gym plugin list` loads it in every process that
lists plugins, so the server (and mini-swe-agent, litellm behind it) is named by a string and
imported only by the process that runs it.
"""

from gym_core import hookimpl

from gym_mini_swe_agent.config import MiniSweAgentConfig


@hookimpl
def gym_register_servers(register):
    register(
        name="mini_swe_agent",
        kind="agent",
        server="gym_mini_swe_agent.server:MiniSweAgent",
        config=MiniSweAgentConfig,
        description="runs the mini-swe-agent harness (PyPI) as a rollout: its model calls through a "
        "token-capturing proxy, its commands in the environment's sandbox, then verify",
    )
