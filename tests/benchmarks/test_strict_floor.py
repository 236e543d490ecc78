from __future__ import annotations

from benchmarks.strict_floor import ROLES


def test_strict_floor_tiny(run_benchmark):
    run = run_benchmark("strict_floor")
    floor = run.results["strict_floor"]
    assert [row["concurrency"] for row in floor["levels"]] == [8]
    for row in floor["levels"]:
        for side in ("gym", "floor"):
            figures = row[side]
            assert figures["rollouts"] == 40 and figures["errors"] == 0
            assert figures["rollouts_per_s"] > 0
            # Every rollout went through its side's agent (the floor's answers 502 when a call fails);
            # CPU is counted for each process (ticks of 10 ms: a process may show 0 at this size).
            assert set(figures["cpu_ms_per_rollout_by_process"]) == set(ROLES)
            assert figures["cpu_ms_per_rollout_by_process"]["collector"] > 0
        assert row["throughput_ratio"]["median"] > 0 and row["cpu_ratio"]["median"] > 0
    assert floor["commit"] and floor["load_before"] and floor["load_after"]
    table = run.markdown.split("## gym against the strict floor")[1]
    assert "| concurrency | gym rollouts/s | floor rollouts/s |" in table
    assert "| 8 |" in table and "Goal: gym's CPU per rollout within 1.5×" in table
