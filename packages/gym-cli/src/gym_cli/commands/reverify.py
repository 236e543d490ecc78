"""``gym reverify``: the rewards of a rollouts file recomputed by the resources servers running now,
without calling a model; resumable; ends with what changed."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from gym_cli.cli_options import progress_option, serve_options, served_overrides
from gym_cli.exits import CommandFailed

if TYPE_CHECKING:  # what running the command needs loads when it runs, not for `gym --help`
    from rich.console import Console

    from gym_cli.reverify import ReverifyOptions, ReverifySummary, RolloutRow

__all__ = ["reverify"]


async def _reverify(
    head: str,
    work: list[RolloutRow],
    copies: list[RolloutRow],
    resources_server: str | None,
    options: ReverifyOptions,
    summary: ReverifySummary,
    console: Console,
) -> None:
    """Ask the head server what runs, check that every row has its resources server, then copy the
    rows that need no re-verification and re-verify the others with a progress bar."""
    from rich.markup import escape
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from gym_core.plugins import get_plugin_manager

    from gym_cli.head import connect, instance_kinds, server_instances
    from gym_cli.reverify import copy_rows, resolve_resources_servers, reverify_rollouts

    client = await connect(head, options.row_timeout_s)
    async with client:
        listed = await server_instances(client, head)
        kinds = instance_kinds(listed, get_plugin_manager().servers())
        instances = {row["name"]: (kinds[row["name"]], row.get("plugin")) for row in listed}
        # Before any row: a row whose environment is not running would fail, every one of them.
        servers = resolve_resources_servers(work, instances, resources_server)
        moved: dict[tuple[str, str], int] = {}
        for row in work:
            recorded = row.data.get("resources_server")
            if isinstance(recorded, str) and recorded != servers[row.line]:
                moved[recorded, servers[row.line]] = moved.get((recorded, servers[row.line]), 0) + 1
        for (recorded, now), count in sorted(moved.items()):
            console.print(f"{count} rows verified by {escape(recorded)} are re-verified by {escape(now)}")
        options.failures.unlink(missing_ok=True)  # the failures of this run only; earlier ones are retried now
        copy_rows(options.output, copies)
        summary.copied = len(copies)
        columns = (
            TextColumn("[bold]re-verifying"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("up {task.fields[up]}  down {task.fields[down]}  failed {task.fields[failed]}"),
        )
        with Progress(*columns, console=console, transient=False) as progress:
            bar = progress.add_task("reverify", total=len(work), up=0, down=0, failed=0)

            def on_progress(s: ReverifySummary) -> None:
                progress.update(bar, completed=s.reverified + s.failed, up=s.up, down=s.down, failed=s.failed)

            await reverify_rollouts(client, work, servers, options, summary, on_progress)


def _mean(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _print_diff(diff: dict[str, Any], console: Console) -> None:
    from rich.markup import escape
    from rich.table import Table

    table = Table(title="rewards: the rollouts file → the output")
    for column in ("environment", "rows", "changed", "up", "down", "mean before", "mean after"):
        table.add_column(column, justify="left" if column == "environment" else "right")

    def add(name: str, block: dict[str, Any], **style: Any) -> None:
        table.add_row(
            escape(name),
            str(block["rows"]),
            str(block["changed"]),
            str(block["up"]),
            str(block["down"]),
            _mean(block["mean_before"]),
            _mean(block["mean_after"]),
            **style,
        )

    for name, block in diff["by_environment"].items():
        add(name, block)
    add("all", diff["overall"], style="bold")
    console.print(table)


@click.command()
@click.argument("rollouts_path", metavar="ROLLOUTS", type=click.Path(path_type=Path))
@click.option(
    "--output",
    "output_path",
    type=click.Path(path_type=Path),
    required=True,
    help="Re-verified rollouts JSONL (appended; resumes). Must not be ROLLOUTS.",
)
@click.option(
    "--only-failed", is_flag=True, help="Re-verify only the rows whose reward is below 1; copy the others unchanged."
)
@click.option(
    "--resources-server",
    help="Re-verify every row on this resources server instance "
    "(default: the row's resources_server, else the only instance of its environment).",
)
@click.option("--parallel", type=click.IntRange(min=1), default=16, show_default=True, help="Rows in flight at once.")
@click.option(
    "--failures",
    "failures_path",
    type=click.Path(path_type=Path),
    help="Rows that could not be re-verified (default: OUTPUT with .failures.jsonl).",
)
@serve_options
@click.option(
    "--retries",
    type=click.IntRange(min=0),
    default=3,
    show_default=True,
    help="Retries of a row that failed for an infrastructure reason (server down or restarting, 5xx, timeout).",
)
@click.option(
    "--retry-backoff",
    type=click.FloatRange(min=0),
    default=3.0,
    show_default=True,
    help="Seconds before the first retry, doubled for each next one (plus up to half of it, random).",
)
@click.option(
    "--row-timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=600.0,
    show_default=True,
    help="Seconds one row may take (seed, replayed tool calls, verify), all its attempts together.",
)
@progress_option(
    "How --serve's start-up is shown, step by step (each plugin's venv checked, built or reused; the "
    "servers started; each waited for and ready), as `gym run` and `gym collect --serve` show it: rich "
    'and plain, a line each on stderr; json, one "startup" event per line on stdout and nothing else '
    "there (the servers' output and the table of rewards go to stderr); auto: rich when stderr is a "
    "terminal, else plain. The rows' progress bar is drawn on stderr in every mode."
)
def reverify(
    rollouts_path,
    output_path,
    only_failed,
    resources_server,
    parallel,
    failures_path,
    head,
    serve_configs,
    overrides,
    isolation,
    retries,
    retry_backoff,
    row_timeout,
    progress_mode,
) -> None:
    """Recompute the rewards of ROLLOUTS (a `gym collect` output) without calling a model.

    Each row gets a new session on its resources server, seeded with the row's task; the tool calls
    its agent executed are replayed in order (stateful environments reach the same state); then
    /verify scores the recorded response. The row is written to OUTPUT with the new reward and the
    old one as previous_reward, everything else unchanged. Re-running the same command resumes.
    Rows whose resources server is not running stop the command before any row is re-verified.
    Rows that still fail for an infrastructure reason go to the failures file, never scored.
    --serve starts only the config's resources servers and the instances they refer to (a judge
    model); its policy models and agents are left out. Without --serve or --head, the servers are
    those of your running `gym run` (the only one; with several, --head says which).
    Exits 1 when some rows failed, 2 when nothing could start (no head server answers, bad input),
    130 when interrupted.

    \b
    Example (after changing a verifier):
      gym reverify rollouts.jsonl --output reverified.jsonl \\
          --serve plugins/resources/math/configs/math_local.yaml
    """
    from gym_cli.consoles import output_console
    from gym_cli.head import find_head
    from gym_cli.launch.launcher import head_or_served
    from gym_cli.live import progress_reporter
    from gym_cli.reverify import ReverifyOptions, ReverifySummary, passed, read_rollout_rows, reward_diff
    from gym_cli.rollouts import InputError, check_writable, drop_if_empty, output_lock, read_done, run_async

    console = output_console(stderr=True, soft_wrap=True)
    failures_path = failures_path or output_path.with_name(output_path.stem + ".failures.jsonl")
    rows = read_rollout_rows(rollouts_path)
    for path, what in ((output_path, "--output"), (failures_path, "--failures")):
        if path.exists() and path.resolve() == rollouts_path.resolve():
            raise InputError(f"{what} {path} is the rollouts file itself: write the re-verified rows to another file")
    # Before anything starts (--serve): an output that cannot be written would fail after the servers did.
    check_writable(output_path, "--output")
    check_writable(failures_path, "--failures")
    # With --progress json stdout carries the start-up events only.
    with output_lock(output_path), progress_reporter(progress_mode, console) as reporter:
        done, duplicates = read_done(output_path)
        if duplicates:
            console.print(
                f"[yellow]dropped {duplicates} duplicate rows[/] from {output_path} (a (task, rollout) written twice)"
            )
        pending = [row for row in rows if row.pair not in done]
        copies = [row for row in pending if only_failed and passed(row)]
        work = [row for row in pending if not (only_failed and passed(row))]
        summary = ReverifySummary(total=len(rows), skipped=len(rows) - len(pending))
        if summary.skipped:
            console.print(f"resuming: {summary.skipped} of {summary.total} rows already in {output_path}")
        options = ReverifyOptions(
            output_path,
            failures_path,
            parallel,
            retries=retries,
            retry_backoff_s=retry_backoff,
            row_timeout_s=row_timeout,
        )
        interrupted = False
        if work:
            # --serve: no policy model or agent is called here; only the environments and what they
            # refer to (a judge model) start.
            head = "" if serve_configs else find_head(head)  # --serve: the head of the servers it starts
            with head_or_served(
                head,
                serve_configs,
                served_overrides(overrides),
                isolation=isolation,
                console=console,
                kinds={"resources"},
                on_startup=reporter.startup,
            ) as head_url:
                try:
                    run_async(_reverify(head_url, work, copies, resources_server, options, summary, console))
                except KeyboardInterrupt:
                    interrupted = True
        elif copies:
            from gym_cli.reverify import copy_rows

            failures_path.unlink(missing_ok=True)
            copy_rows(output_path, copies)
            summary.copied = len(copies)
        drop_if_empty(failures_path)  # a failures file exists when something failed
        copied = f"{summary.copied} copied unchanged (passed), " if only_failed else ""
        console.print(
            f"{summary.reverified} rows re-verified ({summary.up} rewards up, {summary.down} down), {copied}"
            f"{summary.failed} failed, {summary.skipped} already done in {summary.elapsed_s:.1f} s → {output_path}"
        )
        if summary.tools_diverged:
            console.print(
                f"[yellow]{summary.tools_diverged} rows got other tool outputs than they recorded[/]: the "
                "environment's tools changed, so the model might have acted otherwise; their new rewards "
                "score the recorded trajectory"
            )
        if summary.retried:
            console.print(f"{summary.retried} attempts failed for an infrastructure reason and were retried")
        if summary.failed:
            console.print(f"[yellow]failures written to {failures_path}; re-run the same command to retry them[/]")
        if interrupted:
            console.print("[yellow]re-verified rows are kept; re-run the same command to resume[/]")
            raise KeyboardInterrupt
        _print_diff(reward_diff(rows, output_path), console if progress_mode == "json" else output_console())
        if summary.failed:
            raise CommandFailed()
