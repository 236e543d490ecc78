"""The benchmark harness runs at a tiny size and reports what it should (no timing assertions)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


# Above the root's 300 s: eight measurements, each starting real servers (about 3 minutes on 2 quiet cores).
@pytest.mark.timeout(900)
def test_harness_runs_tiny(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--size", "tiny", "--only", "orchestration", "startup", "scale", "worker_pool", "verify_throughput", "token_faithfulness",
         "sandbox", "collect_memory", "--output", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=840,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads((tmp_path / "results.json").read_text())
    for variant in ("scripted", "proxy"):
        rows = results["orchestration"]["variants"][variant]
        assert [row["concurrency"] for row in rows] == [1, 8]
        for row in rows:
            for side in ("gym", "floor", "floor_gym_transport"):
                assert set(row[side]) >= {"rollouts", "rollouts_per_s", "p50_ms", "p99_ms", "cpu_ms_per_rollout", "errors"}
                assert row[side]["errors"] == 0
            assert row["ratio"] > 0 and row["ratio_gym_transport"] > 0
    assert results["orchestration"]["round_trips"] == {"scripted": 6, "proxy": 8}
    assert set(results["startup"]) >= {"uv_cold_s", "uv_warm_s", "none_s"}
    assert isinstance(results["startup"]["none_s"], float)  # measured; the tiny size builds no venvs
    scale = results["scale"]
    assert scale["completed"] == scale["written"] == scale["in_flight"] and scale["errors"] == 0
    assert scale["peak_in_flight"] == scale["in_flight"]  # all started together (the model waits 1 s per call)
    assert 0 < scale["peak_counter_sessions"] <= scale["connections_to_agent"] <= scale["in_flight"]
    # Every session the rollouts opened was closed: the store is back where it started.
    assert scale["sessions_before"] == scale["sessions_after"] == {"agent": 0, "counter": 0, "policy_model": 0}
    assert set(scale["peak_rss_mb"]) == {"agent", "counter", "policy_model", "collector"}
    assert all(mb > 0 for mb in scale["peak_rss_mb"].values())
    assert "## Scale" in (tmp_path / "results.md").read_text()
    pool = results["worker_pool"]
    assert all(isinstance(pool[key], float) for key in ("async_call_ms", "blocking_call_ms", "kill_and_replace_ms", "math_verify_call_ms"))
    verify = results["verify_throughput"]
    assert set(verify) == {"counter", "math", "text_to_sql"}  # text_to_sql: with the scripted judge of its bench config
    for rows in verify.values():
        assert {c: row["verifications"] for c, row in rows.items()} == {"1": 20, "8": 40}
        assert all(row["errors"] == 0 for row in rows.values())
        # Every row's example answer got the reward of its conformance field (counter's after its
        # seed and tool calls, text_to_sql's from the judge), at both concurrencies.
        assert all(row["checked"] == row["verifications"] and row["correct"] == 1.0 for row in rows.values())
    assert "Verify throughput per environment" in (tmp_path / "results.md").read_text()
    faithful = results["token_faithfulness"]  # the real local model, multi-turn: no token may drift
    assert faithful["rollouts"] == 3 and faithful["history_tokens_compared"] > 0 and faithful["drifted_tokens"] == 0
    assert faithful["generated_tokens_rescored"] > 0 and faithful["log_prob_mismatches"] == 0
    box = results["sandbox"]  # a trivial program, bare and sandboxed, at concurrency 1 and 8
    for c in ("1", "8"):
        # Figures were measured for each way (their values are the benchmark's business, not the test's).
        assert all(set(box[c][way]) == {"per_s", "p50_ms", "p99_ms"} for way in ("bare", "sandbox"))
    assert box["executions"] == 20 and isinstance(box["overhead_ms"], float)
    assert "## Sandbox" in (tmp_path / "results.md").read_text()
    memory = results["collect_memory"]  # a real gym collect over a generated input, interrupted, then resumed
    assert [row["tasks"] for row in memory["inputs"]] == [10_000]
    assert all(row["peak_rss_mb"] > 0 for row in memory["inputs"])
    assert memory["resume"]["done_rows"] > 0 and isinstance(memory["resume"]["first_new_row_s"], float)
    assert "## Streaming collection" in (tmp_path / "results.md").read_text()
    assert set(results) >= {"load_before", "load_after", "machine"}
    assert "Orchestration overhead" in (tmp_path / "results.md").read_text()


def test_replicas_tiny(tmp_path):
    """Tiny replicas: two local replica processes (no Ray) and the routing microbenchmark."""
    proc = subprocess.run([sys.executable, "-m", "benchmarks", "--size", "tiny", "--only", "replicas", "--output", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    replicas = json.loads((tmp_path / "results.json").read_text())["replicas"]
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
    assert "## Throughput with replicas" in (tmp_path / "results.md").read_text()
