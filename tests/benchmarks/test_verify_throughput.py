from __future__ import annotations


def test_verify_throughput_tiny(run_benchmark):
    run = run_benchmark("verify_throughput")
    verify = run.results["verify_throughput"]
    assert set(verify) == {"counter", "math", "text_to_sql"}  # text_to_sql: with the scripted judge of its bench config
    for rows in verify.values():
        assert {c: row["verifications"] for c, row in rows.items()} == {"1": 20, "8": 40}
        assert all(row["errors"] == 0 for row in rows.values())
        # Every row's example answer got the reward of its conformance field (counter's after its
        # seed and tool calls, text_to_sql's from the judge), at both concurrencies.
        assert all(row["checked"] == row["verifications"] and row["correct"] == 1.0 for row in rows.values())
    assert "Verify throughput per environment" in run.markdown
