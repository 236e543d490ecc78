from __future__ import annotations


def test_sandbox_tiny(run_benchmark):
    run = run_benchmark("sandbox")
    box = run.results["sandbox"]  # a trivial program, bare and sandboxed, at concurrency 1 and 8
    for c in ("1", "8"):
        # Figures were measured for each way (their values are the benchmark's business, not the test's).
        assert all(set(box[c][way]) == {"per_s", "p50_ms", "p99_ms"} for way in ("bare", "sandbox"))
    assert box["executions"] == 20 and isinstance(box["overhead_ms"], float)
    assert "## Sandbox" in run.markdown
