"""Registers the ``mcqa`` resources server, and its aggregate metrics, through gym's hooks.

This module imports only gym_core's light modules and the config: `gym plugin list` loads it in
every process that lists plugins, so the server is named by a string and imported only by the
process that runs it.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from gym_core import hookimpl
from gym_core.metrics import pass_at_k

from gym_mcqa.config import McqaConfig

__all__ = ["gym_aggregate_metrics", "gym_register_servers", "mcqa_metrics"]


@hookimpl
def gym_register_servers(register):
    register(
        name="mcqa",
        kind="resources",
        server="gym_mcqa.server:McqaServer",
        config=McqaConfig,
        description="Multiple-choice QA: reward 1 when the extracted option letter equals the gold letter",
    )


@hookimpl
def gym_aggregate_metrics(rollouts: list[dict[str, Any]]) -> dict[str, float] | None:
    # Called with the rows that mcqa environments verified only (gym routes them by `environment`).
    return mcqa_metrics(rollouts) or None


def _first_k_majority(answers: Sequence[Any], scores: Sequence[float], k: int) -> float:
    """Among the first ``k`` rollouts with an answer, the most frequent ``(answer, score)`` group's
    score (tied groups averaged); 0 when none answered. Deterministic on rollout order, unlike
    :func:`gym_core.metrics.majority_at_k` (an expectation over random subsets): the spec's rule."""
    groups = Counter((a, s) for a, s in list(zip(answers, scores))[:k] if a is not None)
    if not groups:
        return 0.0
    top = max(groups.values())
    return statistics.fmean(score for (_, score), count in groups.items() if count == top)


def _ks(max_k: int) -> list[int]:
    """1, 2, 4, ... up to ``max_k``, and ``max_k`` itself."""
    ks = [1 << i for i in range(max_k.bit_length()) if 1 << i <= max_k]
    return ks if ks[-1] == max_k else [*ks, max_k]


def mcqa_metrics(rollouts: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """The spec's pass@k family over mcqa rollouts, ×100, names prefixed ``mcqa/``.

    Scores per rollout: ``accuracy`` (the reward) and ``no_answer`` (1 when ``extracted_answer``
    is null); answers for majority@k: ``extracted_answer``. Rollouts are grouped by
    ``task_index`` and ordered by ``rollout_index``; ``k`` runs over 1, 2, 4, ... up to the
    smallest number of rollouts of a task (K). For each k: ``pass@k/<score>`` (unbiased estimator
    over all of a task's rollouts), ``pass@1[avg-of-k]/<score>`` (mean of the first k) and
    ``majority@k/accuracy`` (first-k majority vote); for K also
    ``pass@1[avg-of-K]/<score>/std_dev_across_runs`` and ``.../std_err_across_runs`` (sample std of
    the per-rollout-index means, and std/√K). Key metrics: ``mcqa/pass@1/accuracy``, the highest k's
    ``pass@1[avg-of-k]`` and ``majority@k/accuracy``, ``pass@k/no_answer``.
    """
    by_task: dict[Any, list[Mapping[str, Any]]] = {}
    for row in rollouts:
        by_task.setdefault(row.get("task_index"), []).append(row)
    if not by_task:
        return {}
    tasks = []
    for rows in by_task.values():
        rows = sorted(rows, key=lambda r: r.get("rollout_index") if isinstance(r.get("rollout_index"), int) else 0)
        answers = [r.get("extracted_answer") for r in rows]
        tasks.append(
            {
                "answers": answers,
                "accuracy": [float(r.get("reward") or 0.0) for r in rows],
                "no_answer": [1.0 if a is None else 0.0 for a in answers],
            }
        )
    max_k = min(len(t["answers"]) for t in tasks)
    metrics: dict[str, float] = {}
    for k in _ks(max_k):
        for score in ("accuracy", "no_answer"):
            passes = []
            for t in tasks:
                values = t[score]
                if all(v in (0.0, 1.0) for v in values):
                    passes.append(pass_at_k(len(values), int(sum(values)), k))
                else:
                    passes.append(max(values[:k]))
            metrics[f"mcqa/pass@{k}/{score}"] = 100 * statistics.fmean(passes)
            metrics[f"mcqa/pass@1[avg-of-{k}]/{score}"] = 100 * statistics.fmean(
                statistics.fmean(t[score][:k]) for t in tasks
            )
        metrics[f"mcqa/majority@{k}/accuracy"] = 100 * statistics.fmean(
            _first_k_majority(t["answers"], t["accuracy"], k) for t in tasks
        )
    for score in ("accuracy", "no_answer"):
        runs = [statistics.fmean(t[score][j] for t in tasks) for j in range(max_k)]
        std = statistics.stdev(runs) if len(runs) > 1 else 0.0
        metrics[f"mcqa/pass@1[avg-of-{max_k}]/{score}/std_dev_across_runs"] = 100 * std
        metrics[f"mcqa/pass@1[avg-of-{max_k}]/{score}/std_err_across_runs"] = 100 * std / math.sqrt(len(runs))
    return metrics
