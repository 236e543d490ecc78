"""Registers the ``code_gen`` resources server, and its aggregate metrics, through gym's hooks.

This module imports only gym_core's light modules and the config: `gym plugin list` loads it in
every process that lists plugins, so the server is named by a string and imported only by the
process that runs it.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from gym_core import hookimpl
from gym_core.metrics import pass_at_k_family

from gym_code_gen.config import CodeGenConfig

__all__ = ["gym_aggregate_metrics", "gym_register_servers", "code_gen_metrics"]

PREFIX = "code_gen/"


@hookimpl
def gym_register_servers(register):
    register(
        name="code_gen",
        kind="resources",
        server="gym_code_gen.server:CodeGenServer",
        config=CodeGenConfig,
        description="Competitive programming: reward 1 when the model's Python program passes every unit test "
        "(run in gym's sandbox)",
    )


@hookimpl
def gym_aggregate_metrics(rollouts: list[dict[str, Any]]) -> dict[str, float] | None:
    # Called with the rows that code_gen environments verified only (gym routes them by `environment`).
    return code_gen_metrics(rollouts) or None


def _accuracy(row: Mapping[str, Any]) -> float:
    reward = row.get("reward")
    return 1.0 if isinstance(reward, (int, float)) and not isinstance(reward, bool) and reward > 0 else 0.0


def _family(rollouts: Sequence[Mapping[str, Any]], prefix: str) -> dict[str, float]:
    metrics = pass_at_k_family(
        rollouts,
        prefix,
        answer_field="extracted_model_code",
        scores={"accuracy": _accuracy},
        majority_score="accuracy",
    )
    by_task: dict[Any, list[float]] = {}
    for row in rollouts:
        by_task.setdefault(row.get("task_index"), []).append(_accuracy(row))
    k = min(len(scores) for scores in by_task.values())
    spreads = [statistics.stdev(scores) if len(scores) > 1 else 0.0 for scores in by_task.values()]
    metrics[f"{prefix}pass@1[avg-of-{k}]/accuracy/avg_sample_std_dev"] = 100 * statistics.fmean(spreads)
    return metrics


def code_gen_metrics(rollouts: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """The spec's pass@k family over code_gen rollouts, ×100, names prefixed ``code_gen/``.

    Scores per rollout: ``accuracy`` (1 when the reward is above 0) and ``no_answer`` (1 when
    ``extracted_model_code`` is null); answers for ``majority@k``: ``extracted_model_code``. Rollouts
    are grouped by ``task_index`` and ordered by ``rollout_index``; ``k`` runs over 1, 2, 4, ... up
    to the smallest number of rollouts of a task (K) (see :func:`gym_core.metrics.pass_at_k_family`),
    plus ``pass@1[avg-of-K]/accuracy/avg_sample_std_dev`` (the mean over tasks of the sample std of
    their accuracies). The same family again per ``difficulty`` (``code_gen/<difficulty>/...``),
    and ``code_gen/reasoning_format_violation_rate`` (the mean over rows that report it).
    """
    if not rollouts:
        return {}
    metrics = _family(rollouts, PREFIX)
    by_difficulty: dict[str, list[Mapping[str, Any]]] = {}
    for row in rollouts:
        if isinstance(row.get("difficulty"), str):
            by_difficulty.setdefault(row["difficulty"], []).append(row)
    for difficulty, rows in sorted(by_difficulty.items()):
        metrics.update(_family(rows, f"{PREFIX}{difficulty}/"))
    rates = [
        float(r["reasoning_format_violation_rate"])
        for r in rollouts
        if isinstance(r.get("reasoning_format_violation_rate"), (int, float))
    ]
    if rates:
        metrics[f"{PREFIX}reasoning_format_violation_rate"] = statistics.fmean(rates)
    return metrics
