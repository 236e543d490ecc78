"""``gym reasoning-gym``: list the library's tasks and generate rows of them (spec §10's format).

Registered by this plugin's ``gym_register_commands``. Only click is imported at module level; the
library (seconds to import) is imported when a subcommand runs.
"""

from __future__ import annotations

import click

__all__ = ["reasoning_gym"]


@click.group("reasoning-gym")
def reasoning_gym():
    """The reasoning-gym library's procedural tasks: list them, generate rows."""


@reasoning_gym.command("tasks")
@click.option("--json", "as_json", is_flag=True, help="one JSON array of task names")
def tasks(as_json):
    """List the tasks that can be generated and scored."""
    import json

    from gym_reasoning_gym.scoring import task_names

    names = task_names()
    if as_json:
        click.echo(json.dumps(names))
    else:
        for name in names:
            click.echo(name)


@reasoning_gym.command("generate")
@click.argument("specs", nargs=-1, required=True, metavar="TASK[=WEIGHT]...")
@click.option("-n", "--num-rows", "n", type=click.IntRange(min=0), default=100, show_default=True, help="rows to write")
@click.option("--seed", type=int, default=0, show_default=True, help="the same seed gives the same rows")
@click.option(
    "-o", "--output", type=click.Path(dir_okay=False, writable=True), required=True, help="JSONL file to write"
)
@click.option(
    "--system-prompt",
    default=None,
    help="system message put before each question (default: the library's, asking for <answer> tags)",
)
@click.option("--no-system-prompt", is_flag=True, help="no system message: the question is the only input")
@click.option(
    "--conformance",
    is_flag=True,
    help="give each row with an oracle answer a `conformance` field (that answer in <answer> tags and the "
    "reward a default server gives it), which the server ignores and gym's conformance kit and "
    "`python -m benchmarks` send",
)
def generate(specs, n, seed, output, system_prompt, no_system_prompt, conformance):
    """Write N rows of one task or a weighted mix (TASK=WEIGHT, default weight 1) to OUTPUT.

    Example: gym reasoning-gym generate knights_knaves=2 basic_arithmetic -n 300 --seed 1 -o tasks.jsonl
    """
    import json

    from gym_core.errors import GymError

    from gym_reasoning_gym.scoring import DEFAULT_SYSTEM_PROMPT, generate_rows, oracle_conformance, parse_task_weights

    if no_system_prompt and system_prompt is not None:
        raise GymError("--system-prompt and --no-system-prompt exclude each other")
    prompt = None if no_system_prompt else (system_prompt if system_prompt is not None else DEFAULT_SYSTEM_PROMPT)
    try:
        rows = generate_rows(parse_task_weights(specs), n, seed, prompt)
    except ValueError as exc:
        raise GymError(str(exc)) from None
    if conformance:
        for row in rows:
            spec = oracle_conformance(row)
            if spec is not None:
                row["conformance"] = spec
    with open(output, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    counts: dict[str, int] = {}
    for row in rows:
        counts[row["metadata"]["source_dataset"]] = counts.get(row["metadata"]["source_dataset"], 0) + 1
    summary = ", ".join(f"{name}: {count}" for name, count in sorted(counts.items()))
    click.echo(f"wrote {len(rows)} rows to {output}" + (f" ({summary})" if summary else ""))
