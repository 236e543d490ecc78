"""Registers the ``reasoning_gym`` resources server, its aggregate metrics and its CLI command
(``gym reasoning-gym``) through gym's hooks.

This module imports only gym_core's light modules, click and the config: `gym plugin list` and
`gym --help` load it, so the server is named by a string and the library is imported only inside
the functions that need it.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from gym_core import hookimpl

from gym_reasoning_gym.config import ReasoningGymConfig

__all__ = ["gym_aggregate_metrics", "gym_register_commands", "gym_register_servers", "reasoning_gym_metrics"]


@hookimpl
def gym_register_servers(register):
    register(
        name="reasoning_gym",
        kind="resources",
        server="gym_reasoning_gym.server:ReasoningGymServer",
        config=ReasoningGymConfig,
        description="reasoning-gym's ~100 procedural tasks, each scored by the library's own scorer",
    )


@hookimpl
def gym_register_commands(register):
    from gym_reasoning_gym.commands import reasoning_gym

    register(reasoning_gym)


@hookimpl
def gym_aggregate_metrics(rollouts: list[dict[str, Any]]) -> dict[str, float] | None:
    # Called with the rows that reasoning_gym environments verified only.
    return reasoning_gym_metrics(rollouts) or None


def reasoning_gym_metrics(rollouts: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Per task of a mix (``task_name``): ``reasoning_gym/<task>/mean_reward`` and
    ``reasoning_gym/<task>/rollouts``; overall ``reasoning_gym/timeout_rate`` and
    ``reasoning_gym/error_rate`` (scorers that ran out of time or raised). gym's own statistics
    (mean reward, pass@k...) come beside these, as the spec's default metrics."""
    by_task: dict[str, list[float]] = {}
    for row in rollouts:
        by_task.setdefault(str(row.get("task_name") or "unknown"), []).append(float(row.get("reward") or 0.0))
    if not by_task:
        return {}
    metrics: dict[str, float] = {}
    for task, rewards in sorted(by_task.items()):
        metrics[f"reasoning_gym/{task}/mean_reward"] = statistics.fmean(rewards)
        metrics[f"reasoning_gym/{task}/rollouts"] = float(len(rewards))
    for reason in ("timeout", "error"):
        metrics[f"reasoning_gym/{reason}_rate"] = sum(r.get("reason") == reason for r in rollouts) / len(rollouts)
    return metrics
