"""``gym report``: being written (issue 16)."""

from __future__ import annotations

import click

__all__ = ["report"]


@click.command()
def report() -> None:
    """Not yet available."""
    raise click.UsageError("gym report is not available yet")
