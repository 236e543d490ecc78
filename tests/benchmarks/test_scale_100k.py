from __future__ import annotations


def test_scale_100k_tiny(run_benchmark):
    run = run_benchmark("scale_100k")
    scale = run.results["scale_100k"]  # gym collect's collector in its own process, a minimal agent on loopback
    after = scale["runs"]["after"]
    assert after["done"] == after["written"] == scale["in_flight"] and after["failed"] == 0
    assert after["peak_in_flight"] == scale["in_flight"]  # all in flight at once ...
    assert after["peak_queued"] == scale["in_flight"] - scale["connections"]  # ... those without a connection waiting
    assert after["peak_rss_mb"] > after["rss_before_mb"] > 0
    assert "rollouts in flight (scale_100k)" in run.markdown
