"""Registers the ``instruction_following`` resources server, and its aggregate metrics, through gym's hooks.

This module imports only gym_core and the config: `gym plugin list` loads it in every process that
lists plugins, so the server (with NLTK and langdetect) is named by a string and imported only by the
process that runs it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gym_core import hookimpl

from gym_instruction_following.config import InstructionFollowingConfig

__all__ = [
    "gym_aggregate_metrics",
    "gym_register_servers",
    "instruction_following_metrics",
]


@hookimpl
def gym_register_servers(register):
    register(
        name="instruction_following",
        kind="resources",
        server="gym_instruction_following.server:InstructionFollowingServer",
        config=InstructionFollowingConfig,
        description="IFEval/IFBench-style verifiable instructions: reward 1 when all are followed (or the fraction followed)",
    )


@hookimpl
def gym_aggregate_metrics(rollouts: list[dict[str, Any]]) -> dict[str, float] | None:
    # Called with the rows that instruction_following environments verified only.
    return instruction_following_metrics(rollouts) or None


def instruction_following_metrics(
    rollouts: Sequence[Mapping[str, Any]],
) -> dict[str, float]:
    """Prompt- and instruction-level accuracy over instruction_following rollouts.

    - ``instruction_following/follow_all_instructions``: the share of rollouts that followed every
      instruction (IFEval's prompt-level accuracy), whatever their grading mode;
    - ``instruction_following/instruction_accuracy``: followed instructions over all instructions
      checked, pooled over rollouts (IFEval's instruction-level accuracy);
    - ``instruction_following/timeout_rate``: the share of rollouts whose check ran out of time.
    """
    if not rollouts:
        return {}
    n = len(rollouts)
    followed = [flag for r in rollouts for flag in (r.get("follow_instruction_list") or [])]
    metrics = {
        "instruction_following/follow_all_instructions": sum(bool(r.get("follow_all_instructions")) for r in rollouts)
        / n,
        "instruction_following/timeout_rate": sum(r.get("reason") == "timeout" for r in rollouts) / n,
    }
    if followed:
        metrics["instruction_following/instruction_accuracy"] = sum(bool(f) for f in followed) / len(followed)
    return metrics
