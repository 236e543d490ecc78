"""Options of a ``structured_outputs`` server instance, validated when a config is loaded.

Kept apart from the server so that registering the plugin imports no parser or validator. Each
option's description (``Meta(description=...)``) is what `gym plugin show structured_outputs` prints.
"""

from __future__ import annotations

from typing import Annotated

from msgspec import Meta

from gym_core import ServerConfig

__all__ = ["StructuredOutputsConfig"]


class StructuredOutputsConfig(ServerConfig, kw_only=True):
    xml_coerce_types: Annotated[
        bool,
        Meta(
            description="convert XML string leaves to the types the schema declares (integer, number, boolean, arrays) before validating"
        ),
    ] = True
    verify_timeout_s: Annotated[
        float,
        Meta(
            gt=0,
            description="hard limit per check (parse + validate): a pathological document scores 0 with error_type 'timeout'",
        ),
    ] = 10.0
    verify_workers: Annotated[
        Annotated[int, Meta(ge=1)] | None,
        Meta(
            description="worker processes parsing and validating; default: $GYM_STRUCTURED_OUTPUTS_WORKERS or min(4, CPUs)"
        ),
    ] = None
    verify_memory_limit_mb: Annotated[
        Annotated[int, Meta(ge=256)] | None,
        Meta(
            description="address-space limit of each worker (None: no limit); "
            "a document needing more scores 0 with error_type 'memory_limit'"
        ),
    ] = 2048
