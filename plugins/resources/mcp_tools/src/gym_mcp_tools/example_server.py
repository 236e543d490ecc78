"""A small MCP server, written with the official ``mcp`` SDK, that the example config and data use:
a calculator and a notebook whose notes live as long as the process (one per gym session over stdio).

    python -m gym_mcp_tools.example_server              # over stdio
    python -m gym_mcp_tools.example_server --http 8000  # Streamable HTTP at http://127.0.0.1:8000/mcp
"""

from __future__ import annotations

import sys

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
    if sys.argv[1:2] == ["--http"]:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run()
