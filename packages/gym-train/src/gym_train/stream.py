"""A stream of rollouts for asynchronous RL, with bounded staleness.

For asynchronous training the trainer's "dataset" is a :class:`StreamDataset`: it pulls rollouts as
they are produced instead of reading a finished file, from either source:

- :class:`FileTail`: a growing ``gym collect`` output file (JSONL, one row per completed rollout,
  each written with one ``write()``). It reads complete lines only: a partial last line waits for
  its end, and if the file is cut back (``gym collect`` resuming drops a partial line a kill left),
  reading goes on from the new end. The file may not exist yet;
- :class:`RolloutQueue`: rows handed over in-process, e.g. by a collector's callback (thread-safe).

Every rollout carries the **policy version** it was generated with: the row's ``policy_version``
(``gym collect`` copies a task's fields into its rows, so tasks written with one give rollouts with
one), or the version :class:`RolloutQueue` was told, else the version being served when the row
arrived (``served_version``; counted as ``unversioned``). When a rollout is handed out, its
staleness is the trainer's current version (:attr:`StreamDataset.policy_version`, advanced after
each optimizer step) minus its own. Beyond ``max_staleness`` it is dropped, or, with
``stale="downweight"``, kept with weight ``decay ** (staleness - max_staleness)``.
:attr:`StreamDataset.counts` says how many were received, accepted, dropped, down-weighted, unversioned
and malformed. Every wait is bounded: :class:`StreamTimeoutError`.
"""

from __future__ import annotations

import queue
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import msgspec

from gym_core.errors import GymError

__all__ = [
    "VERSION_FIELD",
    "StreamedRollout",
    "StreamCounts",
    "StreamTimeoutError",
    "FileTail",
    "RolloutQueue",
    "StreamDataset",
]

VERSION_FIELD = "policy_version"
"""The row field that says which policy version generated a rollout."""

_decoder = msgspec.json.Decoder()
_PROBLEMS_KEPT = 20


@dataclass
class StreamedRollout:
    """A rollout as the trainer gets it: the row, the version it was generated with, and, once
    handed out, its staleness (versions behind) and weight (1, or less when down-weighted)."""

    row: dict[str, Any]
    policy_version: int
    staleness: int = 0
    weight: float = 1.0


@dataclass
class StreamCounts:
    """What the stream did: ``received`` rows (well-formed), handed out as ``accepted`` (of which
    ``downweighted``) or ``dropped_stale``; ``unversioned`` rows stamped with the served version;
    ``malformed`` rows skipped, the last few described in ``problems``."""

    received: int = 0
    accepted: int = 0
    dropped_stale: int = 0
    downweighted: int = 0
    unversioned: int = 0
    malformed: int = 0
    problems: list[str] = field(default_factory=list)

    def problem(self, message: str) -> None:
        self.malformed += 1
        self.problems = [*self.problems[-(_PROBLEMS_KEPT - 1) :], message]


class StreamTimeoutError(GymError):
    """Fewer rollouts than asked for arrived within the wait's bound."""

    def __init__(self, wanted: str, timeout_s: float, counts: StreamCounts):
        self.counts = counts
        super().__init__(
            f"the rollout stream gave fewer than {wanted} within {timeout_s:g} s "
            f"(received {counts.received}, accepted {counts.accepted}, dropped as stale {counts.dropped_stale}, "
            f"malformed {counts.malformed})"
        )


def _version(value: Any) -> int | None:
    """A row's policy version, or None when it has none; ValueError when it is not an integer."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{VERSION_FIELD} must be an integer, not {value!r}")
    return value


class FileTail:
    """The complete lines appended to a JSONL file since the last :meth:`read` (see the module)."""

    def __init__(self, path: Path | str):
        self.path = Path(path)
        self.offset = 0  # bytes consumed, complete lines only
        self.line = 0  # complete lines consumed (for messages)

    def read(self, counts: StreamCounts) -> list[tuple[dict[str, Any], int | None]]:
        """The rows of the new complete lines, each with its version (None: unversioned); a line
        that is not a JSON object with a valid version is counted as malformed, with its number."""
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            return []
        if size < self.offset:  # cut back: a partial line we never consumed was dropped
            self.offset = size
        if size == self.offset:
            return []
        with self.path.open("rb") as file:
            file.seek(self.offset)
            data = file.read(size - self.offset)
        end = data.rfind(b"\n")
        if end < 0:
            return []  # only a partial line so far: wait for its end
        self.offset += end + 1
        rows = []
        for raw in data[: end + 1].splitlines():
            self.line += 1
            if not raw.strip():
                continue
            try:
                row = _decoder.decode(raw)
                if not isinstance(row, dict):
                    raise ValueError(f"a row must be a JSON object, not {type(row).__name__}")
                rows.append((row, _version(row.get(VERSION_FIELD))))
            except (msgspec.DecodeError, ValueError) as exc:
                counts.problem(f"{self.path}:{self.line}: {exc}")
        return rows


class RolloutQueue:
    """Rows handed over in-process: ``put(row)`` (or call the queue itself) from any thread, e.g. as
    a collector's per-rollout callback; ``policy_version`` overrides the row's."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[tuple[dict[str, Any], int | None]] = queue.SimpleQueue()

    def put(self, row: dict[str, Any], policy_version: int | None = None) -> None:
        self._queue.put((row, policy_version))

    __call__ = put

    def read(self, counts: StreamCounts) -> list[tuple[dict[str, Any], int | None]]:
        rows = []
        while True:
            try:
                row, version = self._queue.get_nowait()
            except queue.Empty:
                return rows
            try:
                if not isinstance(row, dict):
                    raise ValueError(f"a row must be a dict, not {type(row).__name__}")
                rows.append((row, _version(version if version is not None else row.get(VERSION_FIELD))))
            except ValueError as exc:
                counts.problem(f"queued row: {exc}")


class StreamDataset:
    """Rollouts pulled from ``source`` as they are produced, with bounded staleness (see the module).

    ``max_staleness``: how many versions behind a rollout may be and still count fully; ``stale``:
    ``"drop"`` or ``"downweight"`` beyond that (weight ``decay ** (staleness - max_staleness)``);
    ``served_version``: the version to stamp on unversioned rows (default: :attr:`policy_version`
    when the row arrives); ``poll_interval_s``: how often a waiting call looks for new rows.
    """

    def __init__(
        self,
        source: FileTail | RolloutQueue | Path | str,
        *,
        max_staleness: int = 1,
        stale: Literal["drop", "downweight"] = "drop",
        decay: float = 0.5,
        policy_version: int = 0,
        served_version: Callable[[], int] | None = None,
        poll_interval_s: float = 0.05,
    ):
        if max_staleness < 0:
            raise ValueError(f"max_staleness must be at least 0, not {max_staleness}")
        if stale not in ("drop", "downweight"):
            raise ValueError(f"stale must be 'drop' or 'downweight', not {stale!r}")
        if not 0 < decay <= 1:
            raise ValueError(f"decay must be in (0, 1], not {decay}")
        self.source = source if isinstance(source, (FileTail, RolloutQueue)) else FileTail(source)
        self.max_staleness = max_staleness
        self.stale = stale
        self.decay = decay
        self.policy_version = policy_version
        self.served_version = served_version or (lambda: self.policy_version)
        self.poll_interval_s = poll_interval_s
        self.counts = StreamCounts()
        self._buffer: deque[StreamedRollout] = deque()
        self._lock = threading.Lock()

    def advance(self, version: int | None = None) -> int:
        """The trainer's policy moved on (an optimizer step): to ``version``, else by one. Returns it."""
        self.policy_version = self.policy_version + 1 if version is None else version
        return self.policy_version

    def _pull(self) -> None:
        for row, version in self.source.read(self.counts):
            self.counts.received += 1
            if version is None:
                self.counts.unversioned += 1
                version = self.served_version()
            self._buffer.append(StreamedRollout(row, version))

    def _admit(self, rollout: StreamedRollout) -> bool:
        """Stamp staleness and weight on ``rollout``; False when it is dropped as stale."""
        rollout.staleness = max(0, self.policy_version - rollout.policy_version)
        beyond = rollout.staleness - self.max_staleness
        if beyond <= 0:
            rollout.weight = 1.0
        elif self.stale == "drop":
            self.counts.dropped_stale += 1
            return False
        else:
            rollout.weight = self.decay**beyond
            self.counts.downweighted += 1
        self.counts.accepted += 1
        return True

    def _give_back(self, rollouts: list[StreamedRollout]) -> None:
        """Undo :meth:`_admit` for rollouts a timed-out wait had taken: first in line again."""
        self._buffer.extendleft(reversed(rollouts))
        self.counts.accepted -= len(rollouts)
        self.counts.downweighted -= sum(r.staleness > self.max_staleness for r in rollouts)

    def get(self, n: int, timeout_s: float) -> list[StreamedRollout]:
        """The next ``n`` rollouts that pass the staleness bound, in arrival order; waits up to
        ``timeout_s`` for them, then raises :class:`StreamTimeoutError` (keeping those it had)."""
        deadline = time.monotonic() + timeout_s
        taken: list[StreamedRollout] = []
        with self._lock:
            while True:
                self._pull()
                while self._buffer and len(taken) < n:
                    rollout = self._buffer.popleft()
                    if self._admit(rollout):
                        taken.append(rollout)
                if len(taken) == n:
                    return taken
                if time.monotonic() >= deadline:
                    self._give_back(taken)
                    raise StreamTimeoutError(f"{n} rollouts", timeout_s, self.counts)
                time.sleep(min(self.poll_interval_s, max(0.0, deadline - time.monotonic())))

    def groups(
        self,
        count: int,
        group_size: int,
        timeout_s: float,
        key: Callable[[dict[str, Any]], Hashable] = lambda row: row.get("task_index"),
    ) -> list[list[StreamedRollout]]:
        """The next ``count`` complete groups: ``group_size`` rollouts of one task (``key``, by default
        the row's ``task_index``; GRPO's group over ``repeats``), in the order they completed. The
        staleness bound applies to each member; a group left with none is skipped. Waits up to
        ``timeout_s``, then raises :class:`StreamTimeoutError`; incomplete groups stay buffered."""
        deadline = time.monotonic() + timeout_s
        done: list[list[StreamedRollout]] = []
        with self._lock:
            while True:
                self._pull()
                forming: OrderedDict[Hashable, list[StreamedRollout]] = OrderedDict()
                complete: list[list[StreamedRollout]] = []
                for rollout in self._buffer:
                    members = forming.setdefault(key(rollout.row), [])
                    members.append(rollout)
                    if len(members) == group_size:
                        complete.append(forming.pop(key(rollout.row)))
                taken = complete[: count - len(done)]
                used = {id(r) for group in taken for r in group}
                self._buffer = deque(r for r in self._buffer if id(r) not in used)
                for group in taken:
                    kept = [r for r in group if self._admit(r)]
                    if kept:
                        done.append(kept)
                if len(done) == count:
                    return done
                if time.monotonic() >= deadline:
                    self._give_back([r for group in done for r in group])
                    raise StreamTimeoutError(f"{count} groups of {group_size}", timeout_s, self.counts)
                time.sleep(min(self.poll_interval_s, max(0.0, deadline - time.monotonic())))
