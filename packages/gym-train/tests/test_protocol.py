"""The master/model-worker protocol, with real worker processes running a tiny torch model."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(
    0, str(Path(__file__).parent)
)  # spawned workers inherit it: they import protocol_models, protocol_flaky

from gym_train.protocol import (  # noqa: E402
    HookCall,
    Master,
    ProtocolError,
    ReplyTimeoutError,
    WorkerCrashedError,
    WorkerRequestError,
)

TINY = "protocol_models:TinyLM"


@pytest.fixture(scope="module")
def master():
    """Two workers, each with its shard of the data, initialized."""
    with Master(TINY, n_workers=2, config={"seed": 0}, reply_timeout_s=60) as master:
        master.call("initialize", [{"lr": 0.5}, {"lr": 0.5}])
        yield master


@pytest.fixture
def flaky():
    """A fresh worker of its own, for the tests that break it."""
    with Master("protocol_flaky:Flaky", reply_timeout_s=60) as master:
        yield master.workers[0]


def test_fetch_keeps_the_data_on_the_workers_and_returns_metadata(master):
    shards = master.call("fetch")
    ids = [[m["id"] for m in shard] for shard in shards]
    assert ids == [["s0", "s2", "s4", "s6"], ["s1", "s3", "s5", "s7"]]  # sharded without overlap
    assert all(m["seqlen"] == 6 for shard in shards for m in shard)
    assert master.call("model_config") == [{"vocab_size": 12, "hidden_size": 8}] * 2


def test_a_blocking_request_waits_for_flush(master):
    worker = master.workers[0]
    worker.call("fetch")
    steps = worker.call("spec")["steps"]
    train = worker.send("train_step", pre_hooks=[HookCall("data_transfer", {"ids": ["s0", "s2"]})])
    # Acknowledged, and the non-blocking spec sent after it runs first: the step has not run yet.
    assert worker.call("spec")["steps"] == steps
    assert worker.flush() == 1
    assert train.result()["step"] == steps + 1
    assert worker.call("spec")["steps"] == steps + 1


def test_queued_requests_run_in_arrival_order_at_flush(master):
    worker = master.workers[1]
    worker.call("fetch")
    batch = [HookCall("data_transfer", {"ids": ["s1", "s3"]})]
    pending = [
        worker.send(kind, {"max_new_tokens": 3}, pre_hooks=batch) for kind in ("generate", "inference", "train_step")
    ]
    assert worker.flush() == 3
    seqs = [p.worker.wait(p).seq for p in pending]
    assert seqs == sorted(seqs) and len(set(seqs)) == 3
    generated, log_probs, step = (p.result() for p in pending)
    assert [len(t) for t in generated] == [4, 4]  # first token + 3 new
    assert len(log_probs) == 2 and all(lp <= 0 for row in log_probs for lp in row)
    assert worker.call("spec")["events"][-3:] == ["generate", "inference", "train_step"]
    assert step["loss"] > 0


def test_train_steps_lower_the_loss_on_every_worker(master):
    master.call("fetch")
    transfer = [HookCall("data_transfer", {"ids": ["s0", "s2", "s4", "s6"]})]
    first = master.workers[0].call("train_step", pre_hooks=transfer)["loss"]
    for _ in range(5):
        last = master.workers[0].call("train_step", pre_hooks=transfer)["loss"]
    assert last < first
    # Both workers in one step: send to all, one flush each, results by worker.
    results = master.call(
        "train_step", pre_hooks=[HookCall("data_transfer", {"samples": [[1, 2, 3, 4], [5, 6, 7, 8]]})]
    )
    assert [r["loss"] > 0 for r in results] == [True, True]


def test_hooks_run_in_order_around_the_compute(master, tmp_path):
    worker = master.workers[0]
    worker.call("fetch")
    pending = worker.send(
        "train_step",
        pre_hooks=[HookCall("data_transfer", {"ids": ["s0"], "samples": [[1, 2, 3, 4, 5, 6]]})],
        post_hooks=[HookCall("evaluate"), HookCall("checkpoint", {"directory": str(tmp_path)}), HookCall("offload")],
    )
    worker.flush()
    reply = worker.wait(pending)
    assert worker.call("spec")["events"][-4:] == ["train_step", "evaluate", "checkpoint", "offload"]
    transferred, evaluated, checkpoint, offloaded = reply.hooks
    assert transferred == {"samples": 2}
    # The post-hook evaluates the stepped model: at most the loss measured before the step.
    assert 0 < evaluated["loss"] <= reply.result["loss"]
    assert Path(checkpoint["path"]).is_file() and offloaded["tensors"] == 3
    # Offloaded, then reloaded by the next compute: the same log-probs as the evaluation saw.
    again = worker.call(
        "inference", pre_hooks=[HookCall("data_transfer", {"ids": ["s0"], "samples": [[1, 2, 3, 4, 5, 6]]})]
    )
    mean = -sum(sum(row) for row in again) / sum(len(row) for row in again)
    assert mean == pytest.approx(evaluated["loss"], rel=1e-5)


@pytest.mark.parametrize(
    ("kind", "hooks", "message"),
    [
        ("train_stepp", [], "unknown request kind 'train_stepp'"),
        ("spec", [HookCall("evaluate")], "spec takes no hooks"),
        ("inference", [HookCall("evaluat")], "unknown hook 'evaluat'"),
    ],
)
def test_a_bad_request_is_refused_at_once(master, kind, hooks, message):
    worker = master.workers[0]
    with pytest.raises(WorkerRequestError, match=message) as refused:
        worker.send(kind, post_hooks=hooks)
    assert refused.value.type == "bad_request"
    assert worker.call("model_config")["vocab_size"] == 12  # the worker goes on


def test_a_failing_compute_is_a_typed_error_and_the_worker_goes_on(master):
    worker = master.workers[0]
    with pytest.raises(WorkerRequestError, match="data_transfer: no sample 'nope'") as failed:
        worker.call("inference", pre_hooks=[HookCall("data_transfer", {"ids": ["nope"]})])
    assert failed.value.type == "hook_failed" and failed.value.error == "KeyError"
    with pytest.raises(WorkerRequestError) as failed:
        worker.call("inference", {"batch": [[1, 99]]})  # a token id beyond the vocabulary
    assert failed.value.type == "compute_failed" and "Traceback" in failed.value.remote_traceback
    assert len(worker.call("inference", {"batch": [[1, 2]]})) == 1


def test_clear_data_cache_drops_the_stored_samples(master):
    worker = master.workers[0]
    worker.call("fetch")
    assert worker.call("clear_data_cache")["cleared"] == 4
    with pytest.raises(WorkerRequestError, match="no sample 's0'"):
        worker.call("inference", pre_hooks=[HookCall("data_transfer", {"ids": ["s0"]})])
    worker.call("fetch")


def test_a_worker_crash_is_an_error_at_the_master_not_a_hang(flaky):
    worker = flaky
    pending = worker.send("inference", {"batch": [[1, 2]], "crash": True})
    with pytest.raises(WorkerCrashedError, match=r"model worker 0 died \(exit code 3\)"):
        worker.flush()
    with pytest.raises(WorkerCrashedError):  # and every later wait or request says so at once
        pending.result()
    with pytest.raises(WorkerCrashedError):
        worker.send("spec")


def test_a_reply_past_its_deadline_is_a_timeout_and_the_worker_is_stopped(flaky):
    worker = flaky
    pending = worker.send("inference", {"batch": [[1, 2]], "sleep_s": 60})
    with pytest.raises(ReplyTimeoutError, match="sent no reply to the reply to flush request"):
        worker.flush(timeout_s=0.5)
    assert not worker.process.is_alive()
    with pytest.raises(ProtocolError):
        pending.result()


def test_an_interface_that_cannot_be_built_fails_the_start():
    with pytest.raises(
        WorkerRequestError, match="cannot build model interface 'protocol_flaky:Unbuildable': no such checkpoint"
    ):
        Master("protocol_flaky:Unbuildable", start_timeout_s=60).start()
    with pytest.raises(WorkerRequestError, match="not a 'module:attr' path"):
        Master("protocol_models", start_timeout_s=60).start()
