"""What ``gym collect`` shows while it runs: a live panel, periodic plain lines, or JSON events.

The collector only keeps counts in its :class:`~gym_cli.rollouts.CollectSummary` (a few dict and
integer updates per rollout); a reporter reads them on a timer, a few times a second for the rich
panel and every ``--progress-interval`` seconds for plain lines and JSON, so that showing progress
costs the same at 10 or 10,000 rollouts per second.

- ``rich``: the progress bar and a panel: rollouts/s, mean reward overall and per environment,
  failures by reason, p50/p99 rollout latency, rollouts in flight.
- ``plain``: the same figures on one line per interval and a final line, for CI logs.
- ``json``: one :class:`ProgressEvent` per line on stdout (``"progress"`` at the start and per
  interval, ``"done"`` at the end), for machines.

Before the rollouts, ``--serve``'s start-up reports each step as a :class:`StartupEvent` (a plugin's
venv prepared, the servers started, each server ready): a line in ``rich`` and ``plain``, an event
of its own in ``json``. ``gym run`` and ``gym reverify --serve`` show their start-up with the same
reporters (:func:`progress_reporter`), ``gym run``'s ``json`` ending with a :class:`RunningEvent`.
The ETA (:func:`eta_s`) is the rollouts left over the throughput observed
in this run, shown once :data:`ETA_MIN_FINISHED` rollouts finished; never before.

Rollout latency is the wall time of a scored rollout, its retries included, kept in a
:class:`LatencySketch`: its percentiles are those of ``gym profile`` and ``gym report``
(:func:`gym_core.metrics.quantile`, interpolated; p50 is the median), exactly up to :attr:`LatencySketch.EXACT_LIMIT`
rollouts, then within 1% (bounded memory) rather than from a list of every value.
This module imports only the standard library and msgspec (rich inside :class:`RichReporter`):
:mod:`gym_cli.rollouts` imports the sketch from here.
"""

from __future__ import annotations

import contextlib
import math
import sys
from array import array
from collections.abc import Iterator
from typing import IO, TYPE_CHECKING, Literal

import msgspec

if TYPE_CHECKING:
    from rich.console import Console, RenderableType

    from gym_cli.rollouts import CollectSummary

__all__ = [
    "PROGRESS_MODES",
    "LatencySketch",
    "EnvironmentProgress",
    "ProgressEvent",
    "StartupEvent",
    "StartupPhase",
    "RunningServer",
    "RunningEvent",
    "ETA_MIN_FINISHED",
    "eta_s",
    "progress_event",
    "describe_startup",
    "describe_progress",
    "progress_panel",
    "Reporter",
    "RichReporter",
    "PlainReporter",
    "JsonReporter",
    "make_reporter",
    "progress_reporter",
    "follow",
]

PROGRESS_MODES = ("auto", "rich", "plain", "json")
# Rollouts finished (done or failed) before an ETA is shown: the first, then two more to measure the
# throughput between them.
ETA_MIN_FINISHED = 3


class LatencySketch:
    """Quantiles of a stream of durations in bounded memory. The first :attr:`EXACT_LIMIT` values are
    kept, and their quantiles are exact (:func:`gym_core.metrics.quantile`, interpolated: what
    ``gym profile`` and ``gym report`` show for the same rollouts). Beyond, a log-bucketed histogram
    (the DDSketch idea): each value falls in the bucket ``ceil(log(value) / log(gamma))``; a quantile
    is read as its bucket's midpoint (the bucket of the ``ceil(q·n)``-th value), within
    ``relative_error`` of the true value,
    clamped to the exact minimum and maximum. Values are clamped to [``MIN_S``, ``MAX_S``], so that
    at the default 1% there are at most 1,500 buckets however many values are added."""

    MIN_S = 1e-6
    MAX_S = 1e7  # about 116 days
    EXACT_LIMIT = 10_000  # values kept as they are (80 KB); sorting them for a quantile takes ~1 ms

    def __init__(self, relative_error: float = 0.01):
        if not 0 < relative_error < 1:
            raise ValueError(f"relative_error must be in (0, 1), got {relative_error}")
        self.relative_error = relative_error
        self._gamma = (1 + relative_error) / (1 - relative_error)
        self._log_gamma = math.log(self._gamma)
        self.buckets: dict[int, int] = {}
        self.exact: array[float] | None = array("d")  # None once EXACT_LIMIT values were added
        self.count = 0
        self.min: float | None = None
        self.max: float | None = None

    def add(self, value: float) -> None:
        """Record one duration in seconds."""
        # ``not >`` also catches NaN, which no bucket can hold.
        value = self.MIN_S if not value > self.MIN_S else min(value, self.MAX_S)
        index = math.ceil(math.log(value) / self._log_gamma)
        self.buckets[index] = self.buckets.get(index, 0) + 1
        if self.exact is not None:
            self.exact = self.exact if len(self.exact) < self.EXACT_LIMIT else None
            if self.exact is not None:
                self.exact.append(value)
        self.count += 1
        self.min = value if self.min is None else min(self.min, value)
        self.max = value if self.max is None else max(self.max, value)

    def quantile(self, q: float) -> float | None:
        """The ``q`` quantile (0 ≤ q ≤ 1), None when nothing was added."""
        if not 0 <= q <= 1:
            raise ValueError(f"a quantile is in [0, 1], got {q}")
        if self.min is None or self.max is None:  # nothing added
            return None
        if self.exact is not None:
            from gym_core.metrics import quantile  # pure Python, like this module

            return quantile(self.exact, q)
        rank = max(1, math.ceil(q * self.count))  # the rank-th smallest value, from 1
        seen = 0
        for index in sorted(self.buckets):
            seen += self.buckets[index]
            if seen >= rank:
                # The bucket (gamma^(i-1), gamma^i]: its midpoint in relative terms is within the error.
                estimate = 2 * self._gamma**index / (self._gamma + 1)
                return min(max(estimate, self.min), self.max)
        return self.max  # not reached: the counts add up to self.count


class EnvironmentProgress(msgspec.Struct):
    """One environment's scored rollouts so far and their mean reward."""

    rollouts: int
    mean_reward: float | None


class ProgressEvent(msgspec.Struct, kw_only=True):
    """The figures of a collection at one moment; a line of ``--progress json``.

    The counts are this run's: ``done`` (scored), ``failed`` and ``skipped`` (already in the output
    when the run began, so a resumed run starts there) add up to at most ``total``; ``failures``
    counts the failed rollouts by typed reason; ``environments`` maps each
    environment (the rows' ``environment``, ``?`` when a row has none, as ``gym profile`` groups
    them) to its scored rollouts; latencies are of scored rollouts, retries included."""

    event: Literal["progress", "done"]
    total: int
    skipped: int
    done: int
    failed: int
    retried: int
    in_flight: int
    elapsed_s: float
    rollouts_per_s: float
    mean_reward: float | None
    environments: dict[str, EnvironmentProgress]
    failures: dict[str, int]
    latency_p50_s: float | None
    latency_p99_s: float | None
    interrupted: bool = False
    # Of the rollouts in flight, those waiting their turn (no request sent yet); the time rollouts
    # waited before their first request (not part of their deadline or latency).
    queued: int = 0
    queue_p50_s: float | None = None
    queue_p99_s: float | None = None
    # Seconds left at the throughput observed (:func:`eta_s`); None until :data:`ETA_MIN_FINISHED`
    # rollouts finished, and in the "done" event.
    eta_s: float | None = None


StartupPhase = Literal["venv", "servers", "ready"]


class StartupEvent(msgspec.Struct, kw_only=True):
    """One step of the start-up of ``gym run``, ``gym collect --serve`` or ``gym reverify --serve``
    (before any rollout); a line of ``--progress json``.

    ``phase`` and ``state``: ``venv`` (a plugin's venv: ``preparing``, ``building`` when it must be
    built, then ``built`` or ``reused``;
    none with ``--isolation none``), ``servers`` (``starting``: the server processes are started),
    ``ready`` (``waiting`` for each server, a model server loading its model included, then ``ready``
    as each answers ``/ready``, then ``all`` with no name; or ``exited``: that server exited before it
    was ready, and the start-up stops, the error naming its exit status and last lines; or ``timeout``,
    once per server still not ready when the ready timeout passed, and the start-up stops).
    ``done`` of ``total``: the phase's steps finished; ``kind``: the server's (``model``,
    ``resources``, ``agent``); ``elapsed_s``: since the start-up began."""

    event: Literal["startup"] = "startup"
    phase: StartupPhase
    state: str
    name: str | None = None
    kind: str | None = None
    done: int = 0
    total: int = 0
    elapsed_s: float = 0.0


class RunningServer(msgspec.Struct, kw_only=True):
    """One server process of a run that is up: ``name`` (a replica's, ``counter#1``, or its
    instance's), ``instance``, ``kind``, ``plugin`` (its server type), ``url``, ``venv`` (``built``,
    ``reused``, or ``none (gym's)`` with ``--isolation none``)."""

    name: str
    instance: str
    kind: str
    plugin: str
    url: str
    venv: str


class RunningEvent(msgspec.Struct, kw_only=True):
    """``gym run``'s last line of ``--progress json`` once every server is ready (after its
    ``startup`` events): the head server's URL, the seconds the start-up took and each server."""

    event: Literal["running"] = "running"
    head_url: str
    ready_after_s: float
    servers: list[RunningServer]


def describe_startup(event: StartupEvent) -> str:
    """One readable line of a start-up step (``--progress rich`` and ``plain``)."""
    count = f"({event.done}/{event.total})"
    at = f"{event.elapsed_s:.1f} s"
    if event.phase == "venv":
        if event.state == "preparing":
            return (
                f"start-up: venv of {event.name}: checking, built if missing ({event.done}/{event.total} ready), {at}"
            )
        if event.state == "building":
            return f"start-up: building the venv of {event.name} ({event.done}/{event.total} ready), {at}"
        return f"start-up: venv of {event.name} {event.state} ({event.done}/{event.total} ready), {at}"
    if event.phase == "servers":
        return f"start-up: starting {event.total} server{'' if event.total == 1 else 's'}, {at}"
    if event.state == "waiting":
        loading = ": ready once its model is loaded" if event.kind == "model" else ""
        return f"start-up: waiting for {event.name} ({event.kind}{loading}) to be ready {count}, {at}"
    if event.state == "all":
        return f"start-up: all {event.total} servers ready after {at}"
    if event.state == "exited":
        return f"start-up: {event.name} ({event.kind}) exited before it was ready {count}, {at}"
    if event.state == "timeout":
        return f"start-up: {event.name} ({event.kind}) still not ready, no more waiting {count}, {at}"
    return f"start-up: {event.name} ready {count} after {at}"


def eta_s(summary: CollectSummary, now: float | None = None) -> float | None:
    """Seconds until every rollout is finished, from what this run observed: None before
    :data:`ETA_MIN_FINISHED` rollouts finished (done or failed), or when none is left.

    The rate is the larger of two observed throughputs: the rollouts finished over the seconds since
    the rollouts began, and the rollouts running (in flight, not waiting their turn) over the median
    latency of those scored (Little's law: what the ones in flight deliver at the latency seen). The
    first lags while rollouts finish in waves (every ``--parallel`` at once, then none for a
    latency); the second is right from the first wave but knows nothing of what is left to wait for."""
    import time

    finished = summary.done + summary.failed
    left = summary.total - summary.skipped - finished
    if left <= 0 or finished < ETA_MIN_FINISHED:
        return None
    elapsed = (summary.finished or (now if now is not None else time.monotonic())) - summary.started
    rate = finished / elapsed if elapsed > 0 else 0.0
    running = summary.in_flight - summary.queued
    median = summary.latency.quantile(0.5)
    if running > 0 and median:
        rate = max(rate, running / median)
    return left / rate if rate > 0 else None


def progress_event(
    summary: CollectSummary, event: Literal["progress", "done"] = "progress", interrupted: bool = False
) -> ProgressEvent:
    """The figures of ``summary`` now."""
    elapsed = summary.elapsed_s
    sums = summary.environment_reward_sum
    return ProgressEvent(
        event=event,
        total=summary.total,
        skipped=summary.skipped,
        done=summary.done,
        failed=summary.failed,
        retried=summary.retried,
        in_flight=summary.in_flight,
        elapsed_s=elapsed,
        rollouts_per_s=(summary.done + summary.failed) / max(elapsed, 1e-9),
        mean_reward=summary.mean_reward,
        environments={
            name: EnvironmentProgress(n, sums.get(name, 0.0) / n if n else None)
            for name, n in sorted(summary.environment_done.items())
        },
        failures=dict(sorted(summary.failure_reasons.items(), key=lambda kv: (-kv[1], kv[0]))),
        latency_p50_s=summary.latency.quantile(0.5),
        latency_p99_s=summary.latency.quantile(0.99),
        interrupted=interrupted,
        queued=summary.queued,
        queue_p50_s=summary.queue.quantile(0.5),
        queue_p99_s=summary.queue.quantile(0.99),
        eta_s=eta_s(summary) if event == "progress" else None,
    )


def _queue(event: ProgressEvent) -> str | None:
    """The rollouts waiting their turn and how long rollouts waited, once any waited 1 ms or more."""
    if not event.queued and (event.queue_p99_s or 0) < 0.001:
        return None
    return f"queued {event.queued}, waited p50 {_seconds(event.queue_p50_s)} p99 {_seconds(event.queue_p99_s)}"


def _reward(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _seconds(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.2f} s"


def _eta(event: ProgressEvent) -> str | None:
    if event.eta_s is None:
        return None
    seconds = round(event.eta_s)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def _environments(event: ProgressEvent, limit: int = 6) -> str:
    by_size = sorted(event.environments.items(), key=lambda kv: (-kv[1].rollouts, kv[0]))
    text = ", ".join(f"{name} {_reward(e.mean_reward)} ({e.rollouts})" for name, e in by_size[:limit])
    return text + (f", +{len(by_size) - limit} more" if len(by_size) > limit else "")


def _failures(event: ProgressEvent, limit: int = 6) -> str:
    items = list(event.failures.items())
    text = ", ".join(f"{reason} {n}" for reason, n in items[:limit])
    return text + (f", +{len(items) - limit} more" if len(items) > limit else "")


def describe_progress(event: ProgressEvent) -> str:
    """One readable line of the figures (``--progress plain``)."""
    finished = event.skipped + event.done + event.failed
    percent = 100 * finished / event.total if event.total else 100.0
    parts = [
        f"{'done' if event.event == 'done' else 'collecting'} {finished}/{event.total} ({percent:.0f}%)",
        f"{event.rollouts_per_s:.2f} rollouts/s",
        f"mean reward {_reward(event.mean_reward)}",
    ]
    if event.environments:
        parts.append(f"by environment: {_environments(event)}")
    failed = f"failed {event.failed}" + (f" ({_failures(event)})" if event.failures else "")
    parts.append(failed + (f", retried {event.retried}" if event.retried else ""))
    parts.append(f"latency p50 {_seconds(event.latency_p50_s)} p99 {_seconds(event.latency_p99_s)}")
    if (queue := _queue(event)) is not None:
        parts.append(queue)
    if event.event == "progress":
        parts.append(f"in flight {event.in_flight}")
        eta = _eta(event)
        if eta:
            parts.append(f"ETA {eta}")
    else:
        parts.append(f"in {event.elapsed_s:.1f} s" + (" (interrupted)" if event.interrupted else ""))
    return " | ".join(parts)


class Reporter:
    """Shows a collection's progress. ``start`` when the rollouts begin, ``update`` every
    ``period_s`` while they run (:func:`follow`), ``stop`` when they end, however they end;
    ``finish`` once the command is done (also when nothing was left to collect)."""

    period_s: float = 10.0

    def startup(self, event: StartupEvent) -> None:
        """A step of ``--serve``'s start-up (before :meth:`start`)."""

    def running(self, event: RunningEvent) -> None:
        """``gym run``'s servers are all ready (its command prints their table itself)."""

    def start(self, summary: CollectSummary) -> None:
        """The rollouts begin."""
        self.update(summary)

    def update(self, summary: CollectSummary) -> None:
        """Show the figures now."""

    def stop(self, summary: CollectSummary) -> None:
        """The rollouts ended (done, failed or interrupted)."""

    def finish(self, summary: CollectSummary, interrupted: bool = False) -> None:
        """The command is done: the final figures."""


async def follow(reporter: Reporter, summary: CollectSummary) -> None:
    """Update ``reporter`` every ``period_s`` until cancelled (on the collector's event loop, so
    that it reads the summary between rollouts, never in the middle of one's update)."""
    import asyncio  # here: `gym --help` imports this module (PROGRESS_MODES), and asyncio costs 70 ms

    while True:
        await asyncio.sleep(reporter.period_s)
        reporter.update(summary)


class PlainReporter(Reporter):
    """A line per interval and a final line on ``console`` (stderr), no colours, no cursor moves."""

    def __init__(self, console: Console, interval_s: float = 10.0):
        self.console = console
        self.period_s = interval_s

    def _print(self, line: str) -> None:
        self.console.print(line, markup=False, highlight=False, soft_wrap=True)

    def startup(self, event: StartupEvent) -> None:
        self._print(describe_startup(event))

    def update(self, summary: CollectSummary) -> None:
        self._print(describe_progress(progress_event(summary)))

    def finish(self, summary: CollectSummary, interrupted: bool = False) -> None:
        self._print(describe_progress(progress_event(summary, "done", interrupted)))


class JsonReporter(Reporter):
    """One :class:`ProgressEvent` per line on ``stream`` (stdout), flushed at once."""

    def __init__(self, stream: IO[str] | None = None, interval_s: float = 10.0):
        self.stream = stream if stream is not None else sys.stdout
        self.period_s = interval_s
        self._encoder = msgspec.json.Encoder()

    def _emit(self, event: ProgressEvent | StartupEvent | RunningEvent) -> None:
        self.stream.write(self._encoder.encode(event).decode() + "\n")
        self.stream.flush()

    def startup(self, event: StartupEvent) -> None:
        self._emit(event)

    def running(self, event: RunningEvent) -> None:
        self._emit(event)

    def update(self, summary: CollectSummary) -> None:
        self._emit(progress_event(summary))

    def finish(self, summary: CollectSummary, interrupted: bool = False) -> None:
        self._emit(progress_event(summary, "done", interrupted))


class RichReporter(Reporter):
    """The progress bar and the live panel on ``console``, redrawn ``refresh_per_second`` times a
    second; what the servers print meanwhile scrolls above it. The last state stays on screen."""

    def __init__(self, console: Console, refresh_per_second: float = 4.0):
        self.console = console
        self.period_s = 1 / refresh_per_second
        self._live = None
        self._progress = None
        self._bar = None

    def startup(self, event: StartupEvent) -> None:
        # Before the live panel: each step a line, so that the minutes of a venv build or a model
        # load say what they wait for.
        self.console.print(
            describe_startup(event),
            markup=False,
            highlight=False,
            style="dim" if event.state in ("preparing", "waiting") else None,
        )

    def start(self, summary: CollectSummary) -> None:
        from rich.live import Live
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        # Never started itself: the Live below draws it, on our timer rather than its own thread.
        self._progress = Progress(
            TextColumn("[bold]collecting"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            # Our ETA, from the throughput this run observed (eta_s); rich's own remaining-time column
            # extrapolated from its first seconds, which were 10x off.
            TextColumn("ETA {task.fields[eta]}"),
            console=self.console,
            auto_refresh=False,
        )
        self._bar = self._progress.add_task("collect", total=summary.total, completed=summary.skipped, eta="measuring")
        self._live = Live(self.render(summary), console=self.console, auto_refresh=False, transient=False)
        self._live.start()

    def render(self, summary: CollectSummary) -> RenderableType:
        """The bar (once started) and the panel of ``summary``'s figures."""
        from rich.console import Group

        panel = progress_panel(progress_event(summary))
        return panel if self._progress is None else Group(self._progress, panel)

    def update(self, summary: CollectSummary) -> None:
        if self._live is None or self._progress is None or self._bar is None:
            return
        eta = _eta(progress_event(summary))
        self._progress.update(
            self._bar, completed=summary.skipped + summary.done + summary.failed, eta=eta or "measuring"
        )
        self._live.update(self.render(summary), refresh=True)

    def stop(self, summary: CollectSummary) -> None:
        if self._live is None:
            return
        self.update(summary)
        self._live.stop()
        self._live = None


def progress_panel(event: ProgressEvent) -> RenderableType:
    """The live panel of ``event``'s figures (names are shown as text, never read as markup)."""
    from rich.panel import Panel
    from rich.table import Table
    from rich.text import Text

    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    grid.add_row("rollouts/s", Text(f"{event.rollouts_per_s:.2f}   in flight {event.in_flight}"))
    grid.add_row("mean reward", Text(_reward(event.mean_reward)))
    if event.environments:
        grid.add_row("by environment", Text(_environments(event)))
    failed = f"{event.failed}" + (f"  ({_failures(event)})" if event.failures else "")
    grid.add_row(
        "failed",
        Text(failed + (f"   retried {event.retried}" if event.retried else ""), style="yellow" if event.failed else ""),
    )
    grid.add_row("latency", Text(f"p50 {_seconds(event.latency_p50_s)}   p99 {_seconds(event.latency_p99_s)}"))
    if (queue := _queue(event)) is not None:
        grid.add_row("waiting", Text(queue))
    return Panel(grid, title="gym collect", title_align="left", expand=False)


def make_reporter(mode: str, console: Console, interval_s: float = 10.0, stdout: IO[str] | None = None) -> Reporter:
    """The reporter of a ``--progress`` mode: ``auto`` is ``rich`` when ``console`` (stderr) is a
    terminal, else ``plain``; ``json`` writes to ``stdout``."""
    if mode not in PROGRESS_MODES:
        raise ValueError(f"unknown progress mode {mode!r}: choose one of {', '.join(PROGRESS_MODES)}")
    if mode == "auto":
        mode = "rich" if console.is_terminal else "plain"
    if mode == "rich":
        return RichReporter(console)
    if mode == "plain":
        return PlainReporter(console, interval_s)
    return JsonReporter(stdout, interval_s)


@contextlib.contextmanager
def progress_reporter(mode: str, console: Console, interval_s: float = 10.0) -> Iterator[Reporter]:
    """The reporter of a ``--progress`` mode (:func:`make_reporter`). With ``json`` stdout carries its
    events only: while open, what else would go there (the servers' output, which the supervisor
    writes to ``sys.stdout``) goes to stderr."""
    reporter = make_reporter(mode, console, interval_s, stdout=sys.stdout)
    if mode != "json":
        yield reporter
        return
    with contextlib.redirect_stdout(sys.stderr):
        yield reporter
