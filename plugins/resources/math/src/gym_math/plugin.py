"""Registers the ``math`` resources server type, and its aggregate metric, through gym's hooks.

The server is named by its ``"module:Class"`` path, so listing plugins imports no server code
(nor sympy and math-verify).
"""

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
    # Called with the rows that math environments verified only (gym routes them by `environment`).
    boxed = sum(1 for r in rollouts if r.get("extracted_answer") is not None)
    return {"math/boxed_answer_rate": boxed / len(rollouts)}
