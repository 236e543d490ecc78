"""An MCP server (the official SDK) whose tools misbehave, for the failure tests: ``hang`` never
answers, ``die`` ends the process, ``fail`` reports a tool error, ``reject`` answers a protocol error:
invalid params (``crash`` another one)."""

from __future__ import annotations

import os
import time

from mcp import MCPError
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


@server.tool()
def reject(value: str) -> str:
    """Refuse the value as invalid params, a JSON-RPC error rather than a tool error."""
    raise MCPError(-32602, f"value {value!r} is not one I take")


@server.tool()
def crash() -> str:
    """Answer an internal JSON-RPC error."""
    raise MCPError(-32603, "the server broke")


if __name__ == "__main__":
    server.run()
