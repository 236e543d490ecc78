"""Options of a ``mcp_tools`` server instance, validated when a config is loaded.

Kept apart from the server so that registering the plugin imports nothing heavy (the ``mcp`` SDK is
imported by the server only). Each option's description is what `gym plugin show mcp_tools` prints.
"""

from __future__ import annotations

from typing import Annotated

from msgspec import Meta

from gym_core import ServerConfig

__all__ = ["McpToolsConfig"]


class McpToolsConfig(ServerConfig, kw_only=True):
    command: Annotated[
        list[str],
        Meta(
            description="the MCP server to start for each session, over stdio: the program and its arguments "
            "(a first word `python` is this server's own interpreter); or give `url`"
        ),
    ] = []
    url: Annotated[
        str | None,
        Meta(description="the MCP server to connect to over Streamable HTTP (http://host:port/mcp); or give `command`"),
    ] = None
    env: Annotated[
        dict[str, str],
        Meta(description="environment variables for a `command` server, on top of the MCP SDK's safe defaults"),
    ] = {}
    connect_timeout_s: Annotated[
        float, Meta(gt=0, description="seconds to start or reach the MCP server and list its tools")
    ] = 30.0
    call_timeout_s: Annotated[float, Meta(gt=0, description="seconds one tool call may take")] = 60.0
    ignore_case: Annotated[
        bool, Meta(description="compare the final answer with the row's expected_answer ignoring case")
    ] = True
