from __future__ import annotations


def test_orchestration_tiny(run_benchmark):
    run = run_benchmark("orchestration")
    orchestration = run.results["orchestration"]
    for variant in ("scripted", "proxy"):
        rows = orchestration["variants"][variant]
        assert [row["concurrency"] for row in rows] == [1, 8]
        for row in rows:
            for side in ("gym", "floor", "floor_gym_transport"):
                assert set(row[side]) >= {
                    "rollouts",
                    "rollouts_per_s",
                    "p50_ms",
                    "p99_ms",
                    "cpu_ms_per_rollout",
                    "errors",
                }
                assert row[side]["errors"] == 0
            assert row["ratio"] > 0 and row["ratio_gym_transport"] > 0
    assert orchestration["round_trips"] == {"scripted": 6, "proxy": 8}
    assert "Orchestration overhead" in run.markdown
