"""Registers the ``mcqa`` resources server, and its aggregate metrics, through gym's hooks.

This module imports only gym_core's light modules and the config: `gym plugin list` loads it in
every process that lists plugins, so the server is named by a string and imported only by the
process that runs it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gym_core import hookimpl
from gym_core.metrics import pass_at_k_family

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
    return pass_at_k_family(
        rollouts,
        "mcqa/",
        answer_field="extracted_answer",
        scores={"accuracy": lambda r: float(r.get("reward") or 0.0)},
        majority_score="accuracy",
    )
