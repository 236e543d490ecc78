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
- Every rollout has an overall deadline (``rollout_timeout_s``, all its attempts together), counted
  from when its first request is sent: the collector stops waiting then, and each ``/run`` carries
  what is left of it (``x-gym-timeout``, :data:`gym_core.client.TIMEOUT_HEADER`) so that the servers
  give up too rather than outlive it.
- ``parallel`` rollouts are in flight, but at most as many send at once as the client has
  connections for their agent (:func:`connection_limit`); the others wait their turn in order, each
  held as its (task, rollout) pair and the time it was taken (:func:`run_window`), a few dozen bytes,
  its task not yet read. The wait is not part of the deadline: it is reported apart, as the row's
  ``queue_s`` (when it waited a millisecond or more) and in the live view.
- One collection at a time per output file: :func:`output_lock` holds an exclusive lock for the
  whole run, and a second ``gym collect`` on the same file stops at once, naming the holder.
  Resuming drops duplicate (task, rollout) rows it finds (:func:`read_done`).
- Which agent runs a task: ``--agent``, else the task's ``agent_ref``, else the only agent of the
  running config (:func:`choose_agent`, checked before the first rollout).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import datetime
import errno
import fcntl
import itertools
import os
import random
import shlex
import socket
import sys
import time
from array import array
from collections.abc import Awaitable, Callable, Container, Coroutine, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, TypeVar, overload

import msgspec

from gym_core.errors import (
    GymError,
    ServerCallError,
    ServerHTTPError,
    ServerTimeoutError,
    ServerUnavailableError,
    did_you_mean,
)
from gym_core.failures import INFRASTRUCTURE_TYPES, retried_by_collector
from gym_core.rows import rollout_row

from gym_cli.live import LatencySketch

if TYPE_CHECKING:
    from gym_core.client import ServerClient

__all__ = [
    "InputError",
    "OutputLockedError",
    "check_writable",
    "drop_if_empty",
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
    "TaskFile",
    "scan_tasks",
    "read_tasks",
    "DonePairs",
    "read_done",
    "read_rollouts",
    "pending_pairs",
    "task_agent",
    "choose_agent",
    "check_agents",
    "run_parallel",
    "run_window",
    "connection_limit",
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
    queued: int = 0  # of those, waiting their turn: none of their requests sent yet
    # How long each rollout waited before its first request was sent (its turn among ``parallel``,
    # a connection to its agent): not part of its deadline, nor of its latency.
    queue: LatencySketch = field(default_factory=LatencySketch)
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
    the garbage collector tuned for thousands of requests in flight (:func:`gym_core.process_tuning.tune_gc`)
    and the open-files limit raised for their connections (:func:`gym_core.process_tuning.raise_open_files_limit`)."""
    from gym_core.process_tuning import (  # a leaf: gym_core.serving would import the server stack
        raise_open_files_limit,
        tune_gc,
    )

    tune_gc()
    raise_open_files_limit()
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


class _AnObject(msgspec.Struct):
    """A JSON object, its fields skipped unread: what the checking pass needs of a task's model input."""


class _TaskHead(msgspec.Struct):
    """What the checking pass decodes of a task: that its model input is an object, and its agent."""

    responses_create_params: _AnObject
    agent_ref: Any = None
    agent: Any = None


_task_head = msgspec.json.Decoder(_TaskHead)


def _agent_named(ref: Any, agent: Any) -> str | None:
    if isinstance(ref, dict) and isinstance(ref.get("name"), str):
        return ref["name"]
    return agent if isinstance(agent, str) else None


def _task_problem(path: Path, number: int, line: bytes) -> str | None:
    """Why a line is not a task (for a line the typed decode refused): what read_tasks always said."""
    try:
        row = msgspec.json.decode(line)
    except msgspec.DecodeError as exc:
        return f"{path}:{number}: not valid JSON ({exc})"
    if not isinstance(row, dict):
        return f"{path}:{number}: a task must be a JSON object, got {type(row).__name__}"
    if not isinstance(row.get("responses_create_params"), dict):
        return f"{path}:{number}: missing 'responses_create_params' object (the model's input)"
    return None


class TaskFile:
    """The tasks of a JSONL file, checked in one pass (:func:`scan_tasks`) and decoded one at a time
    when asked for (``tasks[i]``), so that millions of rows cost 8 bytes each (their line's offset)
    rather than a decoded row each. Also what :func:`choose_agent` and :func:`check_agents` need:
    the agents the tasks name (``agents``) and how many name none (``unnamed``).

    The file must not change while it is in use: a read that finds it changed raises
    :class:`InputError`. Close it (or use it as a context manager) to release its descriptor."""

    def __init__(self, path: Path, offsets: array[int], agents: frozenset[str], unnamed: int, stamp: tuple[int, int]):
        self.path = path
        self._offsets = offsets  # where each task's line starts, then where the last one ends
        self.agents = agents
        self.unnamed = unnamed
        self._stamp = stamp  # (size, mtime_ns) when it was scanned
        self._fd: int | None = None

    def __len__(self) -> int:
        return len(self._offsets) - 1

    def __getitem__(self, index: int) -> dict[str, Any]:
        if not 0 <= index < len(self):
            raise IndexError(f"task {index} of {len(self)}")
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDONLY)
        start, end = self._offsets[index], self._offsets[index + 1]
        stat = os.fstat(self._fd)
        data = os.pread(self._fd, end - start, start)
        try:
            task = msgspec.json.decode(data)
        except msgspec.DecodeError:
            task = None
        if (stat.st_size, stat.st_mtime_ns) != self._stamp or not isinstance(task, dict):
            raise InputError(
                f"{self.path} changed during the collection: tasks are read from it as they are needed, "
                "so it must stay as it was until the run ends"
            )
        return task

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return (self[index] for index in range(len(self)))

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> TaskFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def scan_tasks(path: Path, limit: int | None = None) -> TaskFile:
    """The first ``limit`` (default: all) task rows of a JSONL file as a :class:`TaskFile`, checked
    in one streaming pass; every malformed line is reported with its number, at once."""
    if not path.is_file():
        raise InputError(f"input file not found: {path}")
    offsets = array("q")
    agents: set[str] = set()
    unnamed = 0
    problems: list[str] = []
    position = 0
    with path.open("rb") as f:
        stat = os.fstat(f.fileno())
        for number, line in enumerate(f, 1):
            start = position
            position += len(line)
            if line.isspace():
                continue
            try:
                head = _task_head.decode(line)
            except msgspec.DecodeError:
                head = None
                problem = _task_problem(path, number, line)
                if problem:
                    problems.append(problem)
                    continue
            offsets.append(start)
            if head is not None:
                agent = _agent_named(head.agent_ref, head.agent)
            else:  # the typed decode refused what the generic one accepts (a duplicate key, say)
                row = msgspec.json.decode(line)
                agent = _agent_named(row.get("agent_ref"), row.get("agent"))
            if agent is None:
                unnamed += 1
            else:
                agents.add(agent)
            if limit is not None and len(offsets) >= limit:
                break
    if problems:
        shown = problems[:20] + ([f"... and {len(problems) - 20} more"] if len(problems) > 20 else [])
        raise InputError("malformed input:\n" + "\n".join(f"  {p}" for p in shown))
    if not offsets:
        raise InputError(f"{path}: no tasks")
    offsets.append(position)  # the end of the last task's line (and of any blank lines after it)
    return TaskFile(path, offsets, frozenset(agents), unnamed, (stat.st_size, stat.st_mtime_ns))


def read_tasks(path: Path, limit: int | None = None) -> list[dict[str, Any]]:
    """Task rows of a JSONL file, decoded; every malformed line is reported with its number, at once.
    For a file too large to hold decoded, :func:`scan_tasks`."""
    with scan_tasks(path, limit) as tasks:
        return list(tasks)


class DonePairs:
    """Which (task, rollout) pairs of a collection of ``n_tasks`` × ``repeats`` are done: one bit each
    (2 MB for a million tasks × 16), rollout-major as :func:`pending_pairs` walks them. Pairs outside
    that range (an output of a run with more tasks or repeats) are kept in a set, so that resuming
    still finds their duplicates. A set of pairs for :func:`read_done` and :func:`pending_pairs`."""

    def __init__(self, n_tasks: int, repeats: int):
        self.n_tasks = n_tasks
        self.repeats = repeats
        self.count = 0  # pairs done within the range
        self._bits = bytearray((n_tasks * repeats + 7) // 8)
        self._outside: set[tuple[int, int]] = set()

    def _bit(self, pair: tuple[int, int]) -> int | None:
        task, rollout = pair
        if 0 <= task < self.n_tasks and 0 <= rollout < self.repeats:
            return rollout * self.n_tasks + task
        return None

    def __contains__(self, pair: tuple[int, int]) -> bool:
        bit = self._bit(pair)
        if bit is None:
            return pair in self._outside
        return bool(self._bits[bit >> 3] >> (bit & 7) & 1)

    def add(self, pair: tuple[int, int]) -> None:
        bit = self._bit(pair)
        if bit is None:
            self._outside.add(pair)
        elif not self._bits[bit >> 3] >> (bit & 7) & 1:
            self._bits[bit >> 3] |= 1 << (bit & 7)
            self.count += 1

    def __len__(self) -> int:
        return self.count + len(self._outside)

    def add_new(self, rows: list[_RowPair]) -> list[int]:
        """Add the pairs of ``rows``; the positions in ``rows`` of those that were there already (or
        earlier in ``rows``). :meth:`add` for many at once, the bit arithmetic inlined: resuming a
        run of millions calls it once per block of rows."""
        bits, n_tasks, repeats, outside = self._bits, self.n_tasks, self.repeats, self._outside
        again = []
        for index, row in enumerate(rows):
            task, rollout = row.task_index, row.rollout_index
            if 0 <= task < n_tasks and 0 <= rollout < repeats:
                bit = rollout * n_tasks + task
                mask = 1 << (bit & 7)
                if bits[bit >> 3] & mask:
                    again.append(index)
                else:
                    bits[bit >> 3] |= mask
                    self.count += 1
            elif (task, rollout) in outside:
                again.append(index)
            else:
                outside.add((task, rollout))
        return again

    def missing(self) -> Iterator[tuple[int, int]]:
        """The pairs of the range not done, rollout-major; done bytes are skipped eight pairs at a time."""
        total = self.n_tasks * self.repeats
        for index, byte in enumerate(self._bits):
            if byte == 0xFF:
                continue
            for bit in range(index * 8, min(index * 8 + 8, total)):
                if not byte >> (bit & 7) & 1:
                    rollout, task = divmod(bit, self.n_tasks)
                    yield task, rollout


class _RowPair(msgspec.Struct):
    """What resuming decodes of an output row; the rest of the row is skipped unread."""

    task_index: int
    rollout_index: int


_row_pair = msgspec.json.Decoder(_RowPair)


def _pair_of(line: bytes, output: Path) -> tuple[int, int]:
    try:
        row = _row_pair.decode(line)
        return row.task_index, row.rollout_index
    except msgspec.ValidationError:
        pass  # an index the typed decode refuses but int() reads (2.0, "2"): as resuming always read it
    except msgspec.DecodeError:
        raise InputError(f"{output}: a line is not a gym rollout row; is this the right --output file?") from None
    try:
        row = msgspec.json.decode(line)
        return int(row["task_index"]), int(row["rollout_index"])
    except (KeyError, TypeError, ValueError):
        raise InputError(f"{output}: a line is not a gym rollout row; is this the right --output file?") from None


def _cut_partial_line(f: BinaryIO) -> None:
    """Truncate what follows the last newline of ``f`` (read backwards, a block at a time)."""
    size = position = f.seek(0, os.SEEK_END)
    end = 0
    while position > 0:
        step = min(1 << 16, position)
        position -= step
        f.seek(position)
        newline = f.read(step).rfind(b"\n")
        if newline >= 0:
            end = position + newline + 1
            break
    if end < size:
        f.truncate(end)


def _drop_spans(path: Path, spans: list[tuple[int, int]]) -> None:
    """Rewrite ``path`` without the byte ranges ``spans`` (sorted, disjoint), streaming. Written aside
    and renamed over: a kill during the rewrite leaves the old file whole."""
    tmp = path.with_name(path.name + ".dedup-tmp")
    with path.open("rb") as src, tmp.open("wb") as dst:
        position = 0
        for start, end in [*spans, (None, None)]:
            left = None if start is None else start - position
            while left is None or left > 0:
                chunk = src.read(1 << 20 if left is None else min(left, 1 << 20))
                if not chunk:
                    break
                dst.write(chunk)
                if left is not None:
                    left -= len(chunk)
            if end is not None:
                src.seek(end)
                position = end
        dst.flush()
        os.fsync(dst.fileno())
    os.replace(tmp, path)


Done = TypeVar("Done", DonePairs, set[tuple[int, int]])

_WINDOW = 8 << 20  # bytes of the output read and decoded at a time by resuming


def _window_rows(window: memoryview, output: Path) -> list[_RowPair]:
    """The indices of the non-blank lines of ``window`` (whole lines), decoded in one call."""
    try:
        return _row_pair.decode_lines(window)
    except msgspec.DecodeError:  # some line the typed decode refuses: line by line, as resuming always read them
        return [_RowPair(*_pair_of(line, output)) for line in bytes(window).split(b"\n") if line.strip()]


def _line_spans(window: memoryview, offset: int, wanted: list[int]) -> list[tuple[int, int]]:
    """The byte ranges (in the file: ``window`` starts at ``offset``) of the ``wanted`` non-blank lines."""
    spans, wanted_set, index, position = [], set(wanted), 0, 0
    for line in bytes(window).split(b"\n"):
        end = position + len(line) + 1
        if line.strip():
            if index in wanted_set:
                spans.append((offset + position, offset + end))
            index += 1
        position = end
    return spans


def _add_new(done: DonePairs | set[tuple[int, int]], rows: list[_RowPair]) -> list[int]:
    if isinstance(done, DonePairs):
        return done.add_new(rows)
    again = []
    for index, row in enumerate(rows):
        pair = (row.task_index, row.rollout_index)
        if pair in done:
            again.append(index)
        else:
            done.add(pair)
    return again


@overload
def read_done(output: Path) -> tuple[set[tuple[int, int]], int]: ...
@overload
def read_done(output: Path, done: Done) -> tuple[Done, int]: ...
def read_done(
    output: Path, done: DonePairs | set[tuple[int, int]] | None = None
) -> tuple[DonePairs | set[tuple[int, int]], int]:
    """The (task, rollout) pairs already in the output, added to ``done`` (a :class:`DonePairs`, or by
    default a new set), and how many duplicate rows were dropped.

    The file is read a block of whole lines at a time (memory holds one block, not the file), each row
    decoded only for its ``task_index`` and ``rollout_index``. A partial last line (the process was
    killed while writing it) is cut off so that appending goes on from a clean line boundary. A pair
    found on several lines (two collections wrote the file at once, before :func:`output_lock`
    existed) keeps its first row: the file is rewritten without the others. Call it while holding
    :func:`output_lock`.
    """
    if done is None:
        done = set()
    if not output.exists():
        return done, 0
    duplicates: list[tuple[int, int]] = []  # byte ranges of the rows to drop
    with output.open("rb+") as f:
        _cut_partial_line(f)
        f.seek(0)
        block = bytearray(_WINDOW)
        offset = filled = 0  # where the block starts in the file; how much of it is read
        while True:
            if filled == len(block):  # one line longer than the block
                block.extend(bytes(len(block)))
            with memoryview(block) as view:
                read = f.readinto(view[filled:])
            filled += read
            end = block.rfind(b"\n", 0, filled) + 1  # the file ends with a newline: at its end, every line is whole
            if end:
                with memoryview(block)[:end] as lines:
                    again = _add_new(done, _window_rows(lines, output))
                    if again:
                        duplicates.extend(_line_spans(lines, offset, again))
                block[: filled - end] = block[end:filled]  # the part line read ahead moves to the front
                offset, filled = offset + end, filled - end
            if not read:
                break
    if duplicates:
        _drop_spans(output, duplicates)
    return done, len(duplicates)


def drop_if_empty(path: Path) -> None:
    """Remove ``path`` when it is an empty file (a failures file that nothing was written to)."""
    with contextlib.suppress(OSError):
        if path.is_file() and path.stat().st_size == 0:
            path.unlink()


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
        since = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        holder = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "since": since,
            "command": shlex.join(["gym", *sys.argv[1:]] if sys.argv[1:] else sys.argv),
        }
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


def pending_pairs(n_tasks: int, repeats: int, done: Container[tuple[int, int]]) -> Iterator[tuple[int, int]]:
    """Pairs still to collect, rollout-major so that every task gets its first rollouts early;
    generated as they are taken, never held all at once."""
    if isinstance(done, DonePairs) and (done.n_tasks, done.repeats) == (n_tasks, repeats):
        return done.missing()
    return ((t, r) for r in range(repeats) for t in range(n_tasks) if (t, r) not in done)


def task_agent(task: dict[str, Any]) -> str | None:
    """The agent instance a task names itself (``agent_ref: {"name": ...}``, or ``agent``), if any."""
    return _agent_named(task.get("agent_ref"), task.get("agent"))


def _agents_of(tasks: TaskFile | Sequence[dict[str, Any]]) -> tuple[set[str], int]:
    """The agents the tasks name, and how many tasks name none."""
    if isinstance(tasks, TaskFile):
        return set(tasks.agents), tasks.unnamed
    named = [task_agent(task) for task in tasks]
    return {a for a in named if a is not None}, named.count(None)


def choose_agent(tasks: TaskFile | Sequence[dict[str, Any]], agents: list[str]) -> str | None:
    """The agent for the tasks that name none: the only one of ``agents`` (the agent instances of the
    running config); None when every task names its own. Raises :class:`InputError` when some task
    names none and there is not exactly one agent to choose."""
    unnamed = _agents_of(tasks)[1]
    if not unnamed:
        return None
    if len(agents) == 1:
        return agents[0]
    what = f"{unnamed} of {len(tasks)} tasks name no agent (no agent_ref)"
    if not agents:
        raise InputError(f"{what} and the running config has no agent server: add one, or give rows an agent_ref")
    raise InputError(
        f"{what} and the running config has {len(agents)} agents ({', '.join(agents)}): "
        f'pass --agent NAME, or give rows an agent_ref {{"name": ...}}'
    )


def check_agents(tasks: TaskFile | Sequence[dict[str, Any]], agent: str | None, kinds: dict[str, str | None]) -> None:
    """Raise :class:`InputError` when ``agent`` (``--agent``), or else an ``agent_ref`` of the tasks,
    names no agent instance of the running config: every rollout through it would fail. ``kinds``
    maps each instance of the running config to its kind (None when unknown here)."""
    agents = sorted(name for name, kind in kinds.items() if kind == "agent")
    named = {agent} if agent is not None else _agents_of(tasks)[0]
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
        raise InputError('no agent for this task: pass --agent NAME or give rows an agent_ref {"name": ...}')
    return agent


def _request_body(task: dict[str, Any], sampling: dict[str, Any]) -> dict[str, Any]:
    if not sampling:
        return task
    return {**task, "responses_create_params": {**task["responses_create_params"], **sampling}}


# Typed reasons that say a server failed, restarted or lost the rollout's state, not that the task is
# bad: the failure table's (gym_core.failures), under the name callers have imported from here. An
# agent that already spent its own retries relays a lost session as a 424 (x-gym-final), so the
# reason counts as well as the status.
INFRASTRUCTURE_REASONS = INFRASTRUCTURE_TYPES


def is_infrastructure_failure(exc: BaseException) -> bool:
    """Whether a failed ``/run`` says nothing about the task (the failure table's
    :func:`~gym_core.failures.retried_by_collector`): a server unreachable or restarting, a timeout,
    a 5xx or 429, or an agent's answer whose typed reason is one of :data:`INFRASTRUCTURE_REASONS`.
    Such a rollout is worth running again; a task the environment refused, or an answer that is not
    a verdict, is not."""
    if isinstance(exc, ServerHTTPError):
        return retried_by_collector(exc.status, exc.reason)
    # No answer: the client's own failure, by its row (a subclass counts as its base).
    return any(
        retried_by_collector(None, kind.__name__)
        for kind in (ServerUnavailableError, ServerTimeoutError)
        if isinstance(exc, kind)
    )


class GaveUp(Exception):
    """What :func:`with_retries` raises once it stops: the last failure (``cause``) and ``attempts``."""

    def __init__(self, cause: BaseException, attempts: int):
        super().__init__(str(cause))
        self.cause = cause
        self.attempts = attempts


# What a failed attempt may raise: a server call, a refused input, an answer of the wrong shape.
_ATTEMPT_ERRORS = (ServerCallError, GymError, KeyError, TypeError, ValueError, msgspec.DecodeError)


async def with_retries(
    attempt: Callable[[], Awaitable[T]],
    *,
    retries: int,
    backoff_s: float,
    backoff_max_s: float,
    deadline: float | Callable[[], float],
    on_retry: Callable[[], None] = lambda: None,
) -> T:
    """The collector's retry policy for one unit of work (a rollout, a re-verified row): await
    ``attempt()``; after a failure for an infrastructure reason (:func:`is_infrastructure_failure`),
    call ``on_retry`` and try again after ``backoff_s`` doubled per retry (at most ``backoff_max_s``,
    plus up to half of it at random), at most ``retries`` more times and never past ``deadline``
    (``time.monotonic()``; or a function returning it, asked after each failure: a rollout's deadline
    is known once its first request is sent). Any other failure, or the last one, raises :class:`GaveUp`."""
    tries = 0
    while True:
        tries += 1
        try:
            return await attempt()
        except _ATTEMPT_ERRORS as exc:
            # Jitter spreads the retries of work that failed together; never below the nominal delay.
            delay = min(backoff_max_s, backoff_s * 2 ** (tries - 1)) * (1 + random.random() / 2)
            until = deadline() if callable(deadline) else deadline
            if tries <= retries and is_infrastructure_failure(exc) and time.monotonic() + delay < until:
                on_retry()
                await asyncio.sleep(delay)
                continue
            raise GaveUp(exc, tries) from exc


def failure_fields(failure: GaveUp) -> dict[str, Any]:
    """How a failures file records a failure: its typed ``reason``, ``message``, ``attempts`` and,
    when a server answered, ``status``."""
    exc = failure.cause
    fields: dict[str, Any] = {
        "reason": exc.reason if isinstance(exc, ServerCallError) else type(exc).__name__,
        "message": str(exc),
        "attempts": failure.attempts,
    }
    if isinstance(exc, ServerCallError) and exc.status is not None:
        fields["status"] = exc.status
    return fields


def connection_limit(client: ServerClient, agent: str) -> int:
    """How many requests ``client`` sends to ``agent`` at once without one waiting for a pooled
    connection: its pool's limit per host, for each replica, within its limit in all."""
    try:
        replicas = len(client.replica_urls(agent))
    except ServerCallError:  # not a server of the run: the rollout fails typed when it tries
        replicas = 1
    return max(1, min(client.config.pool_limit, client.config.pool_limit_per_host * replicas))


async def run_window(
    items: Iterable[T],
    parallel: int,
    workers: int,
    handle: Callable[[T, float], Awaitable[None]],
    on_count: Callable[[int, int], None] = lambda in_flight, waiting: None,
) -> None:
    """Await ``handle(item, waited_s)`` for each of ``items`` with ``parallel`` of them in flight: at
    most ``workers`` handled at once, the others waiting their turn in order, each held as the item
    and when it was taken (``time.monotonic()``) rather than as a coroutine; ``waited_s`` is how long
    it waited for a worker (exactly 0.0 for an item a free worker took at once). ``items`` is
    consumed lazily, ``parallel`` ahead at most. Workers start :data:`START_BATCH` per event-loop
    turn. ``on_count(in_flight, waiting)`` follows each change. The first exception a handler raises
    cancels the others and is raised."""
    source = iter(items)
    parallel = max(1, parallel)
    busy = max(1, min(workers, parallel))  # workers that run items
    waiting: collections.deque[tuple[T, float]] = collections.deque()
    running = 0
    exhausted = False
    stopped = False  # a worker ended: the items ran out, or a handler failed

    def take() -> tuple[T, float] | None:
        """The next item for a worker (the first waiting, else the next of ``items``) and its wait;
        once every worker is busy, the rest of the window taken to wait its turn."""
        nonlocal running, exhausted
        now = time.monotonic()
        entry = None
        if waiting:
            item, taken = waiting.popleft()
            entry = item, now - taken
        elif not exhausted:
            for item in itertools.islice(source, 1):
                entry = item, 0.0  # a free worker took it at once
            exhausted = entry is None
        if entry is not None:
            running += 1
        room = parallel - running - len(waiting)
        if running >= busy and room > 0 and not exhausted:
            before = len(waiting)
            waiting.extend((item, now) for item in itertools.islice(source, room))
            exhausted = len(waiting) - before < room
        on_count(running + len(waiting), len(waiting))
        return entry

    async def worker() -> None:
        nonlocal stopped, running
        try:
            while (entry := take()) is not None:  # one event loop: workers take turns, never at once
                try:
                    await handle(*entry)
                finally:
                    running -= 1
                    on_count(running + len(waiting), len(waiting))
        finally:
            stopped = True

    started: list[asyncio.Task[None]] = []
    try:
        while len(started) < busy and not stopped:
            started.append(asyncio.create_task(worker()))
            if len(started) % START_BATCH == 0:
                await asyncio.sleep(0)  # let the started ones send, and the loop see their answers
        await asyncio.gather(*started)
    finally:
        for w in started:
            w.cancel()


# Workers started per event-loop turn. Each sends its first request as it starts: started all at once,
# 20,000 made one turn of many seconds, and their connect timeouts fired before the loop got round to
# the connections that had opened (16,100 rollouts failed "could not connect within 10 s", the agent idle).
START_BATCH = 1_000


async def run_parallel(items: Iterable[T], parallel: int, handle: Callable[[T], Awaitable[None]]) -> None:
    """Await ``handle(item)`` for each of ``items``, at most ``parallel`` at a time, taking them in
    order as workers free up; ``items`` is consumed lazily (a generator of millions costs nothing
    held). Workers start :data:`START_BATCH` per event-loop turn. The first exception a handler
    raises cancels the others and is raised."""
    source = iter(items)
    stopped = False  # a worker ended: the items ran out, or a handler failed

    async def worker() -> None:
        nonlocal stopped
        try:
            for item in source:  # one event loop: workers take turns at the iterator, never at once
                await handle(item)
        finally:
            stopped = True

    workers: list[asyncio.Task[None]] = []
    try:
        while len(workers) < max(1, parallel) and not stopped:
            workers.append(asyncio.create_task(worker()))
            if len(workers) % START_BATCH == 0:
                await asyncio.sleep(0)  # let the started ones send, and the loop see their answers
        await asyncio.gather(*workers)
    finally:
        for w in workers:
            w.cancel()


class _RolloutClock:
    """How long a rollout waited for its turn (for a worker, then for a connection to its agent) and
    when its first request was sent (its deadline counted from then; None until it is)."""

    __slots__ = ("waited", "sent")

    def __init__(self, waited: float):
        self.waited = waited
        self.sent: float | None = None

    def deadline(self, timeout_s: float) -> float:
        return (self.sent if self.sent is not None else time.monotonic()) + timeout_s


async def collect_rollouts(
    client: ServerClient,
    tasks: TaskFile | Sequence[dict[str, Any]],
    pairs: Iterable[tuple[int, int]],
    options: CollectOptions,
    summary: CollectSummary,
    on_progress: Callable[[CollectSummary], None] = lambda s: None,
) -> CollectSummary:
    """Run the pairs through agents, appending each completed rollout to the output file.

    ``tasks`` is indexed by task (a list, or a :class:`TaskFile` that reads each task when its pair
    starts); ``pairs`` is taken lazily (:func:`run_window`), so memory holds the rollouts in flight,
    not the run, and a rollout waiting its turn holds its pair, not its task. Each pair is one
    worker's from start to end, its retries included (:func:`with_retries`), so it is written at
    most once. At most :func:`connection_limit` rollouts of an agent send at once, so none waits in
    the client's pool with its deadline running. ``client`` should make one attempt per request
    (``ClientConfig(max_attempts=1)``): retrying here and in the client too would multiply the attempts."""
    summary.started = time.monotonic()
    options.output.parent.mkdir(parents=True, exist_ok=True)
    # The agents the rollouts go to, and as many workers as there are connections to them.
    named = {options.agent} if options.agent else _agents_of(tasks)[0] | {options.default_agent}
    limits = {agent: connection_limit(client, agent) for agent in named if agent is not None}
    gates = {agent: asyncio.Semaphore(limit) for agent, limit in limits.items()}
    workers = min(client.config.pool_limit, sum(limits.values())) if limits else options.parallel
    with options.output.open("ab", buffering=0) as out, options.failures.open("ab", buffering=0) as failures:

        async def attempt(task: dict[str, Any], clock: _RolloutClock) -> tuple[str, dict[str, Any], float]:
            agent = _agent_for(task, options)
            gate = gates.get(agent)
            if gate is None:  # an agent no task named up front (a list of tasks changed since): its own gate
                gate = gates[agent] = asyncio.Semaphore(connection_limit(client, agent))
            wait_from = time.monotonic() if gate.locked() else None
            async with gate:  # a connection to the agent is free: this request waits for nothing else
                now = time.monotonic()
                if clock.sent is None:  # the rollout's first request: its deadline starts now
                    clock.sent = now
                    if wait_from is not None:
                        clock.waited += now - wait_from
                    summary.queue.add(clock.waited)
                left = clock.deadline(options.rollout_timeout_s) - now
                if left <= 0:
                    raise ServerTimeoutError(
                        agent, "/run", f"the rollout's deadline of {options.rollout_timeout_s:g} s passed"
                    )
                # The client sends this limit with the request (x-gym-timeout): the agent can stop in time too.
                raw = await client.request("POST", agent, "/run", body=task, timeout_s=left)
            result = msgspec.json.decode(raw)
            return agent, result, float(result["reward"])

        def retried() -> None:
            summary.retried += 1

        async def one(pair: tuple[int, int], waited: float) -> None:
            task_index, rollout_index = pair
            # The row records the task as sent: sampling overrides included.
            task = _request_body(tasks[task_index], options.sampling)
            clock = _RolloutClock(waited)
            started = time.monotonic()
            try:
                agent, result, reward = await with_retries(
                    lambda: attempt(task, clock),
                    retries=options.retries,
                    backoff_s=options.retry_backoff_s,
                    backoff_max_s=options.retry_backoff_max_s,
                    deadline=lambda: clock.deadline(options.rollout_timeout_s),
                    on_retry=retried,
                )
            except GaveUp as failure:
                fields = failure_fields(failure)
                failures.write(
                    _encoder.encode({"task_index": task_index, "rollout_index": rollout_index, **fields}) + b"\n"
                )
                summary.failed += 1
                summary.failure_reasons[fields["reason"]] = summary.failure_reasons.get(fields["reason"], 0) + 1
                on_progress(summary)
                return
            # Wall time from the first request sent to the written row, retries and backoff included:
            # what `gym report` plots and takes percentiles of (gym_core.rows.LATENCY_FIELD).
            latency_s = time.monotonic() - (clock.sent if clock.sent is not None else started)
            queue_s = round(clock.waited, 3)
            # The row's precedence (collector fields > the agent's result > the task): gym_core.rows.
            row = rollout_row(
                result,
                task,
                task_index=task_index,
                rollout_index=rollout_index,
                agent=agent,
                reward=reward,
                latency_s=round(latency_s, 3),
                queue_s=queue_s if queue_s > 0 else None,
            )
            # One write call per row: a kill can only cut the last line, which read_done repairs.
            out.write(_encoder.encode(row) + b"\n")
            summary.done += 1
            summary.reward_sum += reward
            summary.latency.add(latency_s)
            environment = str(row.get("environment") or "?")
            summary.environment_done[environment] = summary.environment_done.get(environment, 0) + 1
            summary.environment_reward_sum[environment] = summary.environment_reward_sum.get(environment, 0.0) + reward
            on_progress(summary)

        def counted(in_flight: int, waiting: int) -> None:
            summary.in_flight, summary.queued = in_flight, waiting

        try:
            await run_window(pairs, options.parallel, workers, one, counted)
        finally:
            os.fsync(out.fileno())
            summary.finished = time.monotonic()
    return summary
