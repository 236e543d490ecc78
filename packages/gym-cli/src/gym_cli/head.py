"""Asking the head server of a running ``gym run`` what it runs: ``gym status`` and ``gym collect``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gym_core.client import ServerClient
    from gym_core.registry import ServerType

__all__ = ["default_head", "server_instances", "agent_instances"]


def default_head() -> str:
    """The URL of ``gym run``'s head server with the default ``head_server`` settings."""
    from gym_core.options import DEFAULT_HEAD_PORT, DEFAULT_HOST

    return f"http://{DEFAULT_HOST}:{DEFAULT_HEAD_PORT}"


async def server_instances(client: ServerClient, head: str) -> list[dict[str, Any]]:
    """``GET /server_instances``: one row per server instance (name, plugin, url; from ``gym run`` also
    kind, pid, alive, exit_code). A :class:`~gym_core.errors.ServerCallError` when the head does not answer."""
    return await client.get(head.rstrip("/"), "/server_instances")


def agent_instances(rows: list[dict[str, Any]], server_types: Mapping[str, ServerType]) -> list[str]:
    """The names of the agent instances among ``rows``: by the kind the head reports, else by the kind
    of the row's server type as registered here."""
    agents = []
    for row in rows:
        kind = row.get("kind")
        if kind is None and row.get("plugin") in server_types:
            kind = server_types[row["plugin"]].kind
        if kind == "agent":
            agents.append(row["name"])
    return agents
