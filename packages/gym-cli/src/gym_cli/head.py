"""Asking the head server of a running ``gym run`` what it runs: ``gym status`` and ``gym collect``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gym_core.client import ServerClient
    from gym_core.registry import ServerType

__all__ = ["default_head", "head_token", "connect", "server_instances", "instance_kinds", "agent_instances"]


def node_label(node: Mapping[str, Any] | None) -> str:
    """How ``gym run``'s table and ``gym status`` show a server's Ray node (a ``/server_instances``
    row's ``node``): the start of its id, which ``resources: {node: ...}`` takes as a prefix (the URL
    has the node's IP); ``-`` for a server Ray did not place."""
    return str(node.get("id", "?"))[:12] if node else "-"


def default_head() -> str:
    """The URL of ``gym run``'s head server with the default ``head_server`` settings."""
    from gym_core.options import DEFAULT_HEAD_PORT, DEFAULT_HOST

    return f"http://{DEFAULT_HOST}:{DEFAULT_HEAD_PORT}"


def head_token(head: str) -> str | None:
    """The token of the run whose head server is at ``head``: ``$GYM_AUTH_TOKEN``, else the file
    ``gym run`` wrote under ``$GYM_HOME/tokens/`` (None when neither exists)."""
    from gym_core.auth import token_for_head

    return token_for_head(head)


async def connect(head: str, timeout_s: float) -> ServerClient:
    """A client of the run behind ``head`` making ONE attempt per request, each bounded by
    ``timeout_s``: ``gym collect`` and ``gym reverify`` retry whole rows, in fresh sessions, and
    retrying here too would multiply them. A :class:`~gym_cli.exits.CommandFailed` saying how to start
    the servers when the head does not answer."""
    from gym_core.client import ServerClient
    from gym_core.errors import ServerCallError
    from gym_core.options import ClientConfig

    from gym_cli.exits import CommandFailed

    try:
        return await ServerClient.from_head(
            head, config=ClientConfig(timeout_s=timeout_s, max_attempts=1, deadline_s=timeout_s)
        )
    except ServerCallError as exc:
        raise CommandFailed(
            f"cannot reach the head server at {head} ({exc.detail}): start the servers with "
            "`gym run CONFIG` and pass its --head, or let this command start them with --serve CONFIG"
        ) from None


async def server_instances(client: ServerClient, head: str) -> list[dict[str, Any]]:
    """``GET /server_instances``: one row per server instance (name, plugin, url; from ``gym run`` also
    kind, pid, alive, exit_code, restarts and state: ``starting``, ``running``, ``restarting`` (back
    soon on the same url: a client may wait for ``running``) or ``exited``); an instance with
    ``replicas: N`` also has ``replicas``, each with ``name`` (``counter#1``), ``index``, ``url`` and, from
    ``gym run``, those fields (the row's own summarise them). A
    :class:`~gym_core.errors.ServerCallError` when the head does not answer."""
    return await client.get(head.rstrip("/"), "/server_instances")


def instance_kinds(rows: list[dict[str, Any]], server_types: Mapping[str, ServerType]) -> dict[str, str | None]:
    """The kind of each instance among ``rows``: the one the head reports, else the kind of the row's
    server type as registered here, else None (a type installed only in its own venv)."""
    kinds: dict[str, str | None] = {}
    for row in rows:
        kind = row.get("kind")
        if kind is None and row.get("plugin") in server_types:
            kind = server_types[row["plugin"]].kind
        kinds[row["name"]] = kind
    return kinds


def agent_instances(rows: list[dict[str, Any]], server_types: Mapping[str, ServerType]) -> list[str]:
    """The names of the agent instances among ``rows`` (see :func:`instance_kinds`)."""
    return [name for name, kind in instance_kinds(rows, server_types).items() if kind == "agent"]
