"""The harness's median over rounds: a true median (of two rounds, their mean), with min and max."""

from __future__ import annotations

from benchmarks.__main__ import markdown
from benchmarks._common import median_round, spread


def _round(rate: float, p99: float, errors: int = 0) -> dict:
    return {"rollouts": 100, "rollouts_per_s": rate, "p99_ms": p99, "errors": errors, "session_share": [rate]}


def test_two_rounds_give_their_mean_not_the_larger():
    merged = median_round([_round(100.0, 8.0), _round(300.0, 2.0, errors=1)])
    assert merged["rollouts_per_s"] == 200.0
    assert (merged["rollouts_per_s_min"], merged["rollouts_per_s_max"]) == (100.0, 300.0)
    assert merged["p99_ms"] == 5.0  # every numeric field is its own median
    assert merged["errors"] == 1  # summed, not a median
    assert merged["rounds_per_s"] == [100.0, 300.0]
    assert merged["session_share"] == [100.0]  # not a number: the lower middle round's


def test_odd_rounds_give_the_middle_one():
    merged = median_round([_round(5.0, 1.0), _round(1.0, 3.0), _round(9.0, 2.0)])
    assert (merged["rollouts_per_s"], merged["rollouts_per_s_min"], merged["rollouts_per_s_max"]) == (5.0, 1.0, 9.0)
    assert spread([1.0, 2.0, 4.0, 10.0]) == {"median": 3.0, "min": 1.0, "max": 10.0}


def test_tables_show_min_and_max():
    side = {**median_round([_round(100.0, 8.0), _round(300.0, 2.0)]), "p50_ms": 1.0, "cpu_ms_per_rollout": 2.0}
    row = {
        "concurrency": 8,
        "gym": side,
        "floor": side,
        "floor_gym_transport": side,
        **{"ratio": 0.5, "ratio_min": 0.4, "ratio_max": 0.6},
        **{"ratio_gym_transport": 0.7, "ratio_gym_transport_min": 0.7, "ratio_gym_transport_max": 0.7},
    }
    results = {
        "size": "tiny",
        "load_before": "0",
        "load_after": "0",
        "machine": "m",
        "orchestration": {"variants": {"scripted": [row]}, "round_trips": {"scripted": 6}},
    }
    table = markdown(results)
    assert "| scripted | 6 | 8 | 200.0 (100.0–300.0) | 200.0 (100.0–300.0) | 0.5 (0.4–0.6) |" in table
    assert "| 0.7 |" in table  # no spread to show
