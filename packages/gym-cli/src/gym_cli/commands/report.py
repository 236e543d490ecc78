"""``gym report``: rollouts files → one self-contained HTML report; several files are several runs
compared side by side (before/after training, two models)."""

from __future__ import annotations

from pathlib import Path

import click

__all__ = ["report"]


@click.command()
@click.argument("rollouts", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "-o",
    "--output",
    type=click.Path(path_type=Path, dir_okay=False),
    help="HTML file to write (default: the first ROLLOUTS with .report.html).",
)
@click.option(
    "--png",
    "png_dir",
    type=click.Path(path_type=Path, file_okay=False),
    help="Also write each plot as PNG into this folder (for papers and issues).",
)
@click.option(
    "-k",
    "ks",
    type=click.IntRange(min=1),
    multiple=True,
    help="k of pass@k and majority@k (repeatable; default 1, 2, 4, ... up to the rollouts per task).",
)
@click.option(
    "--by",
    type=click.Choice(["environment", "agent", "model"]),
    default="environment",
    show_default=True,
    help="Group rewards by the environment that verified them, the agent that ran them, or the model.",
)
@click.option("--title", help="The report's title (default: the runs' labels).")
@click.option(
    "--label",
    "labels",
    multiple=True,
    help="A name for each ROLLOUTS file, in order (repeatable; default: the file names).",
)
def report(
    rollouts: tuple[Path, ...],
    output: Path | None,
    png_dir: Path | None,
    ks: tuple[int, ...],
    by: str,
    title: str | None,
    labels: tuple[str, ...],
) -> None:
    """An HTML report of rollouts files: summary (failures by reason, mean reward with a confidence
    interval, pass@k, majority@k), plots (reward histogram, pass@k curve, reward by group, turns and
    tokens, latency when rows record latency_s) and a sortable, filterable per-task table whose rows
    show the first failing rollout's final answer, and a rollout viewer: every rollout's transcript
    (messages, tool calls and outputs, reward and the verifier's fields), searchable and filterable by
    run, task, reward and failure reason. One file, no network needed to open it. Several ROLLOUTS
    files are several runs, compared side by side: tasks are paired by identity (a hash of the
    environment and the model input, not the task index), and each run is compared with the first per
    environment (mean paired difference, paired bootstrap 95% interval, significant or not).

    \b
    Example:
      gym report before.jsonl after.jsonl --label before --label after -o report.html --png plots/
    """
    from gym_cli.consoles import output_console  # here, not at the top: `gym --help` imports every command module
    from gym_cli.report import write_report

    output = output or rollouts[0].with_name(rollouts[0].stem + ".report.html")
    result = write_report(list(rollouts), output, png_dir=png_dir, ks=ks, by=by, title=title, labels=labels)
    console = output_console(soft_wrap=True)  # paths stay whole, however long, on any width
    for line in result.missing_plots:
        console.print(f"[dim]{line}[/]")
    console.print(f"report of {result.runs} run{'s' if result.runs > 1 else ''} written to {result.html}")
    for path in result.pngs:
        console.print(f"  plot: {path}")
