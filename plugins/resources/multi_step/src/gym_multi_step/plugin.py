"""Registers the ``multi_step`` resources server, and its aggregate metrics, through gym's hooks.

This module imports only gym_core's light modules and the config: `gym plugin list` loads it in
every process that lists plugins, so the server is named by a string and imported only by the
process that runs it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gym_core import hookimpl
from gym_core.metrics import summarize

from gym_multi_step.config import MultiStepConfig

__all__ = ["gym_register_servers", "gym_aggregate_metrics", "multi_step_metrics"]

# The bool fields of the verify response. gym's built-in statistics summarise numeric fields only
# (reward, set_overlap, num_lookups); the spec's default metrics count bools as 0/1 too.
BOOL_FIELDS = ("accuracy", "original_term_minefield_hit", "order_instruction_following_failure", "minefield_looked_up")


@hookimpl
def gym_register_servers(register):
    register(
        name="multi_step",
        kind="resources",
        server="gym_multi_step.server:MultiStepServer",
        config=MultiStepConfig,
        description="Look up synonym values with tools, then submit them in order: reward 1 for the exact list",
    )


@hookimpl
def gym_aggregate_metrics(rollouts: list[dict[str, Any]]) -> dict[str, float] | None:
    # Called with the rows that multi_step environments verified only (gym routes them by `environment`).
    return multi_step_metrics(rollouts) or None


def multi_step_metrics(rollouts: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Over multi_step rollouts, names prefixed ``multi_step/``: for each bool field of the verify
    response, ``mean/<field>``, its mean (true as 1) over the rollouts that have it; and
    ``unreadable_rate``, the fraction of rollouts whose submission could not be read or scored
    (``reason`` set)."""
    metrics: dict[str, float] = {}
    for field in BOOL_FIELDS:
        values = [float(r[field]) for r in rollouts if isinstance(r.get(field), bool)]
        if values:
            metrics[f"multi_step/mean/{field}"] = summarize(values)["mean"]
    if rollouts:
        metrics["multi_step/unreadable_rate"] = sum(r.get("reason") is not None for r in rollouts) / len(rollouts)
    return metrics
