"""Registers the ``equivalence_rule`` resources server type, and its aggregate metrics, through gym's hooks.

This module imports only gym_core's leaves and the config: `gym plugin list` loads it in every
process that lists plugins, so the server is named by a string and imported only where it runs.
"""

from __future__ import annotations

from typing import Any

from gym_core import hookimpl
from gym_core.metrics import summarize

from gym_equivalence_rule.config import EquivalenceRuleConfig

__all__ = ["gym_register_servers", "gym_aggregate_metrics"]

PREFIX = "equivalence_rule"
_STATISTICS = ("mean", "std", "min", "max", "median")


@hookimpl
def gym_register_servers(register):
    register(
        name="equivalence_rule",
        kind="resources",
        server="gym_equivalence_rule.server:EquivalenceRuleServer",
        config=EquivalenceRuleConfig,
        description="Whole response vs expected_answer: exact match or difflib similarity (MRCR-style)",
    )


@hookimpl
def gym_aggregate_metrics(rollouts: list[dict[str, Any]]) -> dict[str, float] | None:
    """The reference's default statistics of ``equivalence_score`` (mean, std, min, max, median)
    over this environment's rows only, and the share of rollouts that reproduced the answer
    (score 1.0). gym's profile drops ``response`` before calling plugins, so token usage is not
    summarised here."""
    scores = [
        row["equivalence_score"]
        for row in rollouts
        if isinstance(row.get("equivalence_score"), (int, float)) and not isinstance(row["equivalence_score"], bool)
    ]
    if not scores:
        return None
    summary = summarize(scores)
    metrics = {f"{PREFIX}/{stat}/equivalence_score": summary[stat] for stat in _STATISTICS}
    metrics[f"{PREFIX}/full_match_rate"] = sum(1 for s in scores if s >= 1.0) / len(scores)
    return metrics
