"""Rollout collection: JSONL tasks in, JSONL scored rollouts out, resumable, losing nothing.

- Each (task, rollout) pair is one ``POST /run`` on an agent server, at most ``parallel`` at a time.
- A row is written and flushed as soon as its rollout completes, so an interrupted run (Ctrl+C,
  kill -9) keeps every completed rollout; re-running skips the pairs already in the output file
  (a partial last line left by a kill is cut off first) and never duplicates one.
- A failing rollout goes to the failures file with its typed reason; the run goes on, and the
  next run retries it.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Coroutine, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import msgspec

from gym_core import ServerCallError, ServerClient
from gym_core.errors import GymError
from gym_core.serving import tune_gc

__all__ = ["run_async", "iter_jsonl", "InputError", "CollectOptions", "CollectSummary", "read_tasks", "read_done", "collect_rollouts", "pending_pairs"]

_encoder = msgspec.json.Encoder()
T = TypeVar("T")
SAMPLING_KEYS = ("temperature", "top_p", "max_output_tokens")


class InputError(GymError):
    pass


@dataclass
class CollectOptions:
    output: Path
    failures: Path
    agent: str | None = None
    repeats: int = 1
    parallel: int = 16
    sampling: dict[str, Any] = field(default_factory=dict)


@dataclass
class CollectSummary:
    total: int = 0
    skipped: int = 0
    done: int = 0
    failed: int = 0
    reward_sum: float = 0.0
    started: float = field(default_factory=time.monotonic)

    @property
    def mean_reward(self) -> float | None:
        return self.reward_sum / self.done if self.done else None

    @property
    def elapsed_s(self) -> float:
        return time.monotonic() - self.started


def run_async(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine on uvloop when it is installed (faster sockets), else on asyncio's loop, with
    the garbage collector tuned for thousands of requests in flight (:func:`gym_core.serving.tune_gc`)."""
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


def pending_pairs(n_tasks: int, repeats: int, done: set[tuple[int, int]]) -> list[tuple[int, int]]:
    """Pairs still to collect, rollout-major so that every task gets its first rollouts early."""
    return [(t, r) for r in range(repeats) for t in range(n_tasks) if (t, r) not in done]


def _agent_for(task: dict[str, Any], default: str | None) -> str:
    if default:
        return default
    ref = task.get("agent_ref")
    if isinstance(ref, dict) and isinstance(ref.get("name"), str):
        return ref["name"]
    if isinstance(task.get("agent"), str):
        return task["agent"]
    raise InputError("no agent for this task: pass --agent NAME or give rows an agent_ref {\"name\": ...}")


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
                agent = _agent_for(task, options.agent)
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
    return summary
