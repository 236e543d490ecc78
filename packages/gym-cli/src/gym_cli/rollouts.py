"""Rollouts: JSONL tasks in, JSONL scored rollouts out, resumable, losing nothing; and reading them back.

- Each (task, rollout) pair is one ``POST /run`` on an agent server, at most ``parallel`` at a time.
- A row is written and flushed as soon as its rollout completes, so an interrupted run (Ctrl+C,
  kill -9) keeps every completed rollout; re-running skips the pairs already in the output file
  (a partial last line left by a kill is cut off first) and never duplicates one.
- A failing rollout goes to the failures file with its typed reason; the run goes on, and the
  next run retries it.
- Which agent runs a task: ``--agent``, else the task's ``agent_ref``, else the only agent of the
  running config (:func:`choose_agent`, checked before the first rollout).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Coroutine, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec

from gym_core.errors import GymError, ServerCallError

if TYPE_CHECKING:
    from gym_core.client import ServerClient

__all__ = [
    "InputError",
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
    "collect_rollouts",
]

_encoder = msgspec.json.Encoder()
T = TypeVar("T")


class InputError(GymError):
    """A tasks, rollouts or output file gym cannot use; the message names the file and line."""


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


@dataclass
class CollectSummary:
    """Counts of a collection run, updated as rollouts complete."""

    total: int = 0
    skipped: int = 0
    done: int = 0
    failed: int = 0
    reward_sum: float = 0.0
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


def read_done(output: Path) -> set[tuple[int, int]]:
    """(task, rollout) pairs already in the output. A partial last line (the process was killed
    while writing it) is cut off so that appending goes on from a clean line boundary."""
    done: set[tuple[int, int]] = set()
    if not output.exists():
        return done
    with output.open("rb+") as f:
        data = f.read()
        end = data.rfind(b"\n") + 1
        if end < len(data):
            f.truncate(end)
        for line in data[:end].splitlines():
            if not line.strip():
                continue
            try:
                row = msgspec.json.decode(line)
                done.add((int(row["task_index"]), int(row["rollout_index"])))
            except (msgspec.DecodeError, KeyError, TypeError, ValueError):
                raise InputError(f"{output}: a line is not a gym rollout row; is this the right --output file?") from None
    return done


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
        row.pop("response", None)
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


def _agent_for(task: dict[str, Any], options: CollectOptions) -> str:
    agent = options.agent or task_agent(task) or options.default_agent
    if agent is None:
        raise InputError("no agent for this task: pass --agent NAME or give rows an agent_ref {\"name\": ...}")
    return agent


def _request_body(task: dict[str, Any], sampling: dict[str, Any]) -> dict[str, Any]:
    if not sampling:
        return task
    return {**task, "responses_create_params": {**task["responses_create_params"], **sampling}}


async def collect_rollouts(
    client: ServerClient,
    tasks: list[dict[str, Any]],
    pairs: Iterable[tuple[int, int]],
    options: CollectOptions,
    summary: CollectSummary,
    on_progress: Callable[[CollectSummary], None] = lambda s: None,
) -> CollectSummary:
    """Run the pairs through agents, appending each completed rollout to the output file."""
    summary.started = time.monotonic()
    queue = list(pairs)
    queue.reverse()  # pop() from the end takes them in order
    options.output.parent.mkdir(parents=True, exist_ok=True)
    with options.output.open("ab", buffering=0) as out, options.failures.open("ab", buffering=0) as failures:

        async def one(task_index: int, rollout_index: int) -> None:
            # The row records the task as sent: sampling overrides included.
            task = _request_body(tasks[task_index], options.sampling)
            try:
                agent = _agent_for(task, options)
                raw = await client.request("POST", agent, "/run", body=task)
                result = msgspec.json.decode(raw)
                reward = float(result["reward"])
            except (ServerCallError, GymError, KeyError, TypeError, ValueError, msgspec.DecodeError) as exc:
                reason = exc.reason if isinstance(exc, ServerCallError) else type(exc).__name__
                failure = {"task_index": task_index, "rollout_index": rollout_index, "reason": reason, "message": str(exc)}
                failures.write(_encoder.encode(failure) + b"\n")
                summary.failed += 1
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
            on_progress(summary)

        async def worker() -> None:
            while queue:
                await one(*queue.pop())

        workers = [asyncio.create_task(worker()) for _ in range(max(1, min(options.parallel, len(queue))))]
        try:
            await asyncio.gather(*workers)
        finally:
            for w in workers:
                w.cancel()
            os.fsync(out.fileno())
            summary.finished = time.monotonic()
    return summary
