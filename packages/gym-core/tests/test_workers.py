"""WorkerPool: results, typed errors, kills, replacement, and no process left behind.

The functions run in workers come from the standard library: they are importable by name in the
worker processes (this test module, imported by pytest in importlib mode, is not). No test asserts
how long something took; each asserts what happened.
"""

from __future__ import annotations

import asyncio
import collections
import gc
import itertools
import operator
import os
import pathlib
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from gym_core.errors import GymError
from gym_core.workers import (
    WorkerCrashed,
    WorkerError,
    WorkerMemoryError,
    WorkerPool,
    WorkerPoolClosed,
    WorkerTaskError,
    WorkerTimeout,
)

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="checks processes through /proc")

# A loop in C that never ends, and an allocation that grows until memory runs out (both picklable).
LOOP_FOREVER = (collections.deque, itertools.count(), 0)
GROW_FOREVER = (list, itertools.count())


def alive(pid: int) -> bool:
    """Whether ``pid`` is a process that has not exited (a zombie counts as exited)."""
    try:
        stat = pathlib.Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def descendants(pid: int) -> set[int]:
    """Every live process below ``pid``."""
    parents: dict[int, int] = {}
    for entry in pathlib.Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            fields = stat.rsplit(")", 1)[1].split()
            if fields[0] != "Z":
                parents[int(entry.name)] = int(fields[1])
    found: set[int] = set()
    frontier = {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def wait_until_gone(pids: set[int], timeout_s: float = 20.0) -> set[int]:
    """Poll until none of ``pids`` is alive (or the bound passes); returns those still alive."""
    deadline = time.monotonic() + timeout_s
    while (left := {p for p in pids if alive(p)}) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


@pytest.fixture(scope="module")
def pool():
    with WorkerPool(2, time_limit_s=10.0, memory_limit_mb=1024) as p:
        yield p


# ---------------------------------------------------------------- results and errors


async def test_result_is_returned(pool):
    assert await pool.run(operator.add, 2, 3) == 5
    assert await pool.run(sorted, [3, 1, 2]) == [1, 2, 3]
    assert pool.run_blocking(operator.mul, 6, 7) == 42


async def test_runs_in_another_process(pool):
    assert await pool.run(os.getpid) != os.getpid()


async def test_warm_workers_are_reused(pool):
    await pool.start()
    pids = set(pool.pids)
    assert len(pids) == 2
    # Sequential calls do not fork a worker each: they land on the workers already running.
    seen = {await pool.run(os.getpid) for _ in range(20)}
    assert seen <= pids
    assert set(pool.pids) == pids


async def test_exception_in_fn_is_a_typed_error_with_its_message(pool):
    with pytest.raises(WorkerTaskError) as info:
        await pool.run(int, "not a number")
    error = info.value
    assert isinstance(error, WorkerError) and isinstance(error, GymError)
    assert error.exc_type == "ValueError"
    assert "invalid literal for int()" in error.detail and "'not a number'" in error.detail
    assert "ValueError" in str(error) and "not a number" in str(error)
    assert "Traceback" in error.traceback
    # A function that raises does not cost its worker.
    assert await pool.run(operator.add, 1, 1) == 2


async def test_unpicklable_function_is_refused_in_the_caller(pool):
    with pytest.raises(TypeError, match="module-level function"):
        await pool.run(lambda: 1)

    def local() -> int:
        return 1

    with pytest.raises(TypeError, match="module-level function"):
        pool.run_blocking(local)


async def test_unpicklable_result_is_a_task_error(pool):
    with pytest.raises(WorkerTaskError, match="cannot be pickled"):
        await pool.run(threading.Lock)


# ---------------------------------------------------------------- time limit


async def test_infinite_loop_is_killed_as_timeout_and_the_pool_keeps_serving():
    async with WorkerPool(1, time_limit_s=0.5, memory_limit_mb=None) as pool:
        before = await pool.run(os.getpid)
        with pytest.raises(WorkerTimeout) as info:
            await pool.run(*LOOP_FOREVER)
        assert info.value.time_limit_s == 0.5
        assert "time limit" in str(info.value)
        assert wait_until_gone({before}) == set(), "the looping worker was not killed"
        # A fresh worker took its place.
        after = await pool.run(os.getpid)
        assert after != before
        assert await pool.run(operator.add, 2, 2) == 4


async def test_a_call_can_ask_for_its_own_time_limit(pool):
    with pytest.raises(WorkerTimeout) as info:
        await pool.run(*LOOP_FOREVER, time_limit_s=0.3)
    assert info.value.time_limit_s == 0.3
    assert await pool.run(operator.add, 1, 2) == 3


def test_blocking_calls_are_killed_too(pool):
    with pytest.raises(WorkerTimeout):
        pool.run_blocking(*LOOP_FOREVER, time_limit_s=0.3)
    assert pool.run_blocking(operator.add, 1, 2) == 3


# ---------------------------------------------------------------- memory limit


@pytest.mark.parametrize("task", [(bytearray, 2 * 1024**3), GROW_FOREVER], ids=["one-allocation", "growing"])
async def test_allocation_over_the_limit_is_a_memory_error_and_the_worker_is_replaced(task):
    async with WorkerPool(1, time_limit_s=60.0, memory_limit_mb=256) as pool:
        before = await pool.run(os.getpid)
        with pytest.raises(WorkerMemoryError) as info:
            await pool.run(*task)
        assert info.value.memory_limit_mb == 256
        assert "256 MB" in str(info.value)
        assert wait_until_gone({before}) == set(), "the worker that ran out of memory was not replaced"
        assert await pool.run(os.getpid) != before
        assert await pool.run(len, bytes(1024 * 1024)) == 1024 * 1024


# ---------------------------------------------------------------- crashes


async def test_worker_killed_mid_task_is_reported_as_crashed(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    async with WorkerPool(1, time_limit_s=60.0, memory_limit_mb=None) as pool:
        worker = await pool.run(os.getpid)
        # The worker blocks reading the FIFO; opening it for writing succeeds once it is there.
        call = asyncio.ensure_future(pool.run(pathlib.Path.read_bytes, fifo))
        writer = None
        deadline = time.monotonic() + 30
        while writer is None and time.monotonic() < deadline:
            try:
                writer = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
            except OSError:
                await asyncio.sleep(0.01)
        assert writer is not None, "the task never started in the worker"
        try:
            os.kill(worker, signal.SIGKILL)
            with pytest.raises(WorkerCrashed) as info:
                await call
        finally:
            os.close(writer)
        assert "SIGKILL" in str(info.value)
        assert await pool.run(operator.add, 1, 1) == 2


async def test_worker_exiting_during_a_task_is_crashed(pool):
    with pytest.raises(WorkerCrashed, match="exited with status 3"):
        await pool.run(os._exit, 3)
    with pytest.raises(WorkerCrashed, match="SIGABRT"):
        await pool.run(os.abort)
    assert await pool.run(operator.add, 1, 1) == 2


async def test_worker_killed_while_idle_is_replaced_before_the_next_call():
    async with WorkerPool(1, time_limit_s=10.0, memory_limit_mb=None) as pool:
        worker = await pool.run(os.getpid)
        os.kill(worker, signal.SIGKILL)
        assert wait_until_gone({worker}) == set()
        # The task never reached the dead worker, so it runs on a fresh one instead of failing.
        assert await pool.run(os.getpid) != worker


# ---------------------------------------------------------------- concurrency


async def test_many_concurrent_calls_on_a_pool_of_two_all_complete():
    async with WorkerPool(2, time_limit_s=30.0, memory_limit_mb=None) as pool:
        results = await asyncio.gather(*(pool.run(operator.mul, i, i) for i in range(50)))
        assert results == [i * i for i in range(50)]
        # Never more than two worker processes, however many callers.
        pids = await asyncio.gather(*(pool.run(os.getpid) for _ in range(20)))
        assert len(set(pids)) <= 2
        assert len(pool.pids) <= 2


def test_calls_from_many_threads_all_complete():
    with WorkerPool(2, time_limit_s=30.0, memory_limit_mb=None) as pool:
        results: list[int] = []
        lock = threading.Lock()

        def work(i: int) -> None:
            value = pool.run_blocking(operator.add, i, 1)
            with lock:
                results.append(value)

        threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert sorted(results) == list(range(1, 9))


async def test_a_timeout_does_not_disturb_other_calls():
    async with WorkerPool(2, time_limit_s=0.5, memory_limit_mb=None) as pool:
        outcomes = await asyncio.gather(
            pool.run(*LOOP_FOREVER), *(pool.run(operator.add, i, i) for i in range(10)), return_exceptions=True
        )
        assert isinstance(outcomes[0], WorkerTimeout)
        assert outcomes[1:] == [i + i for i in range(10)]


# ---------------------------------------------------------------- start-up errors


async def test_preload_failure_is_a_worker_error_naming_the_module():
    async with WorkerPool(1, time_limit_s=5.0, memory_limit_mb=None, preload=["no_such_module_for_gym"]) as pool:
        with pytest.raises(WorkerError, match="no_such_module_for_gym"):
            await pool.run(operator.add, 1, 1)


def test_invalid_limits_are_refused():
    with pytest.raises(ValueError, match="time_limit_s"):
        WorkerPool(1, time_limit_s=0, memory_limit_mb=None)
    with pytest.raises(ValueError, match="memory_limit_mb"):
        WorkerPool(1, time_limit_s=1, memory_limit_mb=0)
    with pytest.raises(ValueError, match="size"):
        WorkerPool(0, time_limit_s=1, memory_limit_mb=None)
    with pytest.raises(TypeError, match="module-level function"):
        WorkerPool(1, time_limit_s=1, memory_limit_mb=None, initializer=lambda: None)


# ---------------------------------------------------------------- shutdown


async def test_close_leaves_no_process_behind():
    others = descendants(os.getpid())  # e.g. the module's shared pool
    pool = WorkerPool(2, time_limit_s=30.0, memory_limit_mb=None)
    await pool.start()
    busy = asyncio.ensure_future(pool.run(*LOOP_FOREVER))
    processes = descendants(os.getpid()) - others
    assert set(pool.pids) <= processes and len(pool.pids) == 2
    assert len(processes) == 3  # the zygote and its two workers
    await asyncio.sleep(0.1)  # let the loop reach its worker (either way the call must end)
    await pool.aclose()
    assert {p for p in processes if alive(p)} == set()
    with pytest.raises(WorkerPoolClosed):
        await busy
    with pytest.raises(WorkerPoolClosed):
        await pool.run(operator.add, 1, 1)
    with pytest.raises(WorkerPoolClosed):
        pool.run_blocking(operator.add, 1, 1)
    pool.close()  # idempotent


def test_garbage_collected_pool_leaves_no_process_behind():
    others = descendants(os.getpid())
    pool = WorkerPool(1, time_limit_s=10.0, memory_limit_mb=None)
    pool.start_blocking()
    processes = descendants(os.getpid()) - others
    assert set(pool.pids) <= processes
    del pool
    gc.collect()
    assert wait_until_gone(processes) == set()


def _run_script(body: str) -> subprocess.Popen[str]:
    script = textwrap.dedent(
        """
        import collections, itertools, sys, threading, time
        from gym_core.workers import WorkerPool
        pool = WorkerPool(2, time_limit_s=600, memory_limit_mb=None)
        pool.start_blocking()
        """
    ) + textwrap.dedent(body)
    return subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def test_workers_do_not_outlive_a_killed_parent():
    proc = _run_script(
        """
        threading.Thread(target=pool.run_blocking, args=(collections.deque, itertools.count(), 0), daemon=True).start()
        print("ready", flush=True)
        time.sleep(600)
        """
    )
    try:
        assert proc.stdout.readline().strip() == "ready"
        processes = descendants(proc.pid)
        assert len(processes) >= 3  # the zygote and two workers, one of them busy
        proc.kill()
        proc.wait(30)
        assert wait_until_gone(processes) == set()
    finally:
        proc.kill()
        proc.wait(30)


def test_workers_end_with_the_interpreter():
    # The script exits without closing its pool.
    proc = _run_script(
        """
        print("ready", flush=True)
        sys.stdin.readline()
        """
    )
    assert proc.stdout.readline().strip() == "ready"
    processes = descendants(proc.pid)
    assert len(processes) >= 3
    proc.stdin.write("exit\n")
    proc.stdin.flush()
    assert proc.wait(60) == 0
    assert wait_until_gone(processes) == set()


def test_importing_the_module_is_cheap():
    code = "import sys, gym_core.workers; print(' '.join(sorted(sys.modules)))"
    loaded = set(
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    )
    heavy = {"asyncio", "litestar", "aiohttp", "omegaconf", "msgspec", "subprocess", "concurrent.futures"}
    assert loaded & heavy == set()
