"""A small MCP server, written with the official ``mcp`` SDK, that the example config and data use:
a calculator and a notebook whose notes live as long as the process (one per gym session over stdio).

    python -m gym_mcp_tools.example_server
"""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer

server = MCPServer("gym-mcp-tools-example")
notes: dict[str, str] = {}


@server.tool()
def add(a: float, b: float) -> float:
    """Add two numbers and return their sum."""
    return a + b


@server.tool()
def write_note(key: str, text: str) -> str:
    """Write a note under a key, replacing what was there."""
    notes[key] = text
    return f"saved {key}"


@server.tool()
def read_note(key: str) -> str:
    """Read the note under a key (empty when there is none)."""
    return notes.get(key, "")


if __name__ == "__main__":
    server.run()
