"""SIGINT and SIGTERM stop the test process: no test or fixture leaves a handler of its own in it (the
root conftest.py puts the session's back after each test's setup, call and teardown)."""

from __future__ import annotations

import os
import signal

import pytest


def swallow(signum, frame) -> None:  # a handler that keeps the process running, as Ray's node does
    pass


def assert_session_handlers(session_signal_handlers) -> None:
    assert set(session_signal_handlers) == {signal.SIGINT, signal.SIGTERM}
    for signum, handler in session_signal_handlers.items():
        assert signal.getsignal(signum) is handler, f"{signum.name}: {signal.getsignal(signum)!r}"


@pytest.fixture(scope="module")
def foreign_handlers():
    signal.signal(signal.SIGTERM, swallow)
    signal.signal(signal.SIGINT, swallow)
    yield  # put back by nothing here


def test_a_fixture_that_installs_handlers_leaves_none_for_the_test(foreign_handlers, session_signal_handlers):
    assert_session_handlers(session_signal_handlers)
    assert signal.getsignal(signal.SIGTERM) is not swallow


@pytest.fixture
def checked_after_the_call(session_signal_handlers):
    yield
    assert_session_handlers(session_signal_handlers)  # its teardown runs after the test's call


def test_handlers_a_test_installs_are_gone_after_it(checked_after_the_call):
    signal.signal(signal.SIGTERM, swallow)
    signal.signal(signal.SIGINT, swallow)
    assert signal.getsignal(signal.SIGTERM) is swallow  # the test runs with them


@pytest.fixture(scope="module")
def local_ray():
    """A one-node Ray cluster of its own, joined by this process, as the Ray tests' fixtures do."""
    os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")  # before Ray is imported: no `uv run` per worker
    import ray

    ray.init(address="local", num_cpus=1, include_dashboard=False, configure_logging=False, log_to_driver=False)
    try:
        yield ray
    finally:
        ray.shutdown()


def test_a_ray_cluster_started_by_a_fixture_leaves_the_session_handlers(local_ray, session_signal_handlers):
    # ray.init installs a SIGTERM handler in the process that joins (it raises SystemExit wherever the
    # signal lands), and ray.shutdown leaves it there.
    assert local_ray.is_initialized()
    assert_session_handlers(session_signal_handlers)
    assert local_ray.get(local_ray.remote(lambda: os.getpid()).remote()) != os.getpid()  # a real Ray worker ran it
