"""StreamDataset: rollouts pulled from a growing `gym collect` file or a callback, bounded staleness."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from gym_train.stream import FileTail, RolloutQueue, StreamDataset, StreamTimeoutError

WAIT_S = 30  # a bound for waits that succeed; never reached unless the stream is broken


def row(task: int, rollout: int = 0, version: int | None = None, reward: float = 1.0) -> dict:
    """A row as `gym collect` writes it (a task's fields, policy_version among them, copied in)."""
    data = {
        "task_index": task,
        "rollout_index": rollout,
        "agent": "simple_agent",
        "reward": reward,
        "responses_create_params": {"input": f"task {task}"},
        "response": {"output": []},
    }
    if version is not None:
        data["policy_version"] = version
    return data


def append(path: Path, *rows: dict) -> None:
    # One write() per row, as the collector does.
    with path.open("ab", buffering=0) as out:
        for r in rows:
            out.write(json.dumps(r).encode() + b"\n")


def keys(rollouts) -> list[tuple[int, int]]:
    return [(r.row["task_index"], r.row["rollout_index"]) for r in rollouts]


def test_rows_appended_while_waiting_are_pulled_as_they_come(tmp_path):
    path = tmp_path / "rollouts.jsonl"  # does not exist yet: the collector has not started
    stream = StreamDataset(path, max_staleness=1)
    writer = threading.Thread(target=lambda: [append(path, row(i, 0, 0)) for i in range(5)])
    writer.start()
    first = stream.get(3, timeout_s=WAIT_S)
    writer.join()
    rest = stream.get(2, timeout_s=WAIT_S)
    assert keys(first + rest) == [(i, 0) for i in range(5)]
    assert all(r.policy_version == 0 and r.weight == 1.0 for r in first + rest)
    assert (stream.counts.received, stream.counts.accepted) == (5, 5)


def test_a_partial_last_line_waits_for_its_end(tmp_path):
    path = tmp_path / "rollouts.jsonl"
    line = json.dumps(row(7, 1, 0)).encode() + b"\n"
    path.write_bytes(line[:20])
    stream = StreamDataset(path)
    with pytest.raises(StreamTimeoutError, match="fewer than 1 rollouts"):
        stream.get(1, timeout_s=0.2)
    with path.open("ab") as out:
        out.write(line[20:])
    assert keys(stream.get(1, timeout_s=WAIT_S)) == [(7, 1)]
    assert stream.counts.malformed == 0


def test_a_file_cut_back_by_a_resuming_collector_is_followed(tmp_path):
    """`gym collect` resuming after a kill cuts off the partial last line, then appends again."""
    path = tmp_path / "rollouts.jsonl"
    append(path, row(0))
    whole = path.read_bytes()
    with path.open("ab") as out:
        out.write(b'{"task_index": 1, "rollo')  # the kill
    stream = StreamDataset(path)
    assert keys(stream.get(1, timeout_s=WAIT_S)) == [(0, 0)]
    path.write_bytes(whole)  # the resume's repair
    append(path, row(1), row(2))
    assert keys(stream.get(2, timeout_s=WAIT_S)) == [(1, 0), (2, 0)]
    assert stream.counts.malformed == 0


def test_malformed_rows_are_skipped_and_counted_with_their_line(tmp_path):
    path = tmp_path / "rollouts.jsonl"
    append(path, row(0))
    with path.open("ab") as out:
        out.write(b"not json\n[1, 2]\n\n")
    append(path, row(1, version="v3"), row(2))  # type: ignore[arg-type]
    stream = StreamDataset(path)
    assert keys(stream.get(2, timeout_s=WAIT_S)) == [(0, 0), (2, 0)]
    assert stream.counts.malformed == 3 and stream.counts.received == 2
    problems = stream.counts.problems
    assert problems[0].startswith(f"{path}:2: ") and f"{path}:3: a row must be a JSON object, not list" in problems[1]
    assert f"{path}:5: policy_version must be an integer, not 'v3'" in problems[2]


def test_rollouts_beyond_the_staleness_bound_are_dropped(tmp_path):
    path = tmp_path / "rollouts.jsonl"
    append(path, *(row(v, 0, v) for v in range(4)))
    stream = StreamDataset(path, max_staleness=1, policy_version=3)
    kept = stream.get(2, timeout_s=WAIT_S)
    assert [(r.policy_version, r.staleness) for r in kept] == [(2, 1), (3, 0)]
    assert (stream.counts.dropped_stale, stream.counts.accepted) == (2, 2)


def test_staleness_is_measured_when_handed_out_and_can_down_weight(tmp_path):
    path = tmp_path / "rollouts.jsonl"
    append(path, *(row(v, 0, v) for v in range(4)))
    stream = StreamDataset(path, max_staleness=1, stale="downweight", decay=0.5, policy_version=0)
    stream.get(0, timeout_s=WAIT_S)  # buffered while the trainer was at version 0
    assert stream.advance(4) == 4  # the trainer stepped on before it took them
    kept = stream.get(4, timeout_s=WAIT_S)
    assert [(r.staleness, r.weight) for r in kept] == [(4, 0.125), (3, 0.25), (2, 0.5), (1, 1.0)]
    assert (stream.counts.downweighted, stream.counts.dropped_stale, stream.counts.accepted) == (3, 0, 4)


def test_unversioned_rows_get_the_version_served_when_they_arrived(tmp_path):
    path = tmp_path / "rollouts.jsonl"
    served = {"version": 5}
    stream = StreamDataset(path, max_staleness=0, policy_version=5, served_version=lambda: served["version"])
    append(path, row(0))
    assert [r.policy_version for r in stream.get(1, timeout_s=WAIT_S)] == [5]
    served["version"] = 6
    stream.advance()
    append(path, row(1), row(2, version=5), row(3))
    assert [(r.row["task_index"], r.policy_version) for r in stream.get(2, timeout_s=WAIT_S)] == [(1, 6), (3, 6)]
    assert stream.counts.unversioned == 3 and stream.counts.dropped_stale == 1


def test_a_wait_that_times_out_keeps_what_it_had(tmp_path):
    path = tmp_path / "rollouts.jsonl"
    append(path, row(0), row(1))
    stream = StreamDataset(path)
    with pytest.raises(StreamTimeoutError) as timed_out:
        stream.get(3, timeout_s=0.2)
    assert timed_out.value.counts.received == 2 and timed_out.value.counts.accepted == 0
    append(path, row(2))
    assert keys(stream.get(3, timeout_s=WAIT_S)) == [(0, 0), (1, 0), (2, 0)]
    assert stream.counts.accepted == 3


def test_a_collector_callback_feeds_the_stream_from_threads():
    rollouts = RolloutQueue()
    stream = StreamDataset(rollouts, max_staleness=0, policy_version=2)
    rollouts.put(row(9, 0, version=1))  # stale: the row's own version
    rollouts.put("not a row")  # type: ignore[arg-type]
    threads = [threading.Thread(target=rollouts, args=(row(i, 0),), kwargs={"policy_version": 2}) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    got = stream.get(4, timeout_s=WAIT_S)
    assert sorted(k for k, _ in keys(got)) == [0, 1, 2, 3]
    assert (stream.counts.received, stream.counts.dropped_stale, stream.counts.malformed) == (5, 1, 1)
    assert "a row must be a dict, not str" in stream.counts.problems[0]


def test_groups_of_one_task_are_handed_out_as_they_complete(tmp_path):
    """GRPO's groups: the `repeats` rollouts of one task, whatever the order they finished in."""
    path = tmp_path / "rollouts.jsonl"
    append(path, row(0, 0, 1), row(1, 0, 1), row(1, 1, 1), row(2, 0, 0), row(0, 1, 1), row(2, 1, 1))
    stream = StreamDataset(path, max_staleness=0, policy_version=1)
    first = stream.groups(1, group_size=2, timeout_s=WAIT_S)
    assert [keys(g) for g in first] == [[(1, 0), (1, 1)]]
    second = stream.groups(2, group_size=2, timeout_s=WAIT_S)
    # Task 0 completed before task 2; task 2's version-0 rollout is beyond the bound and dropped.
    assert [keys(g) for g in second] == [[(0, 0), (0, 1)], [(2, 1)]]
    assert stream.counts.dropped_stale == 1
    append(path, row(3, 0, 1))
    with pytest.raises(StreamTimeoutError, match="1 groups of 2"):
        stream.groups(1, group_size=2, timeout_s=0.2)
    append(path, row(3, 1, 1))
    assert [keys(g) for g in stream.groups(1, group_size=2, timeout_s=WAIT_S)] == [[(3, 0), (3, 1)]]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_staleness": -1}, "max_staleness must be at least 0"),
        ({"stale": "ignore"}, "stale must be 'drop' or 'downweight'"),
        ({"decay": 0}, r"decay must be in \(0, 1\]"),
    ],
)
def test_bad_settings_are_clear_errors(tmp_path, kwargs, message):
    with pytest.raises(ValueError, match=message):
        StreamDataset(FileTail(tmp_path / "x.jsonl"), **kwargs)
