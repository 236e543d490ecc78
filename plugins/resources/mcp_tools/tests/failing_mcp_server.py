"""An MCP server (the official SDK) whose tools misbehave, for the failure tests: ``hang`` never
answers, ``die`` ends the process, ``fail`` reports a tool error."""

from __future__ import annotations

import os
import time

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("gym-mcp-tools-failing")


@server.tool()
def hang(seconds: float) -> str:
    """Sleep, longer than any call timeout of the tests."""
    time.sleep(seconds)
    return "woke"


@server.tool()
def die() -> str:
    """End this server's process."""
    os._exit(3)


@server.tool()
def fail(reason: str) -> str:
    """Fail with the reason."""
    raise ToolError(reason)


if __name__ == "__main__":
    server.run()
