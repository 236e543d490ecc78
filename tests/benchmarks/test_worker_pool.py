from __future__ import annotations


def test_worker_pool_tiny(run_benchmark):
    pool = run_benchmark("worker_pool").results["worker_pool"]
    assert all(
        isinstance(pool[key], float)
        for key in ("async_call_ms", "blocking_call_ms", "kill_and_replace_ms", "math_verify_call_ms")
    )
