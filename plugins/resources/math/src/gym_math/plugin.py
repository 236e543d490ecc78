"""Registers the ``math`` resources server type, and its aggregate metrics, through gym's hooks.

The server is named by its ``"module:Class"`` path, so listing plugins imports no server code
(nor sympy and math-verify).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gym_core import hookimpl
from gym_core.metrics import pass_at_k_family

from gym_math.config import MathConfig

__all__ = ["gym_aggregate_metrics", "gym_register_servers", "math_metrics"]


@hookimpl
def gym_register_servers(register):
    register(
        name="math",
        kind="resources",
        server="gym_math.server:MathServer",
        config=MathConfig,
        description="Reward 1 when the response's answer equals expected_answer (Math-Verify, with an optional "
        "LLM-judge fallback: math_with_judge)",
    )


@hookimpl
def gym_aggregate_metrics(rollouts: list[dict[str, Any]]) -> dict[str, float] | None:
    # Called with the rows that math environments verified only (gym routes them by `environment`).
    if not rollouts:
        return None
    answered = sum(1 for r in rollouts if r.get("extracted_answer") is not None)
    metrics = {"math/boxed_answer_rate": answered / len(rollouts), **math_metrics(rollouts)}
    judged = sum(1 for r in rollouts if r.get("judge_evaluations") is not None)
    if judged:
        metrics["math/judge_rate"] = judged / len(rollouts)
    return metrics


def _score(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0


def math_metrics(rollouts: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """The spec's pass@k family (§1.4, §18) over math rollouts, ×100, names prefixed ``math/``.

    Scores per rollout: ``symbolic_accuracy`` (``library_reward``; the reward for rows without it)
    and ``no_answer`` (1 when ``extracted_answer`` is null); answers for majority@k:
    ``extracted_answer``. Rollouts are grouped by
    ``task_index`` and ordered by ``rollout_index``; ``k`` runs over 1, 2, 4, ... up to the smallest
    number of rollouts of a task (K). For each k: ``pass@k/<score>`` (the unbiased estimator over all
    of a task's rollouts for 0/1 scores, else the max of the first k), ``pass@1[avg-of-k]/<score>``
    (the mean of the first k) and ``majority@k/symbolic_accuracy`` (first-k majority vote); for K
    also ``pass@1[avg-of-K]/<score>/std_dev_across_runs`` and ``.../std_err_across_runs`` (the sample
    std of the per-rollout-index means, and std/√K).

    ``judge_accuracy`` (the reward) is the same family over the rollouts where the judge ran
    (``judge_evaluations`` not null) only, so its K is the smallest number of judged rollouts of a
    task that has any; absent when the judge never ran. The spec's key metrics: every
    ``pass@1[avg-of-K]``, and ``pass@K`` and ``majority@K`` of ``symbolic_accuracy`` (and of
    ``judge_accuracy``).
    """
    metrics = pass_at_k_family(
        rollouts,
        "math/",
        answer_field="extracted_answer",
        scores={"symbolic_accuracy": lambda r: _score(r.get("library_reward", r.get("reward")))},
        majority_score="symbolic_accuracy",
    )
    judged = [r for r in rollouts if r.get("judge_evaluations") is not None]
    if judged:
        family = pass_at_k_family(
            judged,
            "math/",
            answer_field="extracted_answer",
            scores={"judge_accuracy": lambda r: _score(r.get("reward"))},
            majority_score="judge_accuracy",
        )
        # Its no_answer entries would describe the judged rows only: the ones over all rows stand.
        metrics.update({name: value for name, value in family.items() if "/judge_accuracy" in name})
    return metrics
