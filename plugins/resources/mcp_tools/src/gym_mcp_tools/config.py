"""Options of a ``mcp_tools`` server instance, validated when a config is loaded.

Kept apart from the server so that registering the plugin imports nothing heavy. Each option's
description (``Meta(description=...)``) is what `gym plugin show mcp_tools` prints.
"""

from __future__ import annotations

from typing import Annotated

from msgspec import Meta

from gym_core import ServerConfig

__all__ = ["McpToolsConfig"]


class McpToolsConfig(ServerConfig, kw_only=True):
    ignore_case: Annotated[bool, Meta(description="compare the answer with expected_answer ignoring case")] = True
