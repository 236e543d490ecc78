"""Registers the ``arc_agi`` resources server through gym's hooks.

This module imports only gym_core and the config: `gym plugin list` loads it in every process that
lists plugins, so the server (and whatever heavy library it needs) is named by a string and imported
only by the process that runs it.
"""

from gym_core import hookimpl

from gym_arc_agi.config import ArcAgiConfig


@hookimpl
def gym_register_servers(register):
    register(
        name="arc_agi",
        kind="resources",
        server="gym_arc_agi.server:ArcAgiServer",
        config=ArcAgiConfig,
        description="A gym environment: tools and a verifier",
    )
