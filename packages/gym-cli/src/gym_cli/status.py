"""``gym status``: the servers of the running ``gym run``, each with its health."""

from __future__ import annotations

import asyncio
import json
import sys

import click
from rich.console import Console
from rich.table import Table

from gym_core import ClientConfig, ServerCallError, ServerClient
from gym_core.config import DEFAULT_HEAD_PORT

DEFAULT_HEAD = f"http://127.0.0.1:{DEFAULT_HEAD_PORT}"


async def _status(head: str) -> list[dict]:
    config = ClientConfig(timeout_s=5, max_attempts=1)
    async with ServerClient(config=config) as client:
        instances = await client.get(head, "/server_instances")

        async def health(row: dict) -> dict:
            try:
                await client.request("GET", row["url"], "/health", server_name=row["name"])
                return {**row, "health": "ok"}
            except ServerCallError as exc:
                return {**row, "health": f"down: {exc.detail}"}

        return list(await asyncio.gather(*(health(row) for row in instances)))


@click.command()
@click.option("--head", default=DEFAULT_HEAD, show_default=True, help="URL of the head server of `gym run`.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def status(head: str, as_json: bool) -> None:
    """Show the servers of the running `gym run` and whether each answers.

    \b
    Example:
      gym status --head http://127.0.0.1:11000
    """
    console = Console()
    try:
        rows = asyncio.run(_status(head.rstrip("/")))
    except ServerCallError:
        Console(stderr=True, soft_wrap=True).print(f"no gym servers are running at {head} (start them with `gym run CONFIG`)")
        sys.exit(1)
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    table = Table(title=f"gym servers ({head})")
    for column in ("instance", "kind", "plugin", "url", "health"):
        table.add_column(column)
    for row in rows:
        style = "green" if row["health"] == "ok" else "red"
        table.add_row(row["name"], row.get("kind", "?"), row.get("plugin", "?"), row["url"], f"[{style}]{row['health']}[/]")
    console.print(table)
    if any(row["health"] != "ok" for row in rows):
        sys.exit(1)
