"""Registers the ``simple_agent`` agent server type through gym's hooks.

The server is named by its ``"module:Class"`` path, so listing plugins imports no server code.
"""

from gym_core import hookimpl

from gym_simple_agent.config import SimpleAgentConfig


@hookimpl
def gym_register_servers(register):
    register(
        name="simple_agent",
        kind="agent",
        server="gym_simple_agent.server:SimpleAgent",
        config=SimpleAgentConfig,
        description="seed_session, then model -> tools until no call or max_steps, then verify",
    )
