"""Registers the ``bird_sql`` and ``spider2_lite`` resources servers, and bird_sql's aggregate
metrics, through gym's hooks.

This module imports only gym_core's light modules and the config: `gym plugin list` loads it in
every process that lists plugins, so the servers are named by strings and imported only by the
process that runs them.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from gym_core import hookimpl
from gym_core.metrics import pass_at_k

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


def _ks(max_k: int) -> list[int]:
    """1, 2, 4, ... up to ``max_k``, and ``max_k`` itself."""
    ks = [1 << i for i in range(max_k.bit_length()) if 1 << i <= max_k]
    return ks if ks[-1] == max_k else [*ks, max_k]


def _first_k_majority(answers: Sequence[Any], scores: Sequence[float], k: int) -> float:
    """Among the first ``k`` rollouts with an answer, the most frequent ``(answer, score)`` group's
    score (tied groups averaged); 0 when none answered: the spec's majority@k."""
    groups = Counter((a, s) for a, s in list(zip(answers, scores))[:k] if a is not None)
    if not groups:
        return 0.0
    top = max(groups.values())
    return statistics.fmean(score for (_, score), count in groups.items() if count == top)


def _pass_at_k_family(rollouts: Sequence[Mapping[str, Any]], prefix: str) -> dict[str, float]:
    by_task: dict[Any, list[Mapping[str, Any]]] = {}
    for row in rollouts:
        by_task.setdefault(row.get("task_index"), []).append(row)
    tasks = []
    for rows in by_task.values():
        rows = sorted(rows, key=lambda r: r.get("rollout_index") if isinstance(r.get("rollout_index"), int) else 0)
        answers = [r.get("extracted_sql") for r in rows]
        tasks.append(
            {
                "answers": answers,
                "accuracy": [1.0 if (r.get("reward") or 0.0) > 0 else 0.0 for r in rows],
                "no_answer": [1.0 if a is None else 0.0 for a in answers],
            }
        )
    max_k = min(len(t["answers"]) for t in tasks)
    metrics: dict[str, float] = {}
    for k in _ks(max_k):
        for score in ("accuracy", "no_answer"):
            metrics[f"{prefix}pass@{k}/{score}"] = 100 * statistics.fmean(
                pass_at_k(len(t[score]), int(sum(t[score])), k) for t in tasks
            )
            metrics[f"{prefix}pass@1[avg-of-{k}]/{score}"] = 100 * statistics.fmean(
                statistics.fmean(t[score][:k]) for t in tasks
            )
        metrics[f"{prefix}majority@{k}/accuracy"] = 100 * statistics.fmean(
            _first_k_majority(t["answers"], t["accuracy"], k) for t in tasks
        )
    for score in ("accuracy", "no_answer"):
        runs = [statistics.fmean(t[score][j] for t in tasks) for j in range(max_k)]
        std = statistics.stdev(runs) if len(runs) > 1 else 0.0
        metrics[f"{prefix}pass@1[avg-of-{max_k}]/{score}/std_dev_across_runs"] = 100 * std
        metrics[f"{prefix}pass@1[avg-of-{max_k}]/{score}/std_err_across_runs"] = 100 * std / math.sqrt(len(runs))
    return metrics


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
