"""Registers the ``arc_agi`` resources server type, and its aggregate metrics, through gym's hooks.

This module imports only gym_core's leaves and the config: listing plugins loads it in every
process, so the server is named by its ``"module:Class"`` path and imported only where it runs.
"""

from __future__ import annotations

from typing import Any

from gym_core import hookimpl
from gym_core.metrics import summarize

from gym_arc_agi.config import ArcAgiConfig

_STATS = ("mean", "std", "min", "max", "median")


@hookimpl
def gym_register_servers(register):
    register(
        name="arc_agi",
        kind="resources",
        server="gym_arc_agi.server:ArcAgiServer",
        config=ArcAgiConfig,
        description="ARC-AGI: reward 1 when the first (boxed first) grid of the answer equals expected_output",
    )


@hookimpl
def gym_aggregate_metrics(rollouts: list[dict[str, Any]]) -> dict[str, float] | None:
    # gym's own statistics cover numeric fields; the reference's default metrics also count the
    # bool extraction_successful as 0/1, so its statistics are added here.
    flags = [float(r["extraction_successful"]) for r in rollouts if isinstance(r.get("extraction_successful"), bool)]
    if not flags:
        return None
    stats = summarize(flags)
    return {f"arc_agi/{stat}/extraction_successful": stats[stat] for stat in _STATS}
