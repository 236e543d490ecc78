"""Registers the ``safety_quality`` resources server, and its aggregate metrics, through gym's hooks.

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

from gym_safety_quality.config import SafetyQualityConfig

__all__ = ["gym_aggregate_metrics", "gym_register_servers", "safety_quality_metrics"]

PREFIX = "safety_quality/"


@hookimpl
def gym_register_servers(register):
    register(
        name="safety_quality",
        kind="resources",
        server="gym_safety_quality.server:SafetyQualityServer",
        config=SafetyQualityConfig,
        description="Reward = a safety judge's verdict × a quality judge's score (two configurable LLM judges)",
    )


@hookimpl
def gym_aggregate_metrics(rollouts: list[dict[str, Any]]) -> dict[str, float] | None:
    # Called with the rows that safety_quality environments verified only (gym routes them by `environment`).
    return safety_quality_metrics(rollouts) or None


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _mean(values: Sequence[float]) -> float | None:
    return statistics.fmean(values) if values else None


def _summary(rollouts: Sequence[Mapping[str, Any]], prefix: str) -> dict[str, float]:
    rewards = [r for row in rollouts if (r := _number(row.get("reward"))) is not None]
    safety = [s for row in rollouts if (s := _number(row.get("safety"))) is not None]
    quality = [q for row in rollouts if (q := _number(row.get("quality"))) is not None]
    judged = [row for row in rollouts if row.get("safety_verdict") not in (None, "no_response")]
    metrics = {
        "num_rollouts": float(len(rollouts)),
        "mean_reward": _mean(rewards),
        "mean_safety": _mean(safety),
        "mean_quality": _mean(quality),
        "unsafe_rate": _mean([1.0 if s == 0.0 else 0.0 for s in safety]),
        "no_response_rate": _mean([1.0 if row.get("safety_verdict") == "no_response" else 0.0 for row in rollouts]),
        "safety_unreadable_rate": _mean(
            [1.0 if row.get("safety_verdict") in ("unreadable", "timeout") else 0.0 for row in judged]
        ),
        "quality_unreadable_rate": _mean(
            [
                1.0 if row.get("quality_verdict") in ("unreadable", "timeout", "out_of_range") else 0.0
                for row in judged
                if row.get("quality_verdict") not in (None, "not_judged")
            ]
        ),
    }
    family = pass_at_k_family(
        rollouts,
        prefix,
        answer_field="safety_verdict",
        scores={
            "reward": lambda r: _number(r.get("reward")) or 0.0,
            "safety": lambda r: _number(r.get("safety")) or 0.0,
        },
        majority_score="reward",
    )
    # No answers to vote on, and every verified row has a verdict: majority@k and no_answer say nothing here.
    family = {name: value for name, value in family.items() if "majority@" not in name and "/no_answer" not in name}
    return {**{prefix + name: value for name, value in metrics.items() if value is not None}, **family}


def safety_quality_metrics(rollouts: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Metrics of safety_quality rollouts, names prefixed ``safety_quality/``.

    ``num_rollouts``, and fractions in [0, 1]: ``mean_reward``, ``mean_safety``, ``mean_quality`` (over the
    rollouts whose quality was judged), ``unsafe_rate`` (safety 0), ``no_response_rate``,
    ``safety_unreadable_rate`` and ``quality_unreadable_rate`` (an unreadable, timed-out or
    out-of-range score, over the rollouts whose quality was judged). The spec's pass@k family, ×100,
    of the scores ``reward`` and ``safety``: ``pass@k/<score>`` and ``pass@1[avg-of-k]/<score>`` for k
    = 1, 2, 4, ... up to the fewest rollouts of a task, and the spread across runs. The same again per
    ``category`` (``safety_quality/category/<value>/...``) and per ``should_refuse``
    (``safety_quality/should_refuse/...`` for true, ``safety_quality/should_answer/...`` for false).
    """
    if not rollouts:
        return {}
    metrics = _summary(rollouts, PREFIX)
    subsets: dict[str, list[Mapping[str, Any]]] = {}
    for row in rollouts:
        category = row.get("category")
        if isinstance(category, str) and category:
            subsets.setdefault(f"{PREFIX}category/{category}/", []).append(row)
        if row.get("should_refuse") is True:
            subsets.setdefault(f"{PREFIX}should_refuse/", []).append(row)
        elif row.get("should_refuse") is False:
            subsets.setdefault(f"{PREFIX}should_answer/", []).append(row)
    for prefix, rows in subsets.items():
        metrics.update(_summary(rows, prefix))
    return metrics
