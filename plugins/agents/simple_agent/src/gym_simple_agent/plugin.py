"""Registers the ``simple_agent`` agent server through gym's hooks."""

from gym_core import hookimpl


@hookimpl
def gym_register_servers(register):
    from gym_simple_agent.server import SimpleAgent, SimpleAgentConfig

    register(
        name="simple_agent",
        kind="agent",
        server=SimpleAgent,
        config=SimpleAgentConfig,
        description="seed_session, then model -> tools until no call or max_steps, then verify",
    )
