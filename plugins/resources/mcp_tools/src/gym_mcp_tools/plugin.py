"""Registers the ``mcp_tools`` resources server through gym's hooks.

This module imports only gym_core and the config: `gym plugin list` loads it in every process that
lists plugins, so the server (and whatever heavy library it needs) is named by a string and imported
only by the process that runs it.
"""

from gym_core import hookimpl

from gym_mcp_tools.config import McpToolsConfig


@hookimpl
def gym_register_servers(register):
    register(
        name="mcp_tools",
        kind="resources",
        server="gym_mcp_tools.server:McpToolsServer",
        config=McpToolsConfig,
        description="The tools of any MCP server (stdio or HTTP) as an environment's tools, verified by a row-supplied rule",
    )
