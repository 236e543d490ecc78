"""Registers the ``text_to_sql`` resources server, and its aggregate metrics, through gym's hooks.

This module imports only gym_core and the config: `gym plugin list` loads it in every process that
lists plugins, so the server (and the SQL extraction it needs) is named by a string and imported
only by the process that runs it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from gym_core import hookimpl

from gym_text_to_sql.config import TextToSqlConfig

__all__ = ["gym_aggregate_metrics", "gym_register_servers", "text_to_sql_metrics"]


@hookimpl
def gym_register_servers(register):
    register(
        name="text_to_sql",
        kind="resources",
        server="gym_text_to_sql.server:TextToSqlServer",
        config=TextToSqlConfig,
        description="Text-to-SQL without a database: an LLM judge compares the model's query with the gold one "
        "(both orders)",
    )


@hookimpl
def gym_aggregate_metrics(rollouts: list[dict[str, Any]]) -> dict[str, float] | None:
    # Called with the rows that text_to_sql environments verified only (gym routes them by `environment`).
    return text_to_sql_metrics(rollouts) or None


def _reward(row: Mapping[str, Any]) -> float:
    value = row.get("reward")
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0


def text_to_sql_metrics(rollouts: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """What the verdicts of text_to_sql rollouts say beside gym's reward statistics (pass@k,
    majority@k... are gym's own), as fractions of the rollouts, names prefixed ``text_to_sql/``:

    - ``judge_passed``: the mean of ``judge_passed`` (a bool, which gym's statistics leave out);
    - ``sql_extracted``: rollouts whose answer held SQL (``extracted_sql`` not null);
    - ``swap_failed``: rollouts judged equal first and not equal with the queries swapped;
    - ``failure_reason/<reason>``: each ``failure_reason`` seen;
    - ``<dialect>/mean_reward`` and ``<dialect>/rollouts`` (a count) per normalised ``sql_dialect``.
    """
    if not rollouts:
        return {}
    n = len(rollouts)
    metrics = {
        "text_to_sql/judge_passed": sum(1 for r in rollouts if r.get("judge_passed") is True) / n,
        "text_to_sql/sql_extracted": sum(1 for r in rollouts if r.get("extracted_sql") is not None) / n,
        "text_to_sql/swap_failed": sum(
            1 for r in rollouts
            if len(r.get("judge_evaluations") or ()) == 2 and r.get("judge_passed") is False
        ) / n,
    }  # fmt: skip
    reasons = Counter(str(r["failure_reason"]) for r in rollouts if r.get("failure_reason") is not None)
    for reason, count in sorted(reasons.items()):
        metrics[f"text_to_sql/failure_reason/{reason}"] = count / n
    by_dialect: dict[str, list[float]] = {}
    for row in rollouts:
        if isinstance(row.get("sql_dialect"), str):
            by_dialect.setdefault(row["sql_dialect"], []).append(_reward(row))
    for dialect, rewards in sorted(by_dialect.items()):
        metrics[f"text_to_sql/{dialect}/mean_reward"] = sum(rewards) / len(rewards)
        metrics[f"text_to_sql/{dialect}/rollouts"] = float(len(rewards))
    return metrics
