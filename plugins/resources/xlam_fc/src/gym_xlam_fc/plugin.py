"""Registers the ``xlam_fc`` resources server, and its aggregate metrics, through gym's hooks.

This module imports only gym_core and the config: `gym plugin list` loads it in every process that
lists plugins, so the server is named by a string and imported only by the process that runs it.
"""

from __future__ import annotations

from typing import Any

from gym_core import hookimpl

from gym_xlam_fc.config import XlamFcConfig


@hookimpl
def gym_register_servers(register):
    register(
        name="xlam_fc",
        kind="resources",
        server="gym_xlam_fc.server:XlamFcServer",
        config=XlamFcConfig,
        description="Function calling: reward 1 when the model's calls match expected_answers exactly (xLAM)",
    )


def _total(rollouts: list[dict[str, Any]], field: str) -> int:
    return sum(r[field] for r in rollouts if isinstance(r.get(field), int) and not isinstance(r.get(field), bool))


@hookimpl
def gym_aggregate_metrics(rollouts: list[dict[str, Any]]) -> dict[str, float] | None:
    # gym routes only the rows xlam_fc verified here. The per-field means (mean/num_correct...) are
    # gym's built-in statistics; these pool the counts over all rollouts instead.
    expected, predicted, correct = (_total(rollouts, f) for f in ("num_expected", "num_predicted", "num_correct"))
    metrics = {"xlam_fc/no_call_rate": sum(1 for r in rollouts if r.get("num_predicted") == 0) / len(rollouts)}
    if expected:
        metrics["xlam_fc/call_recall"] = correct / expected
    if predicted:
        metrics["xlam_fc/call_precision"] = correct / predicted
    return metrics
