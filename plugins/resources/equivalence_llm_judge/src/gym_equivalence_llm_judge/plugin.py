"""Registers the ``equivalence_llm_judge`` resources server, and its aggregate metrics, through gym's hooks.

The server is named by its ``"module:Class"`` path, so listing plugins imports no server code.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gym_core import hookimpl

from gym_equivalence_llm_judge.config import EquivalenceLlmJudgeConfig

__all__ = ["equivalence_metrics", "gym_aggregate_metrics", "gym_register_servers"]

PREFIX = "equivalence_llm_judge/"
# Every reason a verdict can give (EquivalenceLlmJudgeVerifyResponse.reason).
REASONS = (
    "equal",
    "swap_failed",
    "not_equal",
    "full_generation_equal",
    "full_generation_not_equal",
    "timeout",
    "error",
)


@hookimpl
def gym_register_servers(register):
    register(
        name="equivalence_llm_judge",
        kind="resources",
        server="gym_equivalence_llm_judge.server:EquivalenceLlmJudgeServer",
        config=EquivalenceLlmJudgeConfig,
        description="Open-ended answers graded by an LLM judge against a gold answer (STEM, long-context, "
        "NL-to-bash templates)",
    )


@hookimpl
def gym_aggregate_metrics(rollouts: list[dict[str, Any]]) -> dict[str, float] | None:
    # Called with the rows that equivalence_llm_judge environments verified only (gym routes them by `environment`).
    return equivalence_metrics(rollouts) or None


def equivalence_metrics(rollouts: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Beside gym's own statistics (reward mean, pass@k...), names prefixed ``equivalence_llm_judge/``:

    - ``no_answer``: share of rollouts with ``extracted_answer`` null (no assistant text, or an
      extraction that timed out);
    - ``judge_calls_per_rollout``: mean number of judge calls (1 to 2);
    - ``unlabelled_verdict_rate``: share of judge calls whose reply held neither label (or did not
      end with a message), read as "not equal";
    - ``reason/<reason>``: share of rollouts with each ``reason`` (``equal``, ``swap_failed``,
      ``not_equal``, ``full_generation_equal``, ``full_generation_not_equal``, ``timeout``, ``error``).
    """
    if not rollouts:
        return {}
    n = len(rollouts)
    evaluations = [e for r in rollouts for e in (r.get("judge_evaluations") or []) if isinstance(e, Mapping)]
    metrics = {
        f"{PREFIX}no_answer": sum(r.get("extracted_answer") is None for r in rollouts) / n,
        f"{PREFIX}judge_calls_per_rollout": len(evaluations) / n,
        f"{PREFIX}unlabelled_verdict_rate": (
            sum(e.get("verdict_label") is None for e in evaluations) / len(evaluations) if evaluations else 0.0
        ),
    }
    for reason in REASONS:
        metrics[f"{PREFIX}reason/{reason}"] = sum(r.get("reason") == reason for r in rollouts) / n
    return metrics
