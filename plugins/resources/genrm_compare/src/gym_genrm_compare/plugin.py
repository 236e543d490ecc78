"""Registers the ``genrm_compare`` resources server, and its aggregate metrics, through gym's hooks.

This module imports only gym_core and the config: `gym plugin list` loads it in every process that
lists plugins, so the server is named by a string and imported only by the process that runs it.
"""

from __future__ import annotations

import statistics
from typing import Any

from gym_core import hookimpl

from gym_genrm_compare.config import GenrmCompareConfig

__all__ = ["gym_aggregate_metrics", "gym_register_servers", "genrm_metrics"]


@hookimpl
def gym_register_servers(register):
    register(
        name="genrm_compare",
        kind="resources",
        server="gym_genrm_compare.server:GenrmCompareServer",
        config=GenrmCompareConfig,
        description="Relative rewards for the rollouts of one prompt from pairwise comparisons by a generative "
        "reward model (genrm_model)",
    )


@hookimpl
def gym_aggregate_metrics(rollouts: list[dict[str, Any]]) -> dict[str, float] | None:
    # Called with the rows that genrm_compare environments verified only (gym routes them by `environment`).
    return genrm_metrics(rollouts) or None


def _numbers(rollouts: list[dict[str, Any]], name: str) -> list[float]:
    return [float(v) for r in rollouts if isinstance(v := r.get(name), (int, float)) and not isinstance(v, bool)]


def genrm_metrics(rollouts: list[dict[str, Any]]) -> dict[str, float]:
    """The spec's metrics over rollouts, names prefixed ``genrm_compare/``: the mean over rollouts of
    their cohort's ``mean_individual_score``, ``std_individual_score`` and ``tiebreak_usage_rate``
    (rollouts of a cohort that compared nothing left out); ``default_comparison_rate``, the share of
    comparisons that fell back to the neutral defaults; ``incomplete_cohort_rate``, the share of
    rollouts whose cohort timed out before it filled."""
    if not rollouts:
        return {}
    metrics = {}
    for name in ("mean_individual_score", "std_individual_score", "tiebreak_usage_rate"):
        values = _numbers(rollouts, name)
        if values:
            metrics[f"genrm_compare/{name}"] = statistics.fmean(values)
    comparisons = sum(_numbers(rollouts, "num_comparisons"))
    if comparisons:
        metrics["genrm_compare/default_comparison_rate"] = (
            sum(_numbers(rollouts, "num_default_comparisons")) / comparisons
        )
    metrics["genrm_compare/incomplete_cohort_rate"] = sum(
        1 for r in rollouts if r.get("cohort_complete") is False
    ) / len(rollouts)
    return metrics
