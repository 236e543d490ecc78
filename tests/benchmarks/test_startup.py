from __future__ import annotations


def test_startup_tiny(run_benchmark):
    startup = run_benchmark("startup").results["startup"]
    assert set(startup) >= {"uv_cold_s", "uv_warm_s", "none_s"}
    assert isinstance(startup["none_s"], float)  # measured; the tiny size builds no venvs
