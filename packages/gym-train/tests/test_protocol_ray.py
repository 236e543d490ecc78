"""The master/model-worker protocol with the workers in Ray actors (``Master(backend="ray")``) on a
local Ray started once for this module: the protocol's own tests again, then what is Ray's own
(an actor that dies or is killed, a deadline, placement options, shutdown)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # the actors get the master's sys.path: protocol_models, protocol_flaky
os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")  # read when Ray is imported

import ray  # noqa: E402
import test_protocol as shared  # noqa: E402

from gym_core.errors import GymError  # noqa: E402

from gym_train.protocol import (  # noqa: E402
    Master,
    ProtocolError,
    ReplyTimeoutError,
    WorkerCrashedError,
    WorkerRequestError,
)

FLAKY = "protocol_flaky:Flaky"


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    """One local Ray for the module, which the masters use (they find it connected)."""
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def master():
    """Two workers in actors, each with its shard of the data, initialized (as test_protocol's)."""
    with Master(shared.TINY, n_workers=2, config={"seed": 0}, reply_timeout_s=60, backend="ray") as master:
        master.call("initialize", [{"lr": 0.5}, {"lr": 0.5}])
        yield master


@pytest.fixture
def flaky():
    """A fresh worker in an actor of its own, for the tests that break it."""
    with Master(FLAKY, reply_timeout_s=60, backend="ray") as master:
        yield master.workers[0]


# The protocol's tests, run here against the actors: same requests, same replies, same errors.
test_fetch_keeps_the_data_on_the_workers_and_returns_metadata = (
    shared.test_fetch_keeps_the_data_on_the_workers_and_returns_metadata
)
test_a_blocking_request_waits_for_flush = shared.test_a_blocking_request_waits_for_flush
test_queued_requests_run_in_arrival_order_at_flush = shared.test_queued_requests_run_in_arrival_order_at_flush
test_train_steps_lower_the_loss_on_every_worker = shared.test_train_steps_lower_the_loss_on_every_worker
test_hooks_run_in_order_around_the_compute = shared.test_hooks_run_in_order_around_the_compute
test_a_bad_request_is_refused_at_once = shared.test_a_bad_request_is_refused_at_once
test_a_failing_compute_is_a_typed_error_and_the_worker_goes_on = (
    shared.test_a_failing_compute_is_a_typed_error_and_the_worker_goes_on
)
test_clear_data_cache_drops_the_stored_samples = shared.test_clear_data_cache_drops_the_stored_samples


def _actor_is_gone(actor) -> bool:
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(actor.pid.remote(), timeout=60)
    return True


def test_the_workers_run_in_actors_not_in_this_process(master):
    pids = [ray.get(w.actor.pid.remote(), timeout=60) for w in master.workers]
    assert len(set(pids)) == 2 and os.getpid() not in pids
    assert all(w.alive for w in master.workers)


def test_an_actor_that_dies_mid_request_is_an_error_at_the_master(flaky):
    worker = flaky
    pending = worker.send("inference", {"batch": [[1, 2]], "crash": True})  # its process exits (os._exit)
    # Unlike a pipe's, what the actor had sent but not yet handed over dies with it: the flush's
    # acknowledgement may be lost too.
    with pytest.raises(
        WorkerCrashedError,
        match=r"model worker 0 died \(its Ray actor died: \w+\) while the master waited "
        r"for the (acknowledgement of|reply to) flush request",
    ):
        worker.flush()
    with pytest.raises(WorkerCrashedError):  # and every later wait or request says so at once
        pending.result()
    with pytest.raises(WorkerCrashedError):
        worker.send("spec")
    assert not worker.alive


def test_an_actor_killed_during_a_compute_is_an_error_at_the_master(flaky):
    worker = flaky
    pending = worker.send("inference", {"batch": [[1, 2]], "sleep_s": 60})
    flush = worker.send("flush")  # acknowledged: the inference runs now
    ray.kill(worker.actor)
    with pytest.raises(WorkerCrashedError, match="its Ray actor died"):
        flush.result()
    with pytest.raises(WorkerCrashedError):
        pending.result()


def test_a_reply_past_its_deadline_is_a_timeout_and_the_actor_is_killed(flaky):
    worker = flaky
    pending = worker.send("inference", {"batch": [[1, 2]], "sleep_s": 60})
    with pytest.raises(ReplyTimeoutError, match="sent no reply to the reply to flush request"):
        worker.flush(timeout_s=0.5)
    assert _actor_is_gone(worker.actor)
    with pytest.raises(ProtocolError):
        pending.result()


def test_close_stops_every_actor():
    master = Master(FLAKY, n_workers=2, backend="ray").start()
    assert [w.call("spec") for w in master.workers] == [{"worker": 0}, {"worker": 1}]
    master.close()
    assert all(_actor_is_gone(w.actor) for w in master.workers)
    with pytest.raises(ProtocolError, match="model worker 0 was stopped"):
        master.workers[0].send("spec")
    assert ray.is_initialized()  # a Ray this master found connected is not its to stop


def test_an_interface_that_cannot_be_built_fails_the_start():
    with pytest.raises(
        WorkerRequestError, match="cannot build model interface 'protocol_flaky:Unbuildable': no such checkpoint"
    ):
        Master("protocol_flaky:Unbuildable", start_timeout_s=60, backend="ray").start()


def test_ray_resources_place_the_actor():
    # No node has this resource: the actor is never placed, the start times out and the actor is killed.
    master = Master(
        FLAKY, start_timeout_s=2, backend="ray", ray_resources={"num_cpus": 1, "resources": {"gym_test_slot": 1}}
    )
    with pytest.raises(ReplyTimeoutError, match="model worker 0 sent no reply to the worker to start"):
        master.start()
    assert _actor_is_gone(master.workers[0].actor)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"backend": "threads"}, "backend must be one of 'process', 'ray', not 'threads'"),
        ({"ray_resources": {"num_gpus": 1}}, "ray_address and ray_resources are for backend='ray'"),
        ({"backend": "ray", "ray_resources": {"num_gpu": 1}}, "ray_resources: unknown option 'num_gpu'"),
    ],
)
def test_bad_backend_options_are_refused(options, message):
    with pytest.raises(ValueError, match=message):
        Master(FLAKY, **options)


def test_the_ray_backend_without_ray_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # as if Ray were not installed
    with pytest.raises(GymError, match=r"needs Ray, which is not installed: pip install 'gym-train\[ray\]'"):
        Master(FLAKY, backend="ray")


def test_the_protocol_imports_no_ray_and_a_bad_address_is_a_clear_error():
    code = (
        "import sys; from gym_train.protocol import Master; assert 'ray' not in sys.modules, 'ray imported';"
        "Master('protocol_flaky:Flaky', backend='ray').start()"
    )
    env = {**os.environ, "RAY_ADDRESS": "127.0.0.1:9"}  # nothing listens on the discard port
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "no Ray cluster answers at 127.0.0.1:9" in proc.stderr, proc.stderr[-2000:]
