from __future__ import annotations


def test_repo_tiny(run_benchmark):
    run = run_benchmark("repo")
    repo = run.results["repo"]  # the command round trip three ways, a verification, generation
    for way in ("bare", "pool", "sandbox"):
        # Figures were measured for each way (their values are the benchmark's business, not the test's).
        assert set(repo["round_trip"][way]) == {"p50_ms", "p99_ms"}
    assert repo["round_trips"] == 5 and isinstance(repo["pool_overhead_ms"], float)
    # The verification scored the unfixed task: every tests_to_keep passes (asserted inside), none to fix.
    assert repo["verify"]["tests"] > 1 and repo["verify"]["runs"] == 1
    assert repo["generate"]["tasks"] == 2
    assert "## repo: a sandboxed command" in run.markdown and "tasks/min" in run.markdown
