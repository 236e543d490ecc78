"""``gym stop``: being written (issue 16)."""

from __future__ import annotations

import click

__all__ = ["stop"]


@click.command()
def stop() -> None:
    """Not yet available."""
    raise click.UsageError("gym stop is not available yet")
