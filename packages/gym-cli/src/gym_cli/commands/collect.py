"""``gym collect``: JSONL tasks → scored JSONL rollouts, in parallel, resumable; then the profile."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import click

from gym_cli.cli_options import progress_option, serve_options, served_overrides, track_options
from gym_cli.exits import CommandFailed

if TYPE_CHECKING:  # what running the command needs loads when it runs, not for `gym --help`
    from gym_cli.live import Reporter
    from gym_cli.rollouts import CollectOptions, CollectSummary, TaskFile

__all__ = ["collect"]


async def _collect(
    head: str,
    tasks: TaskFile,
    pairs: Iterable[tuple[int, int]],
    options: CollectOptions,
    summary: CollectSummary,
    reporter: Reporter,
) -> None:
    """Ask the head server what runs, choose the agent, then collect while ``reporter`` shows progress."""
    import asyncio
    import time

    from gym_core.plugins import get_plugin_manager

    from gym_cli.head import connect, instance_kinds, server_instances
    from gym_cli.live import follow
    from gym_cli.rollouts import check_agents, choose_agent, collect_rollouts

    # Each /run is bounded by what is left of its rollout's deadline.
    client = await connect(head, options.rollout_timeout_s)
    async with client:
        kinds = instance_kinds(await server_instances(client, head), get_plugin_manager().servers())
        # Before any rollout: an agent that is not running would fail every row that names it.
        check_agents(tasks, options.agent, kinds)
        if options.agent is None:
            options.default_agent = choose_agent(tasks, [name for name, kind in kinds.items() if kind == "agent"])
        options.failures.unlink(missing_ok=True)  # the failures of this run only; earlier ones are retried now
        # The reporter reads the summary on its own timer, never per rollout: at 1000 rollouts/s
        # redrawing per rollout would cost more than collecting.
        # The clock starts with the rollouts, in the first event as in the last: --serve's start-up and
        # the agent check above are not collection time.
        summary.started = time.monotonic()
        reporter.start(summary)
        ticker = asyncio.create_task(follow(reporter, summary))
        try:
            await collect_rollouts(client, tasks, pairs, options, summary)
        finally:
            ticker.cancel()
            reporter.stop(summary)


@click.command()
@click.option(
    "--input", "input_path", type=click.Path(path_type=Path), required=True, help="Tasks, one JSON object per line."
)
@click.option(
    "--output",
    "output_path",
    type=click.Path(path_type=Path),
    required=True,
    help="Rollouts JSONL (appended; resumes).",
)
@click.option("--agent", help="Agent instance to run every task (default: the row's agent_ref, else the only agent).")
@click.option("--repeats", type=click.IntRange(min=1), default=1, show_default=True, help="Rollouts per task.")
@click.option(
    "--parallel", type=click.IntRange(min=1), default=16, show_default=True, help="Rollouts in flight at once."
)
@click.option("--limit", type=click.IntRange(min=1), help="Only the first N tasks.")
@click.option("--temperature", type=float, help="Override the sampling temperature of every task.")
@click.option("--top-p", type=float, help="Override top_p of every task.")
@click.option("--max-output-tokens", type=click.IntRange(min=1), help="Override max_output_tokens of every task.")
@click.option(
    "--failures",
    "failures_path",
    type=click.Path(path_type=Path),
    help="Failed rollouts (default: OUTPUT with .failures.jsonl).",
)
@serve_options
@click.option(
    "--retries",
    type=click.IntRange(min=0),
    default=3,
    show_default=True,
    help="Retries of a rollout that failed for an infrastructure reason (server down or restarting, 5xx, timeout).",
)
@click.option(
    "--retry-backoff",
    type=click.FloatRange(min=0),
    default=3.0,
    show_default=True,
    help="Seconds before the first retry, doubled for each next one (plus up to half of it, random).",
)
@click.option(
    "--rollout-timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=1800.0,
    show_default=True,
    help="Seconds one rollout may take, all its attempts together; passed down to the agent.",
)
@click.option(
    "--profile/--no-profile",
    default=True,
    show_default=True,
    help="At the end, write the reward profile next to OUTPUT (.profile.json) and print it (on stderr with --progress json).",
)
@progress_option(
    "rich: a progress bar and a live panel (rollouts/s, mean reward overall and per environment, failures "
    "by reason, p50/p99 rollout latency, in flight); plain: one line per --progress-interval and a final "
    'line; json: one JSON object per line on stdout (with --serve, "startup" events first: venvs, servers '
    'started, each ready; then "progress" at the start and per interval, "done" at the end) and nothing '
    "else there: the servers' output and the profile go to stderr; auto: rich when stderr is a terminal, "
    "else plain. The ETA appears once 3 rollouts finished, from the throughput observed.",
)
@click.option(
    "--progress-interval",
    type=click.FloatRange(min=0, min_open=True),
    default=10.0,
    show_default=True,
    help="Seconds between progress lines of --progress plain and json.",
)
@track_options
def collect(
    input_path,
    output_path,
    agent,
    repeats,
    parallel,
    limit,
    temperature,
    top_p,
    max_output_tokens,
    failures_path,
    head,
    serve_configs,
    overrides,
    isolation,
    retries,
    retry_backoff,
    rollout_timeout,
    profile,
    progress_mode,
    progress_interval,
    track,
    track_dir,
    run_name,
) -> None:
    """Collect scored rollouts: each task of INPUT runs REPEATS times through an agent.

    Rows are written as they complete. Re-running the same command resumes: completed
    (task, rollout) pairs are skipped; failed ones are retried. A rollout that fails for an
    infrastructure reason (a server down or restarting, a 5xx, a timeout) is retried in the same
    run, up to --retries times. One collection at a time writes an output file: a second one on
    the same file stops at once and names the first. With --track, the run's counts and its profile
    are logged to MLflow or Weights & Biases at the end. Without --serve or --head, the servers are
    those of your running `gym run` (the only one; with several, --head says which).
    Exits 1 when some rollouts failed (they are in the failures file), 2 when nothing could start
    (no head server answers, bad input), 130 when interrupted.

    \b
    Example (one command: start servers, collect, profile, stop):
      gym collect --serve plugins/resources/math/configs/math_local.yaml \\
          --input plugins/resources/math/data/example.jsonl --output rollouts.jsonl --repeats 4
    """
    from gym_cli.consoles import output_console
    from gym_cli.head import find_head
    from gym_cli.launch.launcher import head_or_served
    from gym_cli.live import progress_reporter
    from gym_cli.reward_profile import print_profile, profile_file
    from gym_cli.rollouts import (
        CollectOptions,
        CollectSummary,
        DonePairs,
        check_writable,
        drop_if_empty,
        output_lock,
        pending_pairs,
        read_done,
        run_async,
        scan_tasks,
    )
    from gym_cli.tracking import check_trackers, log_collection, tracking

    check_trackers(track)  # before anything starts: a missing extra is a usage error
    console = output_console(stderr=True, soft_wrap=True)
    # With --progress json stdout carries the events only: the rest (the servers' output, which the
    # supervisor writes to sys.stdout, and the profile) goes to stderr.
    reporting = progress_reporter(progress_mode, console, progress_interval)
    failures_path = failures_path or output_path.with_name(output_path.stem + ".failures.jsonl")
    given = {"temperature": temperature, "top_p": top_p, "max_output_tokens": max_output_tokens}
    sampling = {k: v for k, v in given.items() if v is not None}
    # One checking pass; then each task is read from the file when its rollout starts, and what is done
    # is a bit per (task, rollout): a million rows × 16 repeats cost ~10 MB, not every row decoded.
    tasks = scan_tasks(input_path, limit)
    # Before anything starts (--serve): an output that cannot be written would fail after the servers did.
    check_writable(output_path, "--output")
    check_writable(failures_path, "--failures")
    track_tags = {"command": "gym collect", "input": str(input_path), "output": str(output_path)}
    runs = tracking(track, track_dir, run_name, track_tags) if track else contextlib.nullcontext([])
    # The runs open first (a bad store fails before any rollout) and end last: as failed when the
    # collection is interrupted or cannot start.
    with (
        output_lock(output_path),
        reporting as reporter,
        runs as tracked,
        tasks,
    ):  # until the command ends, however it ends
        done, duplicates = read_done(output_path, DonePairs(len(tasks), repeats))
        if duplicates:
            console.print(
                f"[yellow]dropped {duplicates} duplicate rows[/] from {output_path} (a (task, rollout) written twice)"
            )
        summary = CollectSummary(total=len(tasks) * repeats, skipped=done.count, duplicates_dropped=duplicates)
        if summary.skipped:
            console.print(f"resuming: {summary.skipped} of {summary.total} rollouts already in {output_path}")
        options = CollectOptions(
            output_path,
            failures_path,
            agent,
            repeats,
            parallel,
            sampling,
            retries=retries,
            retry_backoff_s=retry_backoff,
            rollout_timeout_s=rollout_timeout,
        )
        interrupted = False
        if summary.skipped < summary.total:
            head = "" if serve_configs else find_head(head)  # --serve: the head of the servers it starts
            with head_or_served(
                head,
                serve_configs,
                served_overrides(overrides),
                isolation=isolation,
                console=console,
                on_startup=reporter.startup,
            ) as head_url:
                try:
                    run_async(
                        _collect(head_url, tasks, pending_pairs(len(tasks), repeats, done), options, summary, reporter)
                    )
                except KeyboardInterrupt:
                    interrupted = True
        reporter.finish(summary, interrupted)
        drop_if_empty(failures_path)  # a failures file exists when something failed
        rate = (summary.done + summary.failed) / max(summary.elapsed_s, 1e-9)
        console.print(
            f"{summary.done} rollouts collected, {summary.failed} failed, {summary.skipped} already done "
            f"in {summary.elapsed_s:.1f} s ({rate:.2f} rollouts/s) → {output_path}"
        )
        if summary.retried:
            console.print(f"{summary.retried} attempts failed for an infrastructure reason and were retried")
        if summary.failed:
            console.print(f"[yellow]failures written to {failures_path}; re-run the same command to retry them[/]")
        params = {"repeats": repeats, "parallel": parallel, "agent": agent, **sampling}

        def track_run(result: dict | None) -> None:
            if tracked:
                log_collection(tracked, summary, params, result, [output_path, failures_path])
                for run in tracked:
                    console.print(f"tracked ({run.name}): {run.where}")

        if interrupted:
            console.print("[yellow]completed rollouts are kept; re-run the same command to resume[/]")
            track_run(None)  # the counts so far; the run ends as failed
            raise KeyboardInterrupt
        result = None
        if profile and output_path.exists():
            result = profile_file(output_path)
            print_profile(result, console if progress_mode == "json" else output_console())
        track_run(result)
        if summary.failed:
            raise CommandFailed()
