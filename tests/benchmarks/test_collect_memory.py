from __future__ import annotations


def test_collect_memory_tiny(run_benchmark):
    run = run_benchmark("collect_memory")
    memory = run.results["collect_memory"]  # a real gym collect over a generated input, interrupted, then resumed
    assert [row["tasks"] for row in memory["inputs"]] == [10_000]
    assert all(row["peak_rss_mb"] > 0 for row in memory["inputs"])
    assert memory["resume"]["done_rows"] > 0 and isinstance(memory["resume"]["first_new_row_s"], float)
    assert "## Streaming collection" in run.markdown
