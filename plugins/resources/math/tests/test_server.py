"""The math resources server over real HTTP, and its aggregate metric."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gym_core import ServerClient
from gym_core.plugins import PluginManager
from gym_core.testing import running_servers

import gym_math.plugin

DATA = Path(__file__).resolve().parents[1] / "data" / "example.jsonl"


@pytest.fixture
def plugins() -> PluginManager:
    manager = PluginManager(load_entry_points=False)
    manager.register(gym_math.plugin, name="math")
    return manager


def body(text: str, expected) -> dict:
    return {
        "responses_create_params": {"input": [{"role": "user", "content": "q"}]},
        "response": {"output": [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}]},
        "expected_answer": expected,
    }


async def test_verify_rewards_equivalent_boxed_answers(plugins):
    with running_servers({"math": {"plugin": "math"}}, plugins) as config:
        async with ServerClient(config) as client:
            right = await client.post("math", "/verify", body("so \\boxed{\\frac{1}{2}}", "0.5"))
            wrong = await client.post("math", "/verify", body("\\boxed{3}", 4))
            missing = await client.post("math", "/verify", body("the answer is 4", "4"))
    assert right == {"reward": 1.0, "extracted_answer": "\\frac{1}{2}", "reason": "correct"}
    assert wrong["reward"] == 0.0 and wrong["extracted_answer"] == "3"
    assert missing == {"reward": 0.0, "extracted_answer": None, "reason": "no_boxed_answer"}


def test_boxed_answer_rate_metric(plugins):
    rows = [
        {"task_index": 0, "reward": 1.0, "extracted_answer": "4", "expected_answer": "4"},
        {"task_index": 0, "reward": 0.0, "extracted_answer": None, "expected_answer": "4"},
    ]
    assert plugins.aggregate_metrics(rows) == {"math/boxed_answer_rate": 0.5}
    assert plugins.aggregate_metrics([{"task_index": 0, "reward": 1.0}]) == {}


def test_example_rows_follow_the_nemo_gym_format():
    rows = [json.loads(line) for line in DATA.read_text().splitlines()]
    assert len(rows) >= 5
    for row in rows:
        assert isinstance(row["responses_create_params"]["input"], list)
        assert isinstance(row["expected_answer"], str)
