"""Rollouts in flight beyond the client's connections: they wait their turn as (task, rollout) pairs,
not as coroutines holding their tasks; a rollout's deadline starts when its first request is sent,
and the wait is reported apart (the row's queue_s, the live view, the profile). A real agent endpoint
on loopback answers each /run after a delay; the client has one connection to it."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from litestar import Litestar, Request, post

from gym_core.client import TIMEOUT_HEADER, ServerClient
from gym_core.options import ClientConfig
from gym_core.serving import ServerThread

from gym_cli.live import describe_progress, progress_event
from gym_cli.reward_profile import build_profile
from gym_cli.rollouts import CollectOptions, CollectSummary, collect_rollouts, run_async

RUN_S = 0.3  # each /run's answer takes this long


class CountedTasks(Sequence[dict[str, Any]]):
    """Tasks that count how many were read: a waiting rollout must not have read its own."""

    def __init__(self, n: int, read_s: float = 0.0):
        self.n = n
        self.read = 0
        self.read_s = read_s  # how long reading one takes (a long task decoded)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index):  # type: ignore[override]
        self.read += 1
        time.sleep(self.read_s)
        return {"responses_create_params": {"input": f"task {index}"}}


def slow_agent(seen: list[dict[str, Any]], summary: CollectSummary, tasks: CountedTasks) -> Litestar:
    lock = threading.Lock()
    busy = [0]

    @post("/run")
    async def run(request: Request) -> dict[str, float]:
        with lock:
            busy[0] += 1
            seen.append(
                {
                    "limit": float(request.headers[TIMEOUT_HEADER]),
                    "busy": busy[0],
                    "in_flight": summary.in_flight,
                    "queued": getattr(summary, "queued", None),  # (the collector before queue accounting had none)
                    "tasks_read": tasks.read,
                }
            )
        await asyncio.sleep(RUN_S)
        with lock:
            busy[0] -= 1
        return {"reward": 1.0}

    return Litestar([run])


def collect(
    tmp_path: Path, n: int, parallel: int, timeout_s: float, connections: int = 1, read_s: float = 0.0
) -> tuple[CollectSummary, list[dict], list[dict], list[dict[str, Any]]]:
    tasks = CountedTasks(n, read_s)
    summary = CollectSummary(total=n)
    seen: list[dict[str, Any]] = []
    options = CollectOptions(
        tmp_path / "out.jsonl", tmp_path / "failures.jsonl", "agent", parallel=parallel, rollout_timeout_s=timeout_s
    )
    # One connection to the agent (by default): the rollouts of the window send one at a time.
    config = ClientConfig(max_attempts=1, timeout_s=timeout_s, deadline_s=timeout_s, pool_limit_per_host=connections)

    async def go(url: str) -> None:
        async with ServerClient(urls={"agent": url}, config=config) as client:
            await collect_rollouts(client, tasks, [(t, 0) for t in range(n)], options, summary)

    with ServerThread(slow_agent(seen, summary, tasks)) as agent:
        run_async(go(agent.url))
    rows = [json.loads(line) for line in options.output.read_text().splitlines()]
    failures = [json.loads(line) for line in options.failures.read_text().splitlines()]
    return summary, rows, failures, seen


def test_a_rollout_that_waited_longer_than_its_deadline_but_ran_quickly_is_not_failed(tmp_path):
    """5 rollouts in flight, one connection, 0.3 s each, a deadline of 1 s: the last waits about
    1.2 s for its turn, longer than its deadline, then runs in 0.3 s. The deadline counts from its
    first request, so every rollout is scored, and each /run is given (nearly) the whole second."""
    summary, rows, failures, seen = collect(tmp_path, n=5, parallel=5, timeout_s=1.0)
    assert failures == [] and summary.failed == 0
    assert sorted(row["task_index"] for row in rows) == [0, 1, 2, 3, 4]
    assert max(s["busy"] for s in seen) == 1  # never more requests at once than connections
    assert all(s["limit"] > 0.5 for s in seen), seen  # the wait was not taken from any rollout's deadline
    waited = sorted(row.get("queue_s", 0.0) for row in rows)
    assert waited[-1] > 1.0, waited  # one waited longer than the deadline, and was scored
    assert all(row["latency_s"] < waited[-1] for row in rows)  # the latency leaves the wait out
    # The live view and the profile report the wait.
    assert summary.queue.count == 5 and (summary.queue.max or 0) > 1.0
    assert "queued 0, waited p50" in describe_progress(progress_event(summary, "done"))
    assert build_profile(rows)["overall"]["fields"]["queue_s"]["max"] > 1.0


def test_waiting_rollouts_hold_their_pair_not_their_task(tmp_path):
    """50 in flight over one connection: when the first /run arrives, 49 wait their turn and only
    the running rollout's task has been read."""
    summary, rows, failures, seen = collect(tmp_path, n=6, parallel=50, timeout_s=30.0)
    assert len(rows) == 6 and failures == []
    first = seen[0]
    assert (first["in_flight"], first["queued"], first["tasks_read"]) == (6, 5, 1), first
    assert [s["tasks_read"] for s in seen] == [1, 2, 3, 4, 5, 6]  # each read when its turn came
    assert (summary.in_flight, summary.queued) == (0, 0)


def test_a_rollout_that_did_not_wait_records_no_wait(tmp_path):
    """As many in flight as connections: no rollout waits, so no row has queue_s, however long its
    task takes to read (20 ms here: reading is the rollout's own work, not a wait)."""
    summary, rows, failures, _ = collect(tmp_path, n=4, parallel=2, timeout_s=30.0, connections=2, read_s=0.02)
    assert len(rows) == 4 and failures == []
    assert [row for row in rows if "queue_s" in row] == []
    assert summary.queue.count == 4 and (summary.queue.max or 0) < 0.001
    assert "queued" not in describe_progress(progress_event(summary, "done"))
