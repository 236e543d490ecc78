"""The reward profile of rollouts: per-task and overall statistics, pass@k, majority@k, each
plugin's aggregate metrics, and a breakdown by environment, agent or model with the turns and tokens
per rollout; computed, written next to the rollouts as JSON, and printed as tables.
Used by ``gym profile`` and at the end of ``gym collect``.

The turns and tokens come from the fields every agent records about its rollout
(:class:`gym_core.schemas.RolloutRecord`): ``num_model_calls``, ``num_tool_calls`` and ``usage``.
A group's ``turns_per_rollout`` (and ``tool_calls_per_rollout``) is the mean over its rows that carry
the count, its ``tokens_per_rollout`` (``total``, ``input``, ``output``) the mean over its rows that
carry ``usage``; a group whose rows carry none has no such key."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from gym_core.metrics import profile_rollouts
from gym_core.plugins import get_plugin_manager

from gym_cli.rollouts import read_rollouts

__all__ = ["DEFAULT_KS", "ANSWER_FIELDS", "GROUP_BY", "build_profile", "rollout_costs", "profile_file", "print_profile"]

DEFAULT_KS = (1, 4, 16)
ANSWER_FIELDS = ("extracted_answer", "answer")
# What ``--by`` groups rollouts by: the row fields that name the group, the first one present wins
# (a model is known by the name it reported, else by the model instance the agent called).
GROUP_BY = {"environment": ("environment",), "agent": ("agent",), "model": ("model", "model_server")}


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def rollout_costs(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """``turns_per_rollout``, ``tool_calls_per_rollout`` and ``tokens_per_rollout`` of ``rows``,
    each present when some row carries what it needs (see the module docstring)."""
    costs: dict[str, Any] = {}
    for key, field in (("turns_per_rollout", "num_model_calls"), ("tool_calls_per_rollout", "num_tool_calls")):
        mean = _mean([row[field] for row in rows if _is_number(row.get(field))])
        if mean is not None:
            costs[key] = mean
    usages = [row["usage"] for row in rows if isinstance(row.get("usage"), dict)]
    tokens = {
        name: _mean([u[f"{name}_tokens"] for u in usages if _is_number(u.get(f"{name}_tokens"))])
        for name in ("total", "input", "output")
    }
    if any(value is not None for value in tokens.values()):
        costs["tokens_per_rollout"] = tokens
    return costs


def _group_name(row: dict[str, Any], fields: tuple[str, ...]) -> str:
    return next((str(row[f]) for f in fields if row.get(f) not in (None, "")), "?")


def _grouped(rows: list[dict[str, Any]], by: str, ks, answer_field: str | None) -> dict[str, Any]:
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault(_group_name(row, GROUP_BY[by]), []).append(row)
    return {
        name: {**profile_rollouts(group, ks=ks, answer_field=answer_field)["overall"], **rollout_costs(group)}
        for name, group in sorted(groups.items())
    }


def build_profile(
    rows: list[dict[str, Any]], ks=DEFAULT_KS, answer_field: str | None = None, by: str = "environment"
) -> dict[str, Any]:
    """The profile of rollout rows, with every plugin's aggregate metrics under ``plugin_metrics``;
    under ``environments``, the overall block of each environment's own rows (rows record the
    environment that verified them; a collection can mix several); under ``groups``, the same per
    value of ``by`` (``grouped_by``: ``environment``, ``agent`` or ``model``). The overall block and
    each group's carry the rows' :func:`rollout_costs`."""
    if by not in GROUP_BY:
        raise ValueError(f"cannot group rollouts by {by!r}: choose one of {', '.join(GROUP_BY)}")
    if answer_field is None:
        answer_field = next((f for f in ANSWER_FIELDS if any(f in row for row in rows)), None)
    profile = profile_rollouts(rows, ks=ks, answer_field=answer_field)
    profile["overall"].update(rollout_costs(rows))
    profile["environments"] = _grouped(rows, "environment", ks, answer_field)
    profile["grouped_by"] = by
    profile["groups"] = profile["environments"] if by == "environment" else _grouped(rows, by, ks, answer_field)
    profile["plugin_metrics"] = get_plugin_manager().aggregate_metrics(rows)
    profile["answer_field"] = answer_field
    return profile


def profile_file(
    path: Path, output: Path | None = None, ks=DEFAULT_KS, answer_field: str | None = None, by: str = "environment"
) -> dict[str, Any]:
    """Profile a rollouts file and write the JSON next to it (``<stem>.profile.json``)."""
    profile = build_profile(read_rollouts(path), ks, answer_field, by)
    output = output or path.with_name(path.stem + ".profile.json")
    output.write_text(json.dumps(profile, indent=2, default=str))
    profile["_written_to"] = str(output)
    return profile


def _fmt(value: Any) -> str:
    return f"{value:.4f}" if isinstance(value, float) else str(value)


def _costs_cells(block: dict[str, Any]) -> list[str]:
    tokens = block.get("tokens_per_rollout") or {}
    values = [
        block.get("turns_per_rollout"),
        block.get("tool_calls_per_rollout"),
        *(tokens.get(k) for k in ("total", "input", "output")),
    ]
    return ["-" if v is None else f"{v:.1f}" for v in values]


def headline(block: dict[str, Any]) -> str:
    """The headline score of a profile block (overall, or a group's) and its denominator, as every
    command words it: ``mean reward 0.5714 over 7 scored rollouts of 7 tasks``."""
    from gym_core.metrics import HEADLINE

    mean = block["fields"]["reward"]["mean"]
    value = "-" if mean is None else f"{mean:.4f}"
    return f"{HEADLINE} {value} over {block['num_rollouts']} scored rollouts of {block['num_tasks']} tasks"


def print_profile(profile: dict[str, Any], console: Console, max_tasks: int = 30) -> None:
    """Print a profile: the headline score overall and per environment, then tables: reward fields
    overall, pass@k / majority@k per task (the first ``max_tasks``) and overall, the groups (``by
    environment``...: when there are several, or when the rows record their turns or tokens) and their
    turns and tokens per rollout; then each environment's own metrics, apart and labelled."""
    overall = profile["overall"]
    console.print(f"[bold]{headline(overall)}[/] (rewards from 0 to 1; failed rollouts are not scored)")
    environments = profile.get("environments", {})
    if len(environments) > 1:
        for name, block in environments.items():
            console.print(f"  {name}: {headline(block)}", markup=False)
    metric_keys = [k for k in overall if k.startswith(("pass@", "majority@"))]
    table = Table(title=f"reward profile: {overall['num_tasks']} tasks, {overall['num_rollouts']} rollouts")
    for column in ("field", "mean", "std", "min", "median", "max"):
        table.add_column(column, justify="right" if column != "field" else "left")
    for name, s in overall["fields"].items():
        table.add_row(name, *(_fmt(s[k]) for k in ("mean", "std", "min", "median", "max")))
    console.print(table)

    k_table = Table(title="pass@k / majority@k (0 to 1)")
    k_table.add_column("task")
    k_table.add_column("n", justify="right")
    k_table.add_column("mean reward", justify="right")
    for key in metric_keys:
        k_table.add_column(key, justify="right")
    tasks = profile["tasks"]
    for index, (task, block) in enumerate(tasks.items()):
        if index >= max_tasks:
            k_table.add_row(f"… {len(tasks) - max_tasks} more", "", "", *[""] * len(metric_keys))
            break
        k_table.add_row(
            str(task),
            str(block["num_rollouts"]),
            _fmt(block["fields"]["reward"]["mean"]),
            *(_fmt(block.get(k, "-")) for k in metric_keys),
        )
    k_table.add_row(
        "[bold]overall",
        str(overall["num_rollouts"]),
        _fmt(overall["fields"]["reward"]["mean"]),
        *(f"[bold]{_fmt(overall[k])}" for k in metric_keys),
    )
    console.print(k_table)
    console.print(
        "overall pass@k and majority@k: the mean over the tasks with at least k rollouts"
        + (" (in majority@k, a task whose rollouts gave no answer scores 0)" if profile.get("answer_field") else ""),
        soft_wrap=True,
    )
    by = profile.get("grouped_by", "environment")
    groups = profile.get("groups", profile.get("environments", {}))
    with_costs = any(k in block for block in groups.values() for k in ("turns_per_rollout", "tokens_per_rollout"))
    if len(groups) > 1 or with_costs:
        keys = [k for k in metric_keys if any(k in block for block in groups.values())]
        g_table = Table(title=f"by {by}")
        for column in (by, "tasks", "rollouts", "mean reward", *keys):
            g_table.add_column(column, justify="left" if column == by else "right", no_wrap=column == by)
        for name, block in groups.items():
            g_table.add_row(
                name,
                str(block["num_tasks"]),
                str(block["num_rollouts"]),
                _fmt(block["fields"]["reward"]["mean"]),
                *(_fmt(block.get(k, "-")) for k in keys),
            )
        console.print(g_table)
    if with_costs:
        c_table = Table(title=f"per rollout, by {by}")
        for column in (by, "turns", "tool calls", "tokens", "input", "output"):
            c_table.add_column(column, justify="left" if column == by else "right", no_wrap=column == by)
        for name, block in groups.items():
            c_table.add_row(name, *_costs_cells(block))
        console.print(c_table)
    plugin_metrics = profile.get("plugin_metrics", {})
    if plugin_metrics:
        console.print(
            "environment metrics (each environment's own, from its gym_aggregate_metrics; a pass@k family is "
            "in percent, 0 to 100, and its pass@1[avg-of-k] and majority@k read the first k rollouts of each "
            "task: docs/collection.md says what each means):",
            markup=False,
            soft_wrap=True,
        )
    for name, value in plugin_metrics.items():
        console.print(f"  {name}: {_fmt(value)}", markup=False)  # names like pass@1[avg-of-4] are not markup
    if "_written_to" in profile:
        console.print(f"profile written to {profile['_written_to']}")
