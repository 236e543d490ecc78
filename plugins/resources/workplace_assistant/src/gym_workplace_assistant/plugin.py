"""Registers the ``workplace_assistant`` resources server, and its aggregate metrics, through gym's hooks.

This module imports only gym_core's light modules and the config: `gym plugin list` loads it in
every process that lists plugins, so the server is named by a string and imported only by the
process that runs it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gym_core import hookimpl
from gym_core.metrics import summarize

from gym_workplace_assistant.config import WorkplaceAssistantConfig

__all__ = ["gym_register_servers", "gym_aggregate_metrics", "workplace_assistant_metrics"]


@hookimpl
def gym_register_servers(register):
    register(
        name="workplace_assistant",
        kind="resources",
        server="gym_workplace_assistant.server:WorkplaceAssistantServer",
        config=WorkplaceAssistantConfig,
        description="Workplace tools (email, calendar, analytics, projects, CRM): reward 1 when replaying the calls "
        "leaves the tables as the ground truth does",
    )


@hookimpl
def gym_aggregate_metrics(rollouts: list[dict[str, Any]]) -> dict[str, float] | None:
    # gym routes only the rows workplace_assistant verified here; the spec's metrics are gym's
    # built-in statistics, to which these add the reward per task category and the timeouts.
    return workplace_assistant_metrics(rollouts) or None


def workplace_assistant_metrics(rollouts: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Over workplace_assistant rollouts, names prefixed ``workplace_assistant/``:
    ``<category>/mean/reward`` for each task ``category`` the rollouts carry, and ``timeout_rate``,
    the fraction of verifications whose replay ran out of time (``reason: "timeout"``)."""
    metrics: dict[str, float] = {}
    by_category: dict[str, list[float]] = {}
    for rollout in rollouts:
        category, reward = rollout.get("category"), rollout.get("reward")
        if isinstance(category, str) and isinstance(reward, (int, float)) and not isinstance(reward, bool):
            by_category.setdefault(category, []).append(float(reward))
    for category, rewards in sorted(by_category.items()):
        metrics[f"workplace_assistant/{category}/mean/reward"] = summarize(rewards)["mean"]
    if rollouts:
        metrics["workplace_assistant/timeout_rate"] = sum(r.get("reason") == "timeout" for r in rollouts) / len(
            rollouts
        )
    return metrics
