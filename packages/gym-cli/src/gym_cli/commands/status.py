"""``gym status``: the servers of the running ``gym run``, each with its health. Without ``--head``, the
run is found as every command finds it (:func:`gym_cli.head.find_head`)."""

from __future__ import annotations

import json

import click

from gym_cli.exits import CommandFailed
from gym_cli.head import head_help, node_label

__all__ = ["status"]


async def _status(head: str) -> list[dict]:
    import asyncio

    from gym_core.client import ServerClient
    from gym_core.errors import ServerCallError
    from gym_core.options import ClientConfig

    from gym_cli.head import head_token, live_runs, runs_listing, server_instances

    async with ServerClient(
        config=ClientConfig(timeout_s=5, max_attempts=1), auth_token=head_token(head), auth_urls=[head]
    ) as client:
        try:
            instances = await server_instances(client, head)
        except ServerCallError as exc:
            runs = live_runs()
            hint = (
                f"; runs of this user (pick one with --head URL):\n{runs_listing(runs)}"
                if runs
                else " (start them with `gym run CONFIG`)"
            )
            raise CommandFailed(f"no gym servers are running at {head}: {exc.detail}{hint}") from None

        async def health(row: dict) -> dict:
            if row.get("state") == "restarting":  # `gym run`'s supervisor is bringing it back
                return {**row, "health": "restarting (its sessions are lost)"}
            if row.get("alive") is False:  # reported by `gym run`'s supervisor: no need to ask
                return {**row, "health": f"exited with code {row.get('exit_code')}"}
            try:
                await client.request("GET", row["url"], "/health", server_name=row["name"])
                return {**row, "health": "ok"}
            except ServerCallError as exc:
                return {**row, "health": f"down: {exc.detail}"}

        return list(await asyncio.gather(*(health(row) for row in _each_replica(instances))))


def _each_replica(instances: list[dict]) -> list[dict]:
    """One row per server process: a replicated instance's row becomes one per replica (``counter#1``,
    its own url, pid, state and restarts), each with ``instance``, the name they share."""
    rows = []
    for row in instances:
        shared = {k: v for k, v in row.items() if k != "replicas"}
        replicas = row.get("replicas") or []
        rows.extend([{**shared, **replica, "instance": row["name"]} for replica in replicas] or [row])
    return rows


@click.command()
@click.option("--head", default=None, metavar="URL", help=head_help())
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def status(head: str | None, as_json: bool) -> None:
    """Show the servers of the running `gym run`, whether each answers, and how many times each
    was restarted after dying. Each replica of an instance with `replicas: N` is a row (`name#i`).

    Exits 1 when no head server answers at HEAD (the message lists the runs of this user) or some
    server is down (or restarting), 2 when several runs are running and --head does not say which.

    \b
    Example:
      gym status --head http://127.0.0.1:11000
    """
    import asyncio

    from rich.markup import escape
    from rich.table import Table

    from gym_cli.consoles import output_console
    from gym_cli.head import find_head

    head = find_head(head)
    rows = asyncio.run(_status(head))
    if as_json:
        click.echo(json.dumps(rows, indent=2))
    else:
        table = Table(title=f"gym servers ({head})")
        on_ray = any(row.get("node") for row in rows)  # placed on a Ray cluster: say where each one runs
        for column in (
            "instance",
            "kind",
            "server type",
            "url",
            *(("Ray node",) if on_ray else ()),
            "health",
            "restarts",
        ):
            table.add_column(column)
        for row in rows:
            style = "green" if row["health"] == "ok" else "red"
            node = (node_label(row.get("node")),) if on_ray else ()
            table.add_row(
                row["name"],
                row.get("kind", "?"),
                row.get("plugin", "?"),
                row["url"],
                *node,
                f"[{style}]{escape(row['health'])}[/]",
                str(row.get("restarts", "-")),
            )
        output_console().print(table)
    down = [row["name"] for row in rows if row["health"] != "ok"]
    if down:
        raise CommandFailed(f"{len(down)} of {len(rows)} servers are not healthy: {', '.join(down)}")
