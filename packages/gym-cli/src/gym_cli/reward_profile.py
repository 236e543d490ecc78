"""The reward profile of rollouts: per-task and overall statistics, pass@k, majority@k, and each
plugin's aggregate metrics; computed, written next to the rollouts as JSON, and printed as tables.
Used by ``gym profile`` and at the end of ``gym collect``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from gym_core.metrics import profile_rollouts
from gym_core.plugins import get_plugin_manager

from gym_cli.rollouts import read_rollouts

__all__ = ["DEFAULT_KS", "ANSWER_FIELDS", "build_profile", "profile_file", "print_profile"]

DEFAULT_KS = (1, 4, 16)
ANSWER_FIELDS = ("extracted_answer", "answer")


def build_profile(rows: list[dict[str, Any]], ks=DEFAULT_KS, answer_field: str | None = None) -> dict[str, Any]:
    """The profile of rollout rows, with every plugin's aggregate metrics under ``plugin_metrics``
    and, under ``environments``, the overall block of each environment's own rows (rows record the
    environment that verified them; a collection can mix several)."""
    if answer_field is None:
        answer_field = next((f for f in ANSWER_FIELDS if any(f in row for row in rows)), None)
    profile = profile_rollouts(rows, ks=ks, answer_field=answer_field)
    by_environment: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_environment.setdefault(str(row.get("environment") or "?"), []).append(row)
    profile["environments"] = {
        name: profile_rollouts(env_rows, ks=ks, answer_field=answer_field)["overall"]
        for name, env_rows in sorted(by_environment.items())
    }
    profile["plugin_metrics"] = get_plugin_manager().aggregate_metrics(rows)
    profile["answer_field"] = answer_field
    return profile


def profile_file(path: Path, output: Path | None = None, ks=DEFAULT_KS, answer_field: str | None = None) -> dict[str, Any]:
    """Profile a rollouts file and write the JSON next to it (``<stem>.profile.json``)."""
    profile = build_profile(read_rollouts(path), ks, answer_field)
    output = output or path.with_name(path.stem + ".profile.json")
    output.write_text(json.dumps(profile, indent=2, default=str))
    profile["_written_to"] = str(output)
    return profile


def _fmt(value: Any) -> str:
    return f"{value:.4f}" if isinstance(value, float) else str(value)


def print_profile(profile: dict[str, Any], console: Console, max_tasks: int = 30) -> None:
    """Print a profile as tables: reward fields overall, then pass@k / majority@k per task (the first
    ``max_tasks``) and overall, then the plugins' metrics."""
    overall = profile["overall"]
    metric_keys = [k for k in overall if k.startswith(("pass@", "majority@"))]
    table = Table(title=f"reward profile: {overall['num_tasks']} tasks, {overall['num_rollouts']} rollouts")
    for column in ("field", "mean", "std", "min", "median", "max"):
        table.add_column(column, justify="right" if column != "field" else "left")
    for name, s in overall["fields"].items():
        table.add_row(name, *(_fmt(s[k]) for k in ("mean", "std", "min", "median", "max")))
    console.print(table)

    k_table = Table(title="pass@k / majority@k (overall: mean over tasks)")
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
        k_table.add_row(str(task), str(block["num_rollouts"]), _fmt(block["fields"]["reward"]["mean"]),
                        *(_fmt(block.get(k, "-")) for k in metric_keys))
    k_table.add_row("[bold]overall", str(overall["num_rollouts"]), _fmt(overall["fields"]["reward"]["mean"]),
                    *(f"[bold]{_fmt(overall[k])}" for k in metric_keys))
    console.print(k_table)
    environments = profile.get("environments", {})
    if len(environments) > 1:
        keys = [k for k in metric_keys if any(k in block for block in environments.values())]
        e_table = Table(title="by environment")
        for column in ("environment", "tasks", "rollouts", "mean reward", *keys):
            e_table.add_column(column, justify="left" if column == "environment" else "right")
        for name, block in environments.items():
            e_table.add_row(name, str(block["num_tasks"]), str(block["num_rollouts"]),
                            _fmt(block["fields"]["reward"]["mean"]), *(_fmt(block.get(k, "-")) for k in keys))
        console.print(e_table)
    for name, value in profile.get("plugin_metrics", {}).items():
        console.print(f"{name}: {_fmt(value)}", markup=False)  # names like pass@1[avg-of-4] are not markup
    if "_written_to" in profile:
        console.print(f"profile written to {profile['_written_to']}")
