"""Registers the ``structured_outputs`` resources server type, and its aggregate metrics, through
gym's hooks.

This module imports only gym_core and the config: `gym plugin list` loads it in every process that
lists plugins, so the server (and its parsers and validator) is named by a string and imported only
by the process that runs it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from gym_core import hookimpl
from gym_core.metrics import summarize

from gym_structured_outputs.config import StructuredOutputsConfig

__all__ = ["gym_register_servers", "gym_aggregate_metrics", "breakdown_metrics"]

PREFIX = "structured_outputs/"

# (row field, metric infix, value when the row has none): mean reward per value of the field,
# named `structured_outputs/mean/reward_<infix><value>`. Rows without the field (and no default)
# are left out of its breakdown.
BREAKDOWNS: tuple[tuple[str, str, str | None], ...] = (
    ("schema_type", "", "json"),
    ("problem_type", "", None),
    ("schema_repr", "repr_", None),
    ("response_mode", "response_mode_", "text"),
    ("tool_schema_mode", "tool_schema_mode_", None),
    ("tool_choice", "tool_choice_", None),
    ("parallel_tool_calls", "parallel_tool_calls_", None),
    ("num_tools", "num_tools_", None),
    ("has_distractors", "has_distractors_", None),
    ("instruction_layout", "instruction_layout_", None),
    ("instruction_detail_level", "instruction_detail_level_", None),
    ("system_instruction_style", "system_instruction_style_", None),
    ("tool_name_style", "tool_name_style_", None),
    ("distractor_style", "distractor_style_", None),
    ("tool_union_mode", "tool_union_mode_", None),
)


@hookimpl
def gym_register_servers(register):
    register(
        name="structured_outputs",
        kind="resources",
        server="gym_structured_outputs.server:StructuredOutputsServer",
        config=StructuredOutputsConfig,
        description="Reward 1 when the JSON/YAML/XML/TOML/CSV output or the tool call's arguments match a JSON Schema",
    )


def _label(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower()
    return str(value)


def breakdown_metrics(rollouts: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Mean reward per value of each descriptive field (plain means in [0, 1]), and the share of
    rollouts per ``error_type``; names prefixed ``structured_outputs/``."""
    metrics: dict[str, float] = {}
    for field, infix, default in BREAKDOWNS:
        groups: dict[str, list[float]] = defaultdict(list)
        for row in rollouts:
            value = row.get(field)
            if value is None:
                value = default
            if value is None:
                continue
            groups[_label(value)].append(float(row.get("reward") or 0.0))
        for label, rewards in sorted(groups.items()):
            metrics[f"{PREFIX}mean/reward_{infix}{label}"] = summarize(rewards)["mean"]
    errors: dict[str, int] = defaultdict(int)
    for row in rollouts:
        if row.get("error_type"):
            errors[str(row["error_type"])] += 1
    for code, count in sorted(errors.items()):
        metrics[f"{PREFIX}error_rate/{code}"] = count / len(rollouts)
    return metrics


@hookimpl
def gym_aggregate_metrics(rollouts: list[dict[str, Any]]) -> dict[str, float] | None:
    # Called with the rows that structured_outputs environments verified only (gym routes them by
    # `environment`); gym's own statistics (mean reward, pass@k...) come beside these.
    return breakdown_metrics(rollouts) if rollouts else None
