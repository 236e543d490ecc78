"""Rollouts: JSONL tasks in, JSONL scored rollouts out, resumable, losing nothing; and reading them back.

- Each (task, rollout) pair is one ``POST /run`` on an agent server, at most ``parallel`` at a time.
- A row is written and flushed as soon as its rollout completes, so an interrupted run (Ctrl+C,
  kill -9) keeps every completed rollout; re-running skips the pairs already in the output file
  (a partial last line left by a kill is cut off first) and never duplicates one.
- A rollout that fails for an infrastructure reason (a server unreachable or restarting, a 5xx, a
  timeout) is retried within the run, up to ``retries`` times with exponential backoff: the collector
  is the one layer that retries a rollout, from the start in a fresh session. What still fails goes
  to the failures file with its typed reason and the number of attempts; the run goes on, and the
  next run retries it.
- Every rollout has an overall deadline (``rollout_timeout_s``, all its attempts together): the
  collector stops waiting then, and each ``/run`` carries what is left of it (``x-gym-timeout``,
  :data:`gym_core.client.TIMEOUT_HEADER`) so that the servers give up too rather than outlive it.
- One collection at a time per output file: :func:`output_lock` holds an exclusive lock for the
  whole run, and a second ``gym collect`` on the same file stops at once, naming the holder.
  Resuming drops duplicate (task, rollout) rows it finds (:func:`read_done`).
- Which agent runs a task: ``--agent``, else the task's ``agent_ref``, else the only agent of the
  running config (:func:`choose_agent`, checked before the first rollout).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import errno
import fcntl
import os
import random
import shlex
import socket
import sys
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec

from gym_core.errors import (
    GymError,
    ServerCallError,
    ServerHTTPError,
    ServerTimeoutError,
    ServerUnavailableError,
    did_you_mean,
)

from gym_cli.live import LatencySketch

if TYPE_CHECKING:
    from gym_core.client import ServerClient

__all__ = [
    "InputError",
    "OutputLockedError",
    "check_writable",
    "output_lock",
    "is_infrastructure_failure",
    "INFRASTRUCTURE_REASONS",
    "GaveUp",
    "with_retries",
    "failure_fields",
    "CollectOptions",
    "CollectSummary",
    "run_async",
    "iter_jsonl",
    "read_tasks",
    "read_done",
    "read_rollouts",
    "pending_pairs",
    "task_agent",
    "choose_agent",
    "check_agents",
    "collect_rollouts",
]

_encoder = msgspec.json.Encoder()
T = TypeVar("T")


class InputError(GymError):
    """A tasks, rollouts or output file gym cannot use; the message names the file and line."""


class OutputLockedError(InputError):
    """Another collection is writing the same output file; the message names it (pid, host, command)."""


@dataclass
class CollectOptions:
    """Where rows go, and how tasks run: ``agent`` runs every task (``--agent``); else a task's own
    ``agent_ref``, else ``default_agent`` (see :func:`choose_agent`)."""

    output: Path
    failures: Path
    agent: str | None = None
    repeats: int = 1
    parallel: int = 16
    sampling: dict[str, Any] = field(default_factory=dict)
    default_agent: str | None = None
    retries: int = 3  # extra attempts of a rollout that failed for an infrastructure reason
    # The first retry's delay, doubled per retry: 3 + 6 + 12 s outlast a restarted server's start-up.
    retry_backoff_s: float = 3.0
    retry_backoff_max_s: float = 60.0
    rollout_timeout_s: float = 1800.0  # one rollout, all its attempts together


@dataclass
class CollectSummary:
    """Counts of a collection run, updated as rollouts complete (read by :mod:`gym_cli.live`)."""

    total: int = 0
    skipped: int = 0
    done: int = 0
    failed: int = 0
    retried: int = 0  # attempts that failed for an infrastructure reason and were retried
    duplicates_dropped: int = 0  # duplicate rows resuming removed from the output file
    reward_sum: float = 0.0
    in_flight: int = 0  # rollouts started and not yet written (their retries' waits included)
    # Scored rollouts and their reward sum per environment: the row's ``environment``, "?" when none,
    # as ``gym profile`` groups them.
    environment_done: dict[str, int] = field(default_factory=dict)
    environment_reward_sum: dict[str, float] = field(default_factory=dict)
    failure_reasons: dict[str, int] = field(default_factory=dict)  # failed rollouts by typed reason
    latency: LatencySketch = field(default_factory=LatencySketch)  # scored rollouts' wall time, retries included
    started: float = field(default_factory=time.monotonic)
    finished: float | None = None  # set when collect_rollouts returns

    @property
    def mean_reward(self) -> float | None:
        return self.reward_sum / self.done if self.done else None

    @property
    def elapsed_s(self) -> float:
        return (self.finished or time.monotonic()) - self.started


def run_async(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine on uvloop when it is installed (faster sockets), else on asyncio's loop, with
    the garbage collector tuned for thousands of requests in flight (:func:`gym_core.serving.tune_gc`)."""
    from gym_core.serving import tune_gc

    tune_gc()
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(coro)


def iter_jsonl(path: Path) -> Iterator[tuple[int, Any, str | None]]:
    """``(line number, value, problem)`` for each non-blank line; ``problem`` when not JSON."""
    with path.open("rb") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                yield number, msgspec.json.decode(line), None
            except msgspec.DecodeError as exc:
                yield number, None, f"{path}:{number}: not valid JSON ({exc})"


def read_tasks(path: Path, limit: int | None = None) -> list[dict[str, Any]]:
    """Task rows of a JSONL file; every malformed line is reported with its number, at once."""
    if not path.is_file():
        raise InputError(f"input file not found: {path}")
    tasks: list[dict[str, Any]] = []
    problems: list[str] = []
    for number, row, problem in iter_jsonl(path):
        if problem:
            problems.append(problem)
        elif not isinstance(row, dict):
            problems.append(f"{path}:{number}: a task must be a JSON object, got {type(row).__name__}")
        elif not isinstance(row.get("responses_create_params"), dict):
            problems.append(f"{path}:{number}: missing 'responses_create_params' object (the model's input)")
        else:
            tasks.append(row)
        if limit is not None and len(tasks) >= limit:
            break
    if problems:
        shown = problems[:20] + ([f"... and {len(problems) - 20} more"] if len(problems) > 20 else [])
        raise InputError("malformed input:\n" + "\n".join(f"  {p}" for p in shown))
    if not tasks:
        raise InputError(f"{path}: no tasks")
    return tasks


def read_done(output: Path) -> tuple[set[tuple[int, int]], int]:
    """The (task, rollout) pairs already in the output, and how many duplicate rows were dropped.

    A partial last line (the process was killed while writing it) is cut off so that appending goes on
    from a clean line boundary. A pair found on several lines (two collections wrote the file at once,
    before :func:`output_lock` existed) keeps its first row: the file is rewritten without the others.
    Call it while holding :func:`output_lock`.
    """
    done: set[tuple[int, int]] = set()
    if not output.exists():
        return done, 0
    with output.open("rb+") as f:
        data = f.read()
        end = data.rfind(b"\n") + 1
        if end < len(data):
            f.truncate(end)
    lines = data[:end].splitlines(keepends=True)
    duplicates: set[int] = set()  # line numbers of the rows to drop
    for number, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            row = msgspec.json.decode(line)
            pair = (int(row["task_index"]), int(row["rollout_index"]))
        except (msgspec.DecodeError, KeyError, TypeError, ValueError):
            raise InputError(f"{output}: a line is not a gym rollout row; is this the right --output file?") from None
        if pair in done:
            duplicates.add(number)
        done.add(pair)
    if duplicates:
        # Written aside and renamed over: a kill during the rewrite leaves the old file whole.
        tmp = output.with_name(output.name + ".dedup-tmp")
        with tmp.open("wb") as f:
            f.writelines(line for number, line in enumerate(lines) if number not in duplicates)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, output)
    return done, len(duplicates)


def check_writable(path: Path, what: str = "--output") -> None:
    """Raise :class:`InputError` unless ``path`` can be appended to: not a directory, not under a
    file, its directory creatable and writable. Checked before anything starts (``--serve``)."""
    if path.is_dir():
        raise InputError(f"{what} {path} is a directory; give a file path, e.g. {path / 'rollouts.jsonl'}")
    ancestor = path.parent
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise InputError(f"{what} {path}: {ancestor} is a file, not a directory")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists():
            with path.open("ab"):
                pass
        else:  # a real write: permission bits say nothing to root, and sysfs or a read-only mount refuse even root
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
            path.unlink()
    except OSError as exc:
        raise InputError(f"{what} {path}: cannot write it ({exc.strerror or exc})") from None


@contextlib.contextmanager
def output_lock(output: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``output`` while the block runs; :class:`OutputLockedError` at once
    when another process holds it, naming that process (pid, host, command, since when).

    The lock is ``flock`` on a sidecar file, ``OUTPUT.lock``, which also records the holder. The
    kernel releases it when the holder exits, even on kill -9, so a stale file never blocks a run.
    """
    lock_path = output.with_name(output.name + ".lock")
    while True:
        try:
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise InputError(f"--output {output}: cannot create its lock file {lock_path} ({exc.strerror})") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = _read_holder(fd)
            os.close(fd)
            if exc.errno not in (errno.EAGAIN, errno.EACCES):
                raise InputError(f"--output {output}: cannot lock {lock_path} ({exc.strerror})") from None
            raise OutputLockedError(
                f"{output} is being written by another collection ({holder}); wait for it to end or stop it, "
                f"or choose another --output"
            ) from None
        # The holder before us unlinks the file before it unlocks: make sure that the file we locked is
        # still the one at the path, else a third process could lock a new file there alongside us.
        try:
            current = os.stat(lock_path).st_ino
        except FileNotFoundError:
            current = None
        if current == os.fstat(fd).st_ino:
            break
        os.close(fd)
    try:
        since = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
        holder = {"pid": os.getpid(), "host": socket.gethostname(), "since": since,
                  "command": shlex.join(["gym", *sys.argv[1:]] if sys.argv[1:] else sys.argv)}
        os.ftruncate(fd, 0)
        os.write(fd, _encoder.encode(holder) + b"\n")
        yield
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(lock_path)
        os.close(fd)


def _read_holder(fd: int) -> str:
    try:
        holder = msgspec.json.decode(os.pread(fd, 65536, 0))
        return f"pid {holder['pid']} on {holder['host']}, since {holder['since']}: {holder['command']}"
    except (OSError, msgspec.DecodeError, KeyError, TypeError):
        return "a process that has not yet said who it is"


def read_rollouts(path: Path) -> list[dict[str, Any]]:
    """The rows of a rollouts file (``gym collect``'s output) without their ``response`` (the bulk),
    for statistics; an :class:`InputError` at the first line that is not a rollout row."""
    if not path.is_file():
        raise InputError(f"rollouts file not found: {path}")
    rows = []
    for number, row, problem in iter_jsonl(path):
        if problem:
            raise InputError(problem)
        if not isinstance(row, dict) or "reward" not in row or "task_index" not in row:
            raise InputError(f"{path}:{number}: not a rollout row (needs task_index and reward)")
        response = row.pop("response", None)
        if isinstance(response, dict):  # rows of agents that record no usage/model themselves still have them
            for key in ("usage", "model"):
                if row.get(key) is None and response.get(key) is not None:
                    row[key] = response[key]
        rows.append(row)
    if not rows:
        raise InputError(f"{path}: no rollouts")
    return rows


def pending_pairs(n_tasks: int, repeats: int, done: set[tuple[int, int]]) -> list[tuple[int, int]]:
    """Pairs still to collect, rollout-major so that every task gets its first rollouts early."""
    return [(t, r) for r in range(repeats) for t in range(n_tasks) if (t, r) not in done]


def task_agent(task: dict[str, Any]) -> str | None:
    """The agent instance a task names itself (``agent_ref: {"name": ...}``, or ``agent``), if any."""
    ref = task.get("agent_ref")
    if isinstance(ref, dict) and isinstance(ref.get("name"), str):
        return ref["name"]
    if isinstance(task.get("agent"), str):
        return task["agent"]
    return None


def choose_agent(tasks: list[dict[str, Any]], agents: list[str]) -> str | None:
    """The agent for the tasks that name none: the only one of ``agents`` (the agent instances of the
    running config); None when every task names its own. Raises :class:`InputError` when some task
    names none and there is not exactly one agent to choose."""
    unnamed = sum(task_agent(task) is None for task in tasks)
    if not unnamed:
        return None
    if len(agents) == 1:
        return agents[0]
    what = f"{unnamed} of {len(tasks)} tasks name no agent (no agent_ref)"
    if not agents:
        raise InputError(f"{what} and the running config has no agent server: add one, or give rows an agent_ref")
    raise InputError(f"{what} and the running config has {len(agents)} agents ({', '.join(agents)}): "
                     f"pass --agent NAME, or give rows an agent_ref {{\"name\": ...}}")


def check_agents(tasks: list[dict[str, Any]], agent: str | None, kinds: dict[str, str | None]) -> None:
    """Raise :class:`InputError` when ``agent`` (``--agent``), or else an ``agent_ref`` of the tasks,
    names no agent instance of the running config: every rollout through it would fail. ``kinds``
    maps each instance of the running config to its kind (None when unknown here)."""
    agents = sorted(name for name, kind in kinds.items() if kind == "agent")
    named = {agent} if agent is not None else {a for a in map(task_agent, tasks) if a is not None}
    problems = []
    for name in sorted(named):
        if name not in kinds:
            problems.append(f"no server instance named {name!r}{did_you_mean(name, agents)}")
        elif kinds[name] not in ("agent", None):
            problems.append(f"{name!r} is a {kinds[name]} server, not an agent")
    if not problems:
        return
    where = "--agent" if agent is not None else "the tasks' agent_ref"
    running = f"the running config's agents: {', '.join(agents) or 'none'}"
    raise InputError(f"{where}: {'; '.join(problems)} ({running})")


def _agent_for(task: dict[str, Any], options: CollectOptions) -> str:
    agent = options.agent or task_agent(task) or options.default_agent
    if agent is None:
        raise InputError("no agent for this task: pass --agent NAME or give rows an agent_ref {\"name\": ...}")
    return agent


def _request_body(task: dict[str, Any], sampling: dict[str, Any]) -> dict[str, Any]:
    if not sampling:
        return task
    return {**task, "responses_create_params": {**task["responses_create_params"], **sampling}}


# Typed reasons an agent passes on (its answer's error ``type``) that say a server failed, restarted
# or lost the rollout's state, not that the task is bad: a fresh attempt can succeed. An agent that
# already spent its own retries answers 424 with one of these (x-gym-final) rather than a 5xx.
INFRASTRUCTURE_REASONS = frozenset({
    "ServerUnavailableError", "ServerTimeoutError", "internal_error", "upstream_error",
    "session_expired",  # the resources server lost the session (restarted, evicted)
    "invalid_session",  # ...or no longer knows its signing key (a restart with a per-process key)
})


def is_infrastructure_failure(exc: BaseException) -> bool:
    """Whether a failed ``/run`` says nothing about the task: a server unreachable or restarting, a
    timeout, a 5xx or 429, or an agent's answer whose typed reason is one of
    :data:`INFRASTRUCTURE_REASONS`. Such a rollout is worth running again; a task the environment
    refused, or an answer that is not a verdict, is not."""
    if isinstance(exc, (ServerUnavailableError, ServerTimeoutError)):
        return True
    if not isinstance(exc, ServerHTTPError):
        return False
    return exc.status is not None and (exc.status >= 500 or exc.status == 429) or exc.reason in INFRASTRUCTURE_REASONS


class GaveUp(Exception):
    """What :func:`with_retries` raises once it stops: the last failure (``cause``) and ``attempts``."""

    def __init__(self, cause: BaseException, attempts: int):
        super().__init__(str(cause))
        self.cause = cause
        self.attempts = attempts


# What a failed attempt may raise: a server call, a refused input, an answer of the wrong shape.
_ATTEMPT_ERRORS = (ServerCallError, GymError, KeyError, TypeError, ValueError, msgspec.DecodeError)


async def with_retries(
    attempt: Callable[[], Awaitable[T]], *, retries: int, backoff_s: float, backoff_max_s: float, deadline: float,
    on_retry: Callable[[], None] = lambda: None,
) -> T:
    """The collector's retry policy for one unit of work (a rollout, a re-verified row): await
    ``attempt()``; after a failure for an infrastructure reason (:func:`is_infrastructure_failure`),
    call ``on_retry`` and try again after ``backoff_s`` doubled per retry (at most ``backoff_max_s``,
    plus up to half of it at random), at most ``retries`` more times and never past ``deadline``
    (``time.monotonic()``). Any other failure, or the last one, raises :class:`GaveUp`."""
    tries = 0
    while True:
        tries += 1
        try:
            return await attempt()
        except _ATTEMPT_ERRORS as exc:
            # Jitter spreads the retries of work that failed together; never below the nominal delay.
            delay = min(backoff_max_s, backoff_s * 2 ** (tries - 1)) * (1 + random.random() / 2)
            if tries <= retries and is_infrastructure_failure(exc) and time.monotonic() + delay < deadline:
                on_retry()
                await asyncio.sleep(delay)
                continue
            raise GaveUp(exc, tries) from exc


def failure_fields(failure: GaveUp) -> dict[str, Any]:
    """How a failures file records a failure: its typed ``reason``, ``message``, ``attempts`` and,
    when a server answered, ``status``."""
    exc = failure.cause
    fields: dict[str, Any] = {"reason": exc.reason if isinstance(exc, ServerCallError) else type(exc).__name__,
                              "message": str(exc), "attempts": failure.attempts}
    if isinstance(exc, ServerCallError) and exc.status is not None:
        fields["status"] = exc.status
    return fields


async def collect_rollouts(
    client: ServerClient,
    tasks: list[dict[str, Any]],
    pairs: Iterable[tuple[int, int]],
    options: CollectOptions,
    summary: CollectSummary,
    on_progress: Callable[[CollectSummary], None] = lambda s: None,
) -> CollectSummary:
    """Run the pairs through agents, appending each completed rollout to the output file.

    Each pair is one worker's from start to end, its retries included, so it is written at most once.
    ``client`` should make one attempt per request (``ClientConfig(max_attempts=1)``): retrying here
    and in the client too would multiply the attempts."""
    summary.started = time.monotonic()
    queue = list(pairs)
    queue.reverse()  # pop() from the end takes them in order
    options.output.parent.mkdir(parents=True, exist_ok=True)
    with options.output.open("ab", buffering=0) as out, options.failures.open("ab", buffering=0) as failures:

        async def attempt(task: dict[str, Any], agent: str, deadline: float) -> tuple[dict[str, Any], float]:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ServerTimeoutError(agent, "/run", f"the rollout's deadline of {options.rollout_timeout_s:g} s passed")
            # The client sends this limit with the request (x-gym-timeout): the agent can stop in time too.
            raw = await client.request("POST", agent, "/run", body=task, timeout_s=left)
            result = msgspec.json.decode(raw)
            return result, float(result["reward"])

        async def one(task_index: int, rollout_index: int) -> None:
            # The row records the task as sent: sampling overrides included.
            task = _request_body(tasks[task_index], options.sampling)
            started = time.monotonic()
            deadline = started + options.rollout_timeout_s
            tries = 0
            while True:
                tries += 1
                try:
                    agent = _agent_for(task, options)
                    result, reward = await attempt(task, agent, deadline)
                    break
                except (ServerCallError, GymError, KeyError, TypeError, ValueError, msgspec.DecodeError) as exc:
                    # Jitter spreads the retries of rollouts that failed together; never below the nominal delay.
                    delay = min(options.retry_backoff_max_s, options.retry_backoff_s * 2 ** (tries - 1)) * (1 + random.random() / 2)
                    if tries <= options.retries and is_infrastructure_failure(exc) and time.monotonic() + delay < deadline:
                        summary.retried += 1
                        await asyncio.sleep(delay)
                        continue
                    reason = exc.reason if isinstance(exc, ServerCallError) else type(exc).__name__
                    failure: dict[str, Any] = {"task_index": task_index, "rollout_index": rollout_index, "reason": reason,
                                               "message": str(exc), "attempts": tries}
                    if isinstance(exc, ServerCallError) and exc.status is not None:
                        failure["status"] = exc.status
                    failures.write(_encoder.encode(failure) + b"\n")
                    summary.failed += 1
                    summary.failure_reasons[reason] = summary.failure_reasons.get(reason, 0) + 1
                    on_progress(summary)
                    return
            row = {"task_index": task_index, "rollout_index": rollout_index, "agent": agent, "reward": reward}
            row.update((k, v) for k, v in result.items() if k not in row and k != "response")
            row.update((k, v) for k, v in task.items() if k not in row)
            row["response"] = result.get("response")
            # One write call per row: a kill can only cut the last line, which read_done repairs.
            out.write(_encoder.encode(row) + b"\n")
            summary.done += 1
            summary.reward_sum += reward
            summary.latency.add(time.monotonic() - started)
            environment = str(row.get("environment") or "?")
            summary.environment_done[environment] = summary.environment_done.get(environment, 0) + 1
            summary.environment_reward_sum[environment] = summary.environment_reward_sum.get(environment, 0.0) + reward
            on_progress(summary)

        async def worker() -> None:
            while queue:
                pair = queue.pop()
                summary.in_flight += 1
                try:
                    await one(*pair)
                finally:
                    summary.in_flight -= 1

        workers = [asyncio.create_task(worker()) for _ in range(max(1, min(options.parallel, len(queue))))]
        try:
            await asyncio.gather(*workers)
        finally:
            for w in workers:
                w.cancel()
            os.fsync(out.fileno())
            summary.finished = time.monotonic()
    return summary
