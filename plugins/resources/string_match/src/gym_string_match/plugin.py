"""Registers the ``string_match`` resources server, and its aggregate metrics, through gym's hooks.

This module imports only gym_core's leaves and the config: `gym plugin list` loads it in every
process that lists plugins, so the server is named by a string and imported only by the process
that runs it.
"""

from __future__ import annotations

from typing import Any

from gym_core import hookimpl
from gym_core.metrics import summarize

from gym_string_match.config import StringMatchConfig

NEAR_MATCH_REWARD = 0.98  # gym_string_match.grading.NEAR_MATCH_REWARD, not imported: keep this module light


@hookimpl
def gym_register_servers(register):
    register(
        name="string_match",
        kind="resources",
        server="gym_string_match.server:StringMatchServer",
        config=StringMatchConfig,
        description="Reward 1 (or 0.98 when only numerically close) when the extracted answer matches expected_answer",
    )


@hookimpl
def gym_aggregate_metrics(rollouts: list[dict[str, Any]]) -> dict[str, float] | None:
    # Called with the rows that string_match environments verified only (gym routes them by `environment`).
    n = len(rollouts)
    metrics = {
        "string_match/no_answer": sum(r.get("extracted_answer") is None for r in rollouts) / n,
        "string_match/exact_match_rate": sum(r.get("reward") == 1.0 for r in rollouts) / n,
        "string_match/near_match_rate": sum(r.get("reward") == NEAR_MATCH_REWARD for r in rollouts) / n,
        "string_match/timeout_rate": sum(r.get("reason") == "timeout" for r in rollouts) / n,
    }
    by_mode: dict[str, list[float]] = {}
    for row in rollouts:
        reward = row.get("reward")
        if isinstance(reward, (int, float)) and not isinstance(reward, bool):
            by_mode.setdefault(row.get("extraction_mode") or "final_answer", []).append(float(reward))
    for mode, rewards in sorted(by_mode.items()):
        metrics[f"string_match/{mode}/mean_reward"] = summarize(rewards)["mean"]
    return metrics
