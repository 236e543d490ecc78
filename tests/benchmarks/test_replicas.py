from __future__ import annotations


def test_replicas_tiny(run_benchmark):
    """Two local replica processes (no Ray) and the routing microbenchmark."""
    run = run_benchmark("replicas")
    replicas = run.results["replicas"]
    assert replicas["ray"] is False
    assert [row["replicas"] for row in replicas["levels"]] == [2]
    for row in replicas["levels"]:  # every rollout through the replicated counter written, none failed
        assert row["written"] == row["rollouts"] == 60 and row["errors"] == 0
        assert len(row["session_share"]) == len(row["replica_cpu_s"]) == row["replicas"]
    assert set(replicas["routing"]) == {"1", "2", "4", "16"}
    for n, row in replicas["routing"].items():
        assert isinstance(row["route_us"], float) and isinstance(row["pct_of_round_trip"], float)
        # Fresh rollout keys reached every replica: none left idle, none given everything.
        assert 0 < row["min_share_of_even"] <= 1 <= row["max_share_of_even"] < max(int(n), 1.5)
    assert "## Throughput with replicas" in run.markdown
