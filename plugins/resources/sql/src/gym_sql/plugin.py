"""Registers the ``bird_sql`` and ``spider2_lite`` resources servers, and bird_sql's aggregate
metrics, through gym's hooks.

This module imports only gym_core's light modules and the config: `gym plugin list` loads it in
every process that lists plugins, so the servers are named by strings and imported only by the
process that runs them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gym_core import hookimpl
from gym_core.metrics import pass_at_k_family

from gym_sql.config import SqlConfig

__all__ = ["bird_sql_metrics", "gym_aggregate_metrics", "gym_register_servers"]


@hookimpl
def gym_register_servers(register):
    register(
        name="bird_sql",
        kind="resources",
        server="gym_sql.server:BirdSqlServer",
        config=SqlConfig,
        description="Text-to-SQL (BIRD): reward 1 when the predicted query's rows equal the gold query's, as sets",
    )
    register(
        name="spider2_lite",
        kind="resources",
        server="gym_sql.server:Spider2LiteServer",
        config=SqlConfig,
        description="Text-to-SQL (Spider 2.0-Lite): reward 1 when every gold column is among the predicted columns",
    )


@hookimpl
def gym_aggregate_metrics(rollouts: list[dict[str, Any]]) -> dict[str, float] | None:
    # Called with the rows of this plugin's environments only; spider2_lite keeps the default metrics.
    bird = [r for r in rollouts if r.get("environment") == "bird_sql"]
    return bird_sql_metrics(bird) or None


def _pass_at_k_family(rollouts: Sequence[Mapping[str, Any]], prefix: str) -> dict[str, float]:
    return pass_at_k_family(
        rollouts,
        prefix,
        answer_field="extracted_sql",
        scores={"accuracy": lambda r: 1.0 if (r.get("reward") or 0.0) > 0 else 0.0},
        majority_score="accuracy",
    )


def bird_sql_metrics(rollouts: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """The spec's pass@k family over bird_sql rollouts, ×100, names prefixed ``bird_sql/``, then
    again per ``difficulty`` (``bird_sql/<difficulty>/...``).

    Scores: ``accuracy`` (reward > 0) and ``no_answer`` (``extracted_sql`` null); majority@k votes
    on ``extracted_sql``. Rollouts are grouped by ``task_index`` and ordered by ``rollout_index``;
    k runs over 1, 2, 4, ... up to the smallest number of rollouts of a task.
    """
    if not rollouts:
        return {}
    metrics = _pass_at_k_family(rollouts, "bird_sql/")
    by_difficulty: dict[str, list[Mapping[str, Any]]] = {}
    for row in rollouts:
        if isinstance(row.get("difficulty"), str):
            by_difficulty.setdefault(row["difficulty"], []).append(row)
    for difficulty, rows in sorted(by_difficulty.items()):
        metrics.update(_pass_at_k_family(rows, f"bird_sql/{difficulty}/"))
    return metrics
