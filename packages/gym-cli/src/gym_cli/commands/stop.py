"""``gym stop``: stop a running ``gym run`` (or ``gym collect --serve``) and all its servers.

Runs are found through the state files every launcher keeps under ``$GYM_HOME/runs``
(:mod:`gym_cli.launch.runstate`), never by process name: a launcher is signalled only while its pid is
still held by the process that wrote the file (same start time and command line). The launcher gets
SIGTERM, its normal way out (it stops its servers gracefully, then removes its state file); one still
running after ``--timeout`` seconds is killed (SIGKILL), and so are the servers it leaves behind.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import click

from gym_cli.exits import CommandFailed, fail
from gym_cli.head import runs_listing

if TYPE_CHECKING:  # gym_cli.launch loads the launcher: only when the command runs, not for `gym --help`
    from gym_cli.launch.runstate import RecordedRun

__all__ = ["stop"]

KILL_WAIT_S = 5.0
"""How long a launcher may take to vanish after SIGKILL (the kernel needs a moment to reap it)."""

SERVER_GRACE_S = 5.0
"""At most this long for a leftover server to end after SIGTERM before it is killed too."""


@dataclass
class _Outcome:
    run: RecordedRun
    killed: bool = False  # the launcher ignored SIGTERM for the whole --timeout
    leftovers: list[str] = field(default_factory=list)  # servers it left running, stopped by us
    problem: str | None = None  # what could not be stopped


def _signal_launcher(run: RecordedRun, signum: int) -> str | None:
    """Send ``signum`` to the launcher if its pid is still its own; what went wrong, if anything."""
    if not run.launcher_alive():
        return None  # it ended (or its pid went to someone else): nothing to signal
    try:
        os.kill(run.pid, signum)
    except ProcessLookupError:
        return None
    except PermissionError:
        return f"not allowed to signal pid {run.pid} (another user's process?)"
    return None


def _wait_gone(runs: list[RecordedRun], deadline: float) -> list[RecordedRun]:
    """Wait until every launcher in ``runs`` has ended or ``deadline`` passes; those still running."""
    alive = list(runs)
    while alive and time.monotonic() < deadline:
        time.sleep(0.05)
        alive = [run for run in alive if run.launcher_alive()]
    return [run for run in alive if run.launcher_alive()]


def _stop_leftovers(run: RecordedRun, grace_s: float) -> list[str]:
    """Stop the servers of a launcher that has ended and remove its state file; the servers stopped.
    A launcher that was killed never updated its file, so the file (when still there) is the latest word
    on which servers it ran."""
    from gym_cli.launch.runstate import RecordedRun, stop_groups

    latest = RecordedRun.load(run.path) or run
    groups = latest.server_groups()
    if groups:
        stop_groups([pgid for _, pgid in groups], grace_s)
    latest.remove()
    return [name for name, _ in groups]


def _stop_runs(runs: list[RecordedRun], timeout_s: float) -> list[_Outcome]:
    """SIGTERM every launcher, wait up to ``timeout_s`` for all of them, then SIGKILL those still running;
    in the end no recorded server of theirs runs and their state files are gone."""
    outcomes = {run.path: _Outcome(run) for run in runs}
    for run in runs:
        outcomes[run.path].problem = _signal_launcher(run, signal.SIGTERM)
    signalled = [run for run in runs if outcomes[run.path].problem is None]
    stubborn = _wait_gone(signalled, time.monotonic() + timeout_s)
    for run in stubborn:
        outcomes[run.path].killed = True
        outcomes[run.path].problem = _signal_launcher(run, signal.SIGKILL)
    for run in _wait_gone(stubborn, time.monotonic() + KILL_WAIT_S):
        outcomes[run.path].problem = outcomes[run.path].problem or f"pid {run.pid} still runs after SIGKILL"
    for outcome in outcomes.values():
        if outcome.problem is None:
            outcome.leftovers = _stop_leftovers(outcome.run, min(timeout_s, SERVER_GRACE_S))
    return list(outcomes.values())


def _no_run_found(head: str | None, live: list[RecordedRun], directory: Path) -> CommandFailed:
    where = f" with its head server at {head}" if head else ""
    message = f"no running `gym run` or `gym collect --serve`{where} was found (state files: {directory})"
    if live:
        message += "; running:\n" + runs_listing(live)
    return CommandFailed(message + "\n`gym status` shows the runs and their servers")


@click.command()
@click.option(
    "--head",
    default=None,
    metavar="URL",
    help="Stop the run whose head server is at URL (as `gym run` printed it).  [default: the only run]",
)
@click.option("--all", "stop_all", is_flag=True, help="Stop every run of this user ($GYM_HOME).")
@click.option(
    "--timeout",
    "timeout_s",
    type=click.FloatRange(min=0),
    default=30.0,
    show_default=True,
    help="Seconds to wait for a graceful stop before killing the run and its servers.",
)
def stop(head: str | None, stop_all: bool, timeout_s: float) -> None:
    """Stop a running `gym run` or `gym collect --serve` and every server it started.

    The run is found through the state files under $GYM_HOME/runs: the only run, the one whose head
    server is at --head, or all of them with --all. It gets SIGTERM and stops its servers as on
    Ctrl+C; when it has not ended after --timeout seconds, it and its servers are killed. Servers left
    running by a run that was killed (kill -9) are stopped too.

    Exits 1 when no run matched (or one could not be stopped), 2 when several runs are running and
    neither --head nor --all says which.

    \b
    Examples:
      gym stop
      gym stop --head http://127.0.0.1:11000 --timeout 60
    """
    from gym_cli.launch.runstate import RecordedRun, process_identity, runs_dir, same_head

    if head and stop_all:
        raise click.UsageError("give either --head or --all, not both")
    if process_identity(os.getpid()) is None:
        raise CommandFailed(
            "gym stop tells a run's processes from others through /proc, which this system "
            "lacks: stop the run with Ctrl+C in its terminal"
        )
    directory = runs_dir()
    runs = RecordedRun.all_in(directory) if directory.is_dir() else []
    live = [run for run in runs if run.launcher_alive()]

    # A launcher killed with -9 leaves its file and maybe servers: stop them (as `gym run` does on start).
    matched_dead = []
    for run in runs:
        if run in live:
            continue
        leftovers = _stop_leftovers(run, min(timeout_s, SERVER_GRACE_S))
        if leftovers:
            click.echo(
                f"stopped {', '.join(leftovers)}: left running by a gym run that was killed (pid {run.pid}, "
                f"head {run.head_url or '?'})"
            )
            if head is None or same_head(run.head_url, head):
                matched_dead.append(run)

    if head is not None:
        targets = [run for run in live if same_head(run.head_url, head)]
    elif stop_all or len(live) <= 1:
        targets = live
    else:
        fail(f"{len(live)} gym runs are running; say which with --head URL, or use --all:\n{runs_listing(live)}")
    if not targets:
        if matched_dead:
            return
        raise _no_run_found(head, live, directory)

    started = time.monotonic()
    outcomes = _stop_runs(targets, timeout_s)
    took_s = time.monotonic() - started
    problems = []
    for outcome in outcomes:
        run = outcome.run
        what = f"`{' '.join(run.command().split()[:2])}` (pid {run.pid}, head {run.head_url or '?'})"
        if outcome.problem:
            problems.append(f"{what}: {outcome.problem}")
            continue
        servers = ", ".join(run.servers) or "no servers yet"
        if outcome.killed:
            line = f"killed {what} after it ignored SIGTERM for {timeout_s:g} s; servers: {servers}"
        else:
            line = f"stopped {what} and its servers ({servers})"
        if outcome.leftovers:
            line += f"; stopped the servers it left running: {', '.join(outcome.leftovers)}"
        click.echo(f"{line} in {took_s:.1f} s")
    if problems:
        raise CommandFailed("could not stop " + "; ".join(problems))
