"""The rich consoles gym's commands print on: as wide as the terminal on a terminal; piped or logged,
as wide as the text needs (``$COLUMNS`` when set), so that a table is never cut to rich's default of
80 columns in a file or a CI log."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["output_console", "NOT_A_TERMINAL_WIDTH"]

NOT_A_TERMINAL_WIDTH = 1000
"""The width of a console whose stream is not a terminal (and ``$COLUMNS`` is not set): wider than any
table gym prints, which takes only the width it needs."""


def output_console(*, stderr: bool = False, **options: Any) -> Console:
    """A :class:`rich.console.Console` on stdout (``stderr``: on stderr) with ``options``."""
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    if "width" not in options and not os.environ.get("COLUMNS") and not _is_terminal(stream):
        options["width"] = NOT_A_TERMINAL_WIDTH
    return Console(stderr=stderr, **options)


def _is_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # a replaced or closed stream
        return False
