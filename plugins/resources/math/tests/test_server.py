"""The math resources server over real HTTP (gym's conformance kit, then its verdicts), and its metric."""

from __future__ import annotations

from pathlib import Path

from gym_core import PluginManager
from gym_core.testing import ResourcesServerTests, RunningServers, assistant_response

import gym_math.plugin


def body(text: str, expected) -> dict:
    row = {"responses_create_params": {"input": [{"role": "user", "content": "q"}]}, "expected_answer": expected}
    return {**row, "response": assistant_response(text)}


class TestMath(ResourcesServerTests):
    server_type = "math"
    plugins = [gym_math.plugin]
    example_data = Path(__file__).resolve().parents[1] / "data" / "example.jsonl"

    def expected_reward(self, row):
        return 1.0  # the kit's default response boxes the row's expected answer

    def test_verify_rewards_equivalent_boxed_answers(self, gym_servers: RunningServers):
        caller = gym_servers.caller()
        right = caller.post("/verify", body("so \\boxed{\\frac{1}{2}}", "0.5")).json()
        wrong = caller.post("/verify", body("\\boxed{3}", 4)).json()
        missing = caller.post("/verify", body("the answer is 4", "4")).json()
        assert right == {"reward": 1.0, "extracted_answer": "\\frac{1}{2}", "reason": "correct"}
        assert wrong["reward"] == 0.0 and wrong["extracted_answer"] == "3"
        assert missing == {"reward": 0.0, "extracted_answer": None, "reason": "no_boxed_answer"}


def test_boxed_answer_rate_metric_counts_math_rows_only():
    plugins = PluginManager(load_entry_points=False)
    plugins.register(gym_math.plugin, name="math")
    rows = [
        {"environment": "math", "reward": 1.0, "extracted_answer": "4", "expected_answer": "4"},
        {"environment": "math", "reward": 0.0, "extracted_answer": None, "expected_answer": "4"},
        {"environment": "counter", "reward": 1.0, "final_count": 3},
    ]
    assert plugins.aggregate_metrics(rows) == {"math/boxed_answer_rate": 0.5}
    assert plugins.aggregate_metrics([{"environment": "counter", "reward": 1.0}]) == {}
