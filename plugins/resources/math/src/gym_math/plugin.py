"""Registers the ``math`` resources server, and its aggregate metric, through gym's hooks."""

from __future__ import annotations

from typing import Any

from gym_core import hookimpl

from gym_math.config import MathConfig


@hookimpl
def gym_register_servers(register):
    register(
        name="math",
        kind="resources",
        server="gym_math.server:MathServer",
        config=MathConfig,
        description="Reward 1 when the last \\boxed{} answer equals expected_answer (math-verify)",
    )


@hookimpl
def gym_aggregate_metrics(rollouts: list[dict[str, Any]]) -> dict[str, float] | None:
    rows = [r for r in rollouts if "extracted_answer" in r and "expected_answer" in r]
    if not rows:
        return None
    boxed = sum(1 for r in rows if r["extracted_answer"] is not None)
    return {"math/boxed_answer_rate": boxed / len(rows)}
