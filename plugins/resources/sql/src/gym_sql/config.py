"""Options of a ``bird_sql`` or ``spider2_lite`` server instance, validated when a config is loaded.

Kept apart from the server so that registering the plugin imports nothing heavy. Each option's
description (``Meta(description=...)``) is what `gym plugin show` prints.
"""

from __future__ import annotations

from typing import Annotated

from msgspec import Meta

from gym_core import ServerConfig

__all__ = ["SqlConfig"]


class SqlConfig(ServerConfig, kw_only=True):
    db_dir: Annotated[
        str | None,
        Meta(
            description="directory of the SQLite databases: a row's db_id names <db_dir>/<db_id>.sqlite or "
            "<db_dir>/<db_id>/<db_id>.sqlite (BIRD's layout); default: the plugin's example databases, "
            "built at start-up"
        ),
    ] = None
    sql_execution_timeout_s: Annotated[
        float, Meta(gt=0, description="time limit of each query (gold and predicted); a query past it gives no result")
    ] = 30.0
    max_concurrency: Annotated[
        int, Meta(ge=1, description="worker processes running queries at once (started as needed)")
    ] = 32
    max_rows: Annotated[
        int, Meta(ge=1, description="a query yielding more rows than this gives no result (bounds memory)")
    ] = 100_000
    memory_limit_mb: Annotated[
        Annotated[int, Meta(ge=64)] | None,
        Meta(
            description="address-space limit of each worker process (None: no limit); a query needing more gives no result"
        ),
    ] = 2048
