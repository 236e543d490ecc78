"""Registers the ``token_preserving`` agent server through gym's hooks.

This module imports only gym_core and the config: `gym plugin list` loads it in every process that
lists plugins, so the server (and whatever heavy library it needs) is named by a string and imported
only by the process that runs it.
"""

from gym_core import hookimpl

from gym_token_preserving.config import TokenPreservingConfig


@hookimpl
def gym_register_servers(register):
    register(
        name="token_preserving",
        kind="agent",
        server="gym_token_preserving.server:TokenPreservingAgent",
        config=TokenPreservingConfig,
        description="seed_session, then model -> tools with token ids sent back "
        "(prompt = previous prompt + generated + new tokens), then verify",
    )
