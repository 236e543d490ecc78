"""``gym reverify``: being written (issue 16)."""

from __future__ import annotations

import click

__all__ = ["reverify"]


@click.command()
def reverify() -> None:
    """Not yet available."""
    raise click.UsageError("gym reverify is not available yet")
