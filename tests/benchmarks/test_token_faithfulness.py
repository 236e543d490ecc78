from __future__ import annotations


def test_token_faithfulness_tiny(run_benchmark):
    faithful = run_benchmark("token_faithfulness").results["token_faithfulness"]  # the real local model, multi-turn
    assert faithful["rollouts"] == 3 and faithful["history_tokens_compared"] > 0 and faithful["drifted_tokens"] == 0
    assert faithful["generated_tokens_rescored"] > 0 and faithful["log_prob_mismatches"] == 0
