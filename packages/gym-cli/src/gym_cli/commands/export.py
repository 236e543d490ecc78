"""``gym export``: rollouts files → training datasets in TRL's formats (SFT conversations, DPO pairs,
GRPO prompts), as JSONL or Parquet, with a summary of the rows kept and dropped, by reason."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from gym_cli.exits import CommandFailed

if TYPE_CHECKING:  # what running the command needs loads when it runs, not for `gym --help`
    from gym_cli.export import ExportOptions, Mode

__all__ = ["export"]


@click.group()
def export() -> None:
    """Turn rollouts (`gym collect` output) into training datasets in TRL's formats.

    \b
    sft      {"messages": [...], "tools"?}: conversations that passed, for SFTTrainer
    dpo      {"prompt": [...], "chosen": [...], "rejected": [...], "tools"?}: for DPOTrainer
    prompts  {"prompt": [...], "gym_task", "environment", "agent", ...}: one per task, for GRPOTrainer

    Messages are chat-template messages: assistant tool calls under "tool_calls" (arguments as
    objects), tool outputs as "tool" messages; "tools" is the offered tools as a JSON string. OUT
    ends in .jsonl, or .parquet (needs Hugging Face datasets: gym-cli[export]). A task is known by
    its task_index and its prompt, so several runs of the same tasks file combine.
    """


def _common(command: Callable[..., Any]) -> Callable[..., Any]:
    for option in reversed(
        (
            click.argument("inputs", metavar="ROLLOUTS...", nargs=-1, required=True, type=click.Path(path_type=Path)),
            click.option(
                "-o",
                "--output",
                type=click.Path(path_type=Path),
                required=True,
                help="The dataset to write, .jsonl or .parquet (replaced if it exists).",
            ),
            click.option(
                "--pass-reward",
                type=float,
                default=1.0,
                show_default=True,
                help="A rollout passes when its reward reaches this (for pass rates, and sft's default threshold).",
            ),
            click.option(
                "--min-pass-rate",
                type=click.FloatRange(0, 1),
                default=None,
                help="Keep only tasks whose share of passing rollouts is at least this.",
            ),
            click.option(
                "--max-pass-rate",
                type=click.FloatRange(0, 1),
                default=None,
                help="Keep only tasks whose share of passing rollouts is at most this.",
            ),
            click.option(
                "--summary-json",
                type=click.Path(path_type=Path, dir_okay=False),
                help="Also write the summary (rows kept, dropped by reason) to this JSON file.",
            ),
        )
    ):
        command = option(command)
    return command


def _run(mode: Mode, inputs: tuple[Path, ...], output: Path, options: ExportOptions, summary_json: Path | None) -> None:
    import json

    from rich.markup import escape

    from gym_cli.consoles import output_console
    from gym_cli.export import DROP_REASONS
    from gym_cli.export import export as run_export

    summary = run_export(mode, list(inputs), output, options)
    console = output_console(highlight=False, soft_wrap=True)
    files = f"{len(inputs)} file{'s' if len(inputs) > 1 else ''}"
    console.print(
        f"{mode}: {summary.rows_read} rows of {summary.tasks} tasks read from {files}; "
        f"{summary.kept} kept, {sum(summary.dropped.values())} dropped"
    )
    for reason, count in summary.dropped.items():
        console.print(f"  {reason:<17} {count:>6}  {escape(DROP_REASONS[reason])}")
    if summary_json is not None:
        summary_json.parent.mkdir(parents=True, exist_ok=True)
        summary_json.write_text(json.dumps(summary.as_json(), indent=2) + "\n")
    if not summary.rows_written:
        raise CommandFailed(f"nothing to export: no row is left after the filters; {output} not written")
    console.print(f"{summary.rows_written} rows written to {escape(str(output))}")


@export.command()
@_common
@click.option(
    "--min-reward", type=float, default=None, help="Keep rollouts whose reward reaches this (default: --pass-reward)."
)
@click.option(
    "--best-of",
    type=click.IntRange(min=1),
    default=None,
    help="Keep at most N rollouts per task, those of highest reward.",
)
@click.option("--keep-duplicates", is_flag=True, help="Keep a conversation equal to one already kept.")
def sft(
    inputs, output, pass_reward, min_pass_rate, max_pass_rate, summary_json, min_reward, best_of, keep_duplicates
) -> None:
    """Conversations for SFT: {"messages": [...], "tools"?}, each a whole rollout ending with the
    assistant's turn, tool calls and tool outputs included.

    Keeps the rollouts whose reward reaches --min-reward, one of each distinct conversation, at most
    --best-of per task, of the tasks within the pass-rate window; drops failed rollouts and
    conversations that do not end with an assistant turn.

    \b
    Example:
      gym export sft out/math_rollouts.jsonl -o out/math_sft.jsonl --best-of 2
    """
    from gym_cli.export import ExportOptions

    _run(
        "sft",
        inputs,
        output,
        ExportOptions(
            pass_reward=pass_reward,
            min_pass_rate=min_pass_rate,
            max_pass_rate=max_pass_rate,
            min_reward=min_reward,
            best_of=best_of,
            dedup=not keep_duplicates,
        ),
        summary_json,
    )


@export.command()
@_common
@click.option(
    "--min-margin",
    type=click.FloatRange(min=0),
    default=0.0,
    show_default=True,
    help="Pair a task only when its best reward exceeds its worst by at least this.",
)
def dpo(inputs, output, pass_reward, min_pass_rate, max_pass_rate, summary_json, min_margin) -> None:
    """Preference pairs for DPO: {"prompt": [...], "chosen": [...], "rejected": [...], "tools"?}, one per
    task: the completion of its best rollout (chosen) and of its worst (rejected), the earlier row on
    a tie.

    A task needs two complete rollouts of distinct rewards, at least --min-margin apart.

    \b
    Example (two runs of the same tasks):
      gym export dpo out/run_a.jsonl out/run_b.jsonl -o out/dpo.parquet --min-margin 0.5
    """
    from gym_cli.export import ExportOptions

    _run(
        "dpo",
        inputs,
        output,
        ExportOptions(
            pass_reward=pass_reward, min_pass_rate=min_pass_rate, max_pass_rate=max_pass_rate, min_margin=min_margin
        ),
        summary_json,
    )


@export.command()
@_common
def prompts(inputs, output, pass_reward, min_pass_rate, max_pass_rate, summary_json) -> None:
    """The tasks as prompts, for GRPO: one row per task, {"prompt": [...], "tools"?, "gym_task",
    "environment", "agent", "task_index"}.

    "prompt" is what the model is given (instructions and input as chat messages); "gym_task" the
    task row as a JSON string, for a reward function that verifies a completion through the
    environment's /verify (from a rollout: the row without what the collector and the agent added);
    "environment" the environment that verified its rollouts; "agent" the agent instance that runs it.
    ROLLOUTS may also be tasks files (rows without a reward), exported as they are.

    \b
    Example (tasks that are neither always nor never solved):
      gym export prompts out/math_rollouts.jsonl -o out/math_prompts.jsonl \\
          --min-pass-rate 0.01 --max-pass-rate 0.99
    """
    from gym_cli.export import ExportOptions

    _run(
        "prompts",
        inputs,
        output,
        ExportOptions(pass_reward=pass_reward, min_pass_rate=min_pass_rate, max_pass_rate=max_pass_rate),
        summary_json,
    )
