from __future__ import annotations


def test_scale_tiny(run_benchmark):
    run = run_benchmark("scale")
    scale = run.results["scale"]
    assert scale["completed"] == scale["written"] == scale["in_flight"] and scale["errors"] == 0
    assert scale["peak_in_flight"] == scale["in_flight"]  # all started together (the model waits 1 s per call)
    assert 0 < scale["peak_counter_sessions"] <= scale["connections_to_agent"] <= scale["in_flight"]
    # Every session the rollouts opened was closed: the store is back where it started.
    assert scale["sessions_before"] == scale["sessions_after"] == {"agent": 0, "counter": 0, "policy_model": 0}
    assert set(scale["peak_rss_mb"]) == {"agent", "counter", "policy_model", "collector"}
    assert all(mb > 0 for mb in scale["peak_rss_mb"].values())
    assert "## Scale" in run.markdown
