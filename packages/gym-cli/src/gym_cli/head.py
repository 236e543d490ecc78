"""Finding the running ``gym run`` and asking its head server what it runs: every command that talks to
a run (``gym collect``, ``gym reverify``, ``gym status``, ``gym stop``) finds it the same way
(:func:`find_head`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gym_core.client import ServerClient
    from gym_core.registry import ServerType

    from gym_cli.launch.runstate import RecordedRun

__all__ = [
    "default_head",
    "live_runs",
    "runs_listing",
    "find_head",
    "head_help",
    "head_token",
    "connect",
    "server_instances",
    "instance_kinds",
    "agent_instances",
]


def node_label(node: Mapping[str, Any] | None) -> str:
    """How ``gym run``'s table and ``gym status`` show a server's Ray node (a ``/server_instances``
    row's ``node``): the start of its id, which ``resources: {node: ...}`` takes as a prefix (the URL
    has the node's IP); ``-`` for a server Ray did not place."""
    return str(node.get("id", "?"))[:12] if node else "-"


def default_head() -> str:
    """The URL of ``gym run``'s head server with the default ``head_server`` settings."""
    from gym_core.options import DEFAULT_HEAD_PORT, DEFAULT_HOST

    return f"http://{DEFAULT_HOST}:{DEFAULT_HEAD_PORT}"


def head_help() -> str:
    """The ``--head`` help of every command that talks to a run."""
    return (
        "Head server of the running `gym run` (as it printed it).  [default: the only run of this user, "
        f"which `gym status` shows; when none is recorded, {default_head()}]"
    )


def live_runs() -> list[RecordedRun]:
    """The runs (``gym run``, ``gym collect --serve``) whose launcher still runs, oldest first, from
    their state files under ``$GYM_HOME/runs`` (none where /proc is missing: nothing can be told)."""
    from gym_cli.launch.runstate import RecordedRun, runs_dir

    directory = runs_dir()
    return [run for run in RecordedRun.all_in(directory) if run.launcher_alive()] if directory.is_dir() else []


def runs_listing(runs: list[RecordedRun]) -> str:
    """One indented line per run (pid, head URL, age, servers, command), for messages."""
    return "\n".join(f"  {run.summary()}" for run in runs)


def find_head(head: str | None) -> str:
    """The head server of the run a command talks to: ``head`` (``--head``) when given; else the head of
    the only running run of this user (:func:`live_runs`); else, when none is recorded, the default head
    (:func:`default_head`). Several runs: a :class:`~gym_core.errors.GymError` (exit status 2) that lists
    them and asks for ``--head``."""
    from gym_core.errors import GymError

    if head:
        return head.rstrip("/")
    runs = [run for run in live_runs() if run.head_url]
    if len(runs) > 1:
        raise GymError(f"{len(runs)} gym runs are running; say which with --head URL:\n{runs_listing(runs)}")
    return runs[0].head_url.rstrip("/") if runs else default_head()


def head_token(head: str) -> str | None:
    """The token of the run whose head server is at ``head``: ``$GYM_AUTH_TOKEN``, else the file
    ``gym run`` wrote under ``$GYM_HOME/tokens/`` (None when neither exists)."""
    from gym_core.auth import token_for_head

    return token_for_head(head)


async def connect(head: str, timeout_s: float) -> ServerClient:
    """A client of the run behind ``head`` making ONE attempt per request, each bounded by
    ``timeout_s``: ``gym collect`` and ``gym reverify`` retry whole rows, in fresh sessions, and
    retrying here too would multiply them. When the head does not answer, nothing has run: a
    :class:`~gym_core.errors.GymError` (exit status 2) saying how to start the servers."""
    from gym_core.client import ServerClient
    from gym_core.errors import GymError, ServerCallError
    from gym_core.options import ClientConfig

    try:
        return await ServerClient.from_head(
            head, config=ClientConfig(timeout_s=timeout_s, max_attempts=1, deadline_s=timeout_s)
        )
    except ServerCallError as exc:
        raise GymError(
            f"cannot reach the head server at {head} ({exc.detail}): start the servers with "
            "`gym run CONFIG` (found without --head when it is your only run), or let this command start "
            "them with --serve CONFIG"
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
