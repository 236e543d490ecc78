"""Streaming collection: the input is checked in one pass and read task by task, what
is done is a bit per (task, rollout) read from the output as a stream, pending pairs are generated as
they are taken, and the collector holds the rollouts in flight, never the run."""

from __future__ import annotations

import asyncio
import json
import os
import random
from pathlib import Path

import pytest
from litestar import Litestar, Request, post

from gym_core.client import ServerClient
from gym_core.options import ClientConfig
from gym_core.serving import ServerThread

from gym_cli.rollouts import (
    CollectOptions,
    CollectSummary,
    DonePairs,
    InputError,
    TaskFile,
    check_agents,
    choose_agent,
    collect_rollouts,
    pending_pairs,
    read_done,
    read_tasks,
    run_async,
    run_parallel,
    scan_tasks,
)


def task(i: int, **extra) -> dict:
    return {"responses_create_params": {"input": f"task {i}"}, "i": i, **extra}


def write_jsonl(path: Path, rows: list, blank_after: int | None = None) -> Path:
    lines = [json.dumps(row) for row in rows]
    if blank_after is not None:
        lines.insert(blank_after + 1, "   ")
    path.write_text("\n".join(lines) + "\n")
    return path


def rollout_row(t, r, **extra) -> str:
    return json.dumps({"task_index": t, "rollout_index": r, "reward": 1.0, "response": {"output": ["x" * 50]}, **extra})


# --- the input: one checking pass, tasks read when needed --------------------------------------------


def test_scan_tasks_reads_each_task_as_read_tasks_does(tmp_path):
    rows = [task(0), task(1, agent_ref={"name": "a"}), task(2, agent="b"), task(3, agent_ref={"name": 7}, agent="c")]
    path = write_jsonl(tmp_path / "tasks.jsonl", rows, blank_after=1)
    with scan_tasks(path) as tasks:
        assert len(tasks) == 4
        assert [tasks[i] for i in (3, 0, 2, 1)] == [rows[3], rows[0], rows[2], rows[1]]  # any order
        assert list(tasks) == rows == read_tasks(path)
        # What choosing and checking the agent need, counted in the same pass.
        assert tasks.agents == {"a", "b", "c"} and tasks.unnamed == 1
        with pytest.raises(IndexError):
            tasks[4]
    with scan_tasks(path, limit=2) as first_two:
        assert list(first_two) == rows[:2] and first_two.agents == {"a"} and first_two.unnamed == 1


def test_agent_choice_and_check_read_the_scan_as_they_read_tasks(tmp_path):
    rows = [task(0), task(1, agent_ref={"name": "agnet"})]
    with scan_tasks(write_jsonl(tmp_path / "tasks.jsonl", rows)) as tasks:
        assert choose_agent(tasks, ["agent"]) == choose_agent(rows, ["agent"]) == "agent"
        for given in (tasks, rows):
            with pytest.raises(InputError, match="1 of 2 tasks name no agent"):
                choose_agent(given, ["x", "y"])
            with pytest.raises(
                InputError, match=r"agent_ref: no server instance named 'agnet' \(did you mean 'agent'\?\)"
            ):
                check_agents(given, None, {"agent": "agent"})


def test_every_malformed_line_is_reported_at_once_with_its_number(tmp_path):
    path = tmp_path / "tasks.jsonl"
    good = json.dumps(task(0))
    path.write_text(
        "\n".join(
            [
                good,
                "{not json",
                json.dumps({"responses_create_params": None}),
                "[1, 2]",
                json.dumps({"responses_create_params": [1]}),
                good,
            ]
        )
        + "\n"
    )
    with pytest.raises(InputError) as caught:
        scan_tasks(path)
    message = str(caught.value)
    assert f"{path}:2: not valid JSON" in message
    assert f"{path}:3: missing 'responses_create_params' object" in message
    assert f"{path}:4: a task must be a JSON object, got list" in message
    assert f"{path}:5: missing 'responses_create_params' object" in message
    assert ":1:" not in message and ":6:" not in message
    (tmp_path / "blank.jsonl").write_text("\n  \n")
    with pytest.raises(InputError, match="no tasks"):
        scan_tasks(tmp_path / "blank.jsonl")


def test_a_task_file_changed_during_the_run_stops_it_rather_than_run_other_tasks(tmp_path):
    path = write_jsonl(tmp_path / "tasks.jsonl", [task(0), task(1)])
    tasks = scan_tasks(path)
    assert tasks[1] == task(1)
    write_jsonl(path, [task(5), task(6), task(7)])  # rewritten under the same name
    with pytest.raises(InputError, match="changed during the collection"):
        tasks[1]
    tasks.close()


# --- what is done: a bit per pair, read from the output as a stream -----------------------------------


@pytest.mark.parametrize("n_tasks, repeats", [(1, 1), (5, 3), (13, 4), (64, 1)])
def test_missing_pairs_are_the_pending_pairs_in_rollout_major_order(n_tasks, repeats):
    rng = random.Random(n_tasks * 100 + repeats)
    done, reference = DonePairs(n_tasks, repeats), set()
    for pair in [(t, r) for t in range(n_tasks) for r in range(repeats) if rng.random() < 0.6]:
        done.add(pair)
        done.add(pair)  # twice: counted once
        reference.add(pair)
    expected = [(t, r) for r in range(repeats) for t in range(n_tasks) if (t, r) not in reference]
    assert list(pending_pairs(n_tasks, repeats, done)) == list(pending_pairs(n_tasks, repeats, reference)) == expected
    assert done.count == len(reference) == n_tasks * repeats - len(expected)
    assert all(
        (pair in done) == (pair in reference)
        for pair in [(t, r) for t in range(-1, n_tasks + 1) for r in range(-1, repeats + 1)]
    )
    for left in [(t, r) for t in range(n_tasks) for r in range(repeats)]:  # all done but one, wherever it is
        almost = DonePairs(n_tasks, repeats)
        for pair in [(t, r) for t in range(n_tasks) for r in range(repeats) if (t, r) != left]:
            almost.add(pair)
        assert list(almost.missing()) == [left]


def test_pairs_outside_the_range_are_kept_for_duplicate_detection():
    done = DonePairs(2, 2)
    done.add((5, 0))
    done.add((0, 9))
    assert (5, 0) in done and (0, 9) in done and (1, 1) not in done
    assert done.count == 0 and len(done) == 2  # outside the collection: not counted as skipped
    assert list(done.missing()) == [(0, 0), (1, 0), (0, 1), (1, 1)]


def test_read_done_cuts_a_torn_line_and_drops_duplicates_in_and_out_of_range(tmp_path):
    out = tmp_path / "out.jsonl"
    lines = [
        rollout_row(0, 0),
        rollout_row(1, 0),
        rollout_row(9, 0, note="outside"),
        rollout_row(1, 0, dup=1),
        "",
        rollout_row(0, 1),
        rollout_row(9, 0, dup=2),
        rollout_row(0, 0, dup=3),
    ]
    out.write_text("\n".join(lines) + "\n" + '{"task_index": 1, "rollout_ind')
    done, duplicates = read_done(out, DonePairs(2, 2))
    assert duplicates == 3
    assert done.count == 3 and list(done.missing()) == [(1, 1)] and (9, 0) in done
    kept = out.read_text()
    assert kept == "\n".join(lines[:3] + ["", lines[5]]) + "\n"  # first rows kept, in order, whole lines
    assert not (tmp_path / "out.jsonl.dedup-tmp").exists()
    # The default container is a set, as it always was (gym reverify resumes with it).
    assert read_done(out) == ({(0, 0), (1, 0), (9, 0), (0, 1)}, 0)


@pytest.mark.parametrize("window", [40, 97, 1 << 20])
def test_read_done_finds_duplicates_across_windows_of_the_mapped_file(tmp_path, monkeypatch, window):
    """Windows smaller than a row, than two rows, and larger than the file: the same pairs, the same
    duplicates dropped, the first rows kept in order."""
    import gym_cli.rollouts

    monkeypatch.setattr(gym_cli.rollouts, "_WINDOW", window)
    rng = random.Random(window)
    lines, first, expected_kept = [], set(), []
    for _ in range(200):
        pair = (rng.randrange(12), rng.randrange(3))
        line = rollout_row(*pair, pad="p" * rng.randrange(150)) if rng.random() < 0.9 else " "
        lines.append(line)
        if line.strip():
            if pair in first:
                continue  # a duplicate: dropped
            first.add(pair)
        expected_kept.append(line)
    out = tmp_path / "out.jsonl"
    out.write_text("\n".join(lines) + "\n")
    done, duplicates = read_done(out, DonePairs(10, 3))
    assert {pair for pair in first if pair in done} == first
    assert done.count == len({p for p in first if p[0] < 10}) and duplicates == sum(
        1 for ln in lines if ln.strip()
    ) - len(first)
    assert out.read_text() == "\n".join(expected_kept) + "\n"


def test_read_done_cuts_a_torn_line_longer_than_its_read_block(tmp_path):
    out = tmp_path / "out.jsonl"
    whole = rollout_row(0, 0) + "\n"
    out.write_text(whole + '{"task_index": 1, "response": "' + "y" * 200_000)
    assert read_done(out, DonePairs(2, 1))[0].count == 1
    assert out.read_text() == whole
    only_torn = tmp_path / "torn.jsonl"
    only_torn.write_text('{"task_index": 0, "roll')
    assert len(read_done(only_torn)[0]) == 0 and only_torn.read_bytes() == b""


def test_read_done_reads_indices_as_it_always_did_and_refuses_other_files(tmp_path):
    out = tmp_path / "out.jsonl"
    out.write_text('{"task_index": 1.0, "rollout_index": "0"}\n{"rollout_index": 1, "task_index": 0, "x": [1]}\n')
    assert read_done(out)[0] == {(1, 0), (0, 1)}
    for bad in ('{"task_index": 1}\n', "[1, 2]\n", "{nope\n", '{"task_index": "one", "rollout_index": 0}\n'):
        out.write_text(bad)
        with pytest.raises(InputError, match="is not a gym rollout row; is this the right --output file"):
            read_done(out)


def test_resuming_an_output_of_a_larger_run_with_limit_collects_nothing_and_keeps_the_file(tmp_path, gym):
    """Every pair of the smaller run is done: no server is needed (the head given answers nothing),
    the rows of the larger run stay, and its duplicate rows are dropped."""
    tasks = write_jsonl(tmp_path / "tasks.jsonl", [task(i) for i in range(5)])
    out = tmp_path / "out.jsonl"
    rows = [rollout_row(t, r) for r in range(2) for t in range(5)]
    out.write_text("\n".join(rows + [rows[7]]) + "\n")
    result = gym(
        "collect",
        "--input",
        str(tasks),
        "--output",
        str(out),
        "--limit",
        "3",
        "--repeats",
        "2",
        "--agent",
        "agent",
        "--head",
        "http://127.0.0.1:9",
        "--no-profile",
        "--progress",
        "plain",
    )
    assert result.exit_code == 0, result.output
    assert "dropped 1 duplicate rows" in result.output
    assert "resuming: 6 of 6 rollouts already in" in result.output and "0 rollouts collected" in result.output
    assert out.read_text() == "\n".join(rows) + "\n"


# --- the collector holds the rollouts in flight, not the run -------------------------------------------


class CountingTasks:
    """A :class:`TaskFile` seen through a counter of the tasks read so far."""

    def __init__(self, tasks: TaskFile):
        self.tasks = tasks
        self.reads = 0

    def __len__(self) -> int:
        return len(self.tasks)

    def __getitem__(self, index: int) -> dict:
        self.reads += 1
        return self.tasks[index]


def test_tasks_and_pairs_are_taken_as_the_window_moves(tmp_path):
    """A recording agent sees, at each /run, how many tasks were read and pairs taken: never more than
    the rollouts started plus the window (``parallel``), so neither is loaded up front."""
    n_tasks, repeats, parallel = 40, 3, 4
    path = write_jsonl(tmp_path / "tasks.jsonl", [task(i) for i in range(n_tasks)])
    tasks = CountingTasks(scan_tasks(path))
    taken = 0

    def pairs():
        nonlocal taken
        for pair in pending_pairs(n_tasks, repeats, DonePairs(n_tasks, repeats)):
            taken += 1
            yield pair

    seen: list[tuple[int, int, int]] = []  # (requests so far, tasks read, pairs taken)

    @post("/run")
    async def run(request: Request) -> dict:
        body = await request.json()
        seen.append((len(seen) + 1, tasks.reads, taken))
        await asyncio.sleep(0.001)
        return {"reward": float(body["i"] % 2)}

    options = CollectOptions(tmp_path / "out.jsonl", tmp_path / "failures.jsonl", "agent", repeats, parallel)

    async def collect(url: str) -> CollectSummary:
        async with ServerClient(urls={"agent": url}, config=ClientConfig(max_attempts=1)) as client:
            return await collect_rollouts(client, tasks, pairs(), options, CollectSummary(total=n_tasks * repeats))

    with ServerThread(Litestar([run])) as agent:
        summary = run_async(collect(agent.url))
    tasks.tasks.close()
    assert summary.done == n_tasks * repeats and summary.in_flight == 0
    assert all(read <= started + parallel and taken_ <= started + parallel for started, read, taken_ in seen), seen
    written = [json.loads(line) for line in options.output.read_text().splitlines()]
    assert sorted((r["task_index"], r["rollout_index"]) for r in written) == [
        (t, r) for t in range(n_tasks) for r in range(repeats)
    ]
    assert all(row["i"] == row["task_index"] for row in written)  # each row carries its own task


def test_run_parallel_keeps_the_window_takes_in_order_and_stops_on_an_error():
    running, most, order = 0, 0, []

    async def handle(item: int) -> None:
        nonlocal running, most
        running += 1
        most = max(most, running)
        order.append(item)
        await asyncio.sleep(0)
        running -= 1
        if item == 7:
            raise ValueError("item 7")

    asyncio.run(run_parallel(range(5), 3, handle))
    assert most == 3 and order == [0, 1, 2, 3, 4]
    order.clear()
    with pytest.raises(ValueError, match="item 7"):
        asyncio.run(run_parallel(range(1000), 3, handle))
    assert len(order) < 20  # stopped soon after the failure, not after the 1000


def test_run_parallel_starts_a_large_window_over_several_loop_turns():
    """A window of 2.5 × START_BATCH: every worker runs at once in the end, but no loop turn starts more
    than START_BATCH of them (a turn that sends 100,000 first requests outlasts their connect timeouts)."""
    from gym_cli.rollouts import START_BATCH

    parallel = START_BATCH * 5 // 2
    turn, started_in_turn = 0, []
    all_started = asyncio.Event()

    async def main() -> None:
        async def ticker() -> None:
            nonlocal turn
            while True:
                turn += 1
                await asyncio.sleep(0)

        async def handle(item: int) -> None:
            started_in_turn.append(turn)
            if len(started_in_turn) == parallel:
                all_started.set()
            await all_started.wait()  # all of them in flight together

        tick = asyncio.create_task(ticker())
        await run_parallel(range(parallel), parallel, handle)
        tick.cancel()

    asyncio.run(main())
    per_turn = {t: started_in_turn.count(t) for t in set(started_in_turn)}
    assert len(started_in_turn) == parallel and len(per_turn) >= 3
    assert max(per_turn.values()) <= START_BATCH, per_turn

    started = []

    async def fail_first(item: int) -> None:
        started.append(item)
        await asyncio.sleep(0)
        raise ValueError("refused")

    with pytest.raises(ValueError, match="refused"):  # a failure stops the start-up too
        asyncio.run(run_parallel(range(10 * START_BATCH), 10 * START_BATCH, fail_first))
    assert len(started) <= 2 * START_BATCH


def test_collect_over_a_generated_input_resumes_where_it_stopped(tmp_path):
    """Half the pairs done by an earlier run (rows in the output): a second run collects exactly the
    other half, each once, through a recording agent."""
    n_tasks, repeats = 30, 2
    path = write_jsonl(tmp_path / "tasks.jsonl", [task(i) for i in range(n_tasks)])
    out = tmp_path / "out.jsonl"
    earlier = {(t, r) for t in range(n_tasks) for r in range(repeats) if (t * 7 + r) % 2}
    out.write_text("".join(rollout_row(t, r) + "\n" for t, r in sorted(earlier)))
    asked: list[int] = []

    @post("/run")
    async def run(request: Request) -> dict:
        asked.append((await request.json())["i"])
        return {"reward": 1.0}

    with scan_tasks(path) as tasks:
        done, _ = read_done(out, DonePairs(n_tasks, repeats))
        options = CollectOptions(out, tmp_path / "failures.jsonl", "agent", repeats, parallel=3)

        async def collect(url: str) -> CollectSummary:
            async with ServerClient(urls={"agent": url}, config=ClientConfig(max_attempts=1)) as client:
                return await collect_rollouts(
                    client, tasks, pending_pairs(n_tasks, repeats, done), options, CollectSummary()
                )

        with ServerThread(Litestar([run])) as agent:
            summary = run_async(collect(agent.url))
    assert summary.done == n_tasks * repeats - len(earlier) == len(asked)
    pairs = [(r["task_index"], r["rollout_index"]) for r in map(json.loads, out.read_text().splitlines())]
    assert len(pairs) == len(set(pairs)) == n_tasks * repeats
    assert os.path.getsize(tmp_path / "failures.jsonl") == 0
