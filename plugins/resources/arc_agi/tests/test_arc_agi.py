"""The arc_agi server over real HTTP: gym's conformance kit on the example rows, its verdicts and
errors, the example config end to end with the scripted model, and its aggregate metrics.

Each example row carries ``conformance``: ``response``, what the tests answer, and ``reward``, the
reward that answer must get; the environment ignores it (and, nested, gym's profile does too).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from gym_core import PluginManager, ServerClient
from gym_core.testing import (
    ResourcesServerTests,
    RunningServers,
    assistant_response,
    first_party,
    plugin_manager,
    read_rows,
    running_servers,
)

import gym_arc_agi.plugin
from gym_arc_agi.verify import INLINE_MAX_CHARS

PACKAGE = Path(__file__).resolve().parents[1]
EXAMPLES = PACKAGE / "data" / "example.jsonl"
SCRIPTED_CONFIG = PACKAGE / "configs" / "arc_agi_scripted.yaml"

TASK = {
    "responses_create_params": {"input": [{"role": "user", "content": "Solve it; answer in \\boxed{}."}]},
    "train": [{"input": [[1]], "output": [[1, 1]]}],
    "test_input": [[2]],
    "expected_output": [[2, 2]],
    "task_id": "t1",
}


def body(answer: str, **fields) -> dict:
    return {**TASK, **fields, "response": assistant_response(answer)}


def verdict(reward: float, grid, reason: str) -> dict:
    """The whole verify response the server must give."""
    return {"reward": reward, "predicted_output": grid, "extraction_successful": grid is not None, "reason": reason}


def plugins(*others: object) -> PluginManager:
    """A plugin manager holding this plugin and ``others``."""
    return plugin_manager(gym_arc_agi.plugin, *others)


class TestArcAgi(ResourcesServerTests):
    server_type = "arc_agi"
    plugins = [gym_arc_agi.plugin]
    options = {"verify_workers": 1, "verify_timeout_s": 1.0}
    example_data = EXAMPLES

    def test_verify_reports_the_predicted_grid(self, gym_servers: RunningServers):
        caller = gym_servers.caller()
        right = caller.post("/verify", body("It doubles: \\boxed{[[2, 2]]}")).json()
        wrong = caller.post("/verify", body("\\boxed{[[2], [2]]}")).json()
        none = caller.post("/verify", body("Two twos side by side.")).json()
        assert right == verdict(1.0, [[2, 2]], "correct")
        assert wrong == verdict(0.0, [[2], [2]], "wrong")
        assert none == verdict(0.0, None, "no_grid")

    def test_extraction_quirks_over_http(self, gym_servers: RunningServers):
        caller = gym_servers.caller()
        first_box = caller.post("/verify", body("\\boxed{[[1, 1]]} no: \\boxed{[[2, 2]]}")).json()
        bare = caller.post("/verify", body("[[3]] hmm, [[2, 2]]")).json()
        merged = caller.post("/verify", body("[[2, 2]]\n[[2, 2]]")).json()
        # Two different boxed grids are a hedge (reason several_answers), not "the first one".
        assert (first_box["reward"], first_box["predicted_output"], first_box["reason"]) == (
            0.0,
            None,
            "several_answers",
        )
        assert (bare["reward"], bare["predicted_output"]) == (0.0, [[3]])
        assert (merged["reward"], merged["extraction_successful"]) == (0.0, False)

    def test_grid_split_across_assistant_messages_is_joined_with_newlines(self, gym_servers: RunningServers):
        response = {
            "output": [
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "\\boxed{[[2,"}]},
                {"type": "reasoning", "summary": [{"type": "summary_text", "text": "\\boxed{[[9]]}"}]},
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": " 2]]}"}]},
            ]
        }
        reply = gym_servers.caller().post("/verify", {**TASK, "response": response}).json()
        assert reply == verdict(1.0, [[2, 2]], "correct")

    def test_long_answers_are_graded_in_a_worker(self, gym_servers: RunningServers):
        reasoning = "Each cell is repeated to its right. " * (INLINE_MAX_CHARS // 20)
        reply = gym_servers.caller().post("/verify", body(reasoning + "\\boxed{[[2, 2]]}")).json()
        assert reply == verdict(1.0, [[2, 2]], "correct")

    def test_pathological_answer_times_out_without_stalling_the_server(self, gym_servers: RunningServers):
        reply = gym_servers.caller().post("/verify", body("[" * 300_000)).json()
        assert reply == verdict(0.0, None, "timeout")
        assert gym_servers.caller().post("/verify", body("\\boxed{[[2, 2]]}")).json()["reward"] == 1.0

    def test_every_task_field_is_optional_and_may_be_null(self, gym_servers: RunningServers):
        caller = gym_servers.caller()
        bare = {"responses_create_params": {"input": "q", "temperature": None}, "response": assistant_response("[[1]]")}
        nulls = {**bare, "train": None, "test_input": None, "expected_output": None, "task_id": None}
        empty = {**bare, "expected_output": []}
        for row in (bare, nulls, empty):
            assert caller.post("/verify", row).json() == verdict(0.0, [[1]], "no_expected_output")
        assert caller.post("/seed_session", {k: v for k, v in nulls.items() if k != "response"}).json() == {}

    def test_undeclared_fields_are_ignored(self, gym_servers: RunningServers):
        reply = gym_servers.caller().post("/verify", body("\\boxed{[[2, 2]]}", difficulty="hard", extra={"a": 1}))
        assert reply.json() == verdict(1.0, [[2, 2]], "correct")

    @pytest.mark.parametrize(
        "field, value",
        [
            ("expected_output", "[[2, 2]]"),
            ("expected_output", [[2, "x"]]),
            ("test_input", [1, 2]),
            ("task_id", 5),
            ("train", {"input": []}),
        ],
    )
    def test_a_task_field_of_the_wrong_type_is_a_422_naming_it(self, gym_servers: RunningServers, field, value):
        reply = gym_servers.caller().post("/verify", body("\\boxed{[[2, 2]]}", **{field: value}))
        assert reply.status == 422, reply.text
        assert field in reply.json()["error"]["message"]

    def test_no_tools(self, gym_servers: RunningServers):
        assert gym_servers.caller().get("/tools").json() == []


async def test_scripted_config_runs_every_example_end_to_end():
    # The scripted model answers each example's conformance response (its script rides in metadata).
    manager = plugins(*first_party("scripted", "simple_agent"))
    config = yaml.safe_load(SCRIPTED_CONFIG.read_text())
    config["arc_agi"]["verify_workers"] = 1
    with running_servers(config, plugins=manager) as running:
        async with ServerClient(running) as client:
            for task in read_rows(EXAMPLES):
                script = [{"text": task["conformance"]["response"]}]
                params = {**task["responses_create_params"], "metadata": {"scripted_turns": json.dumps(script)}}
                result = await client.post("arc_agi_agent", "/run", {**task, "responses_create_params": params})
                assert result["reward"] == task["conformance"]["reward"], (task["task_id"], result)
                assert result["environment"] == "arc_agi"
                assert result["extraction_successful"] == (result["predicted_output"] is not None)


def test_aggregate_metrics_count_extraction_over_arc_agi_rows_only():
    manager = PluginManager(load_entry_points=False)
    manager.register(gym_arc_agi.plugin, name="arc_agi")
    rows = [
        {"environment": "arc_agi", "reward": 1.0, "predicted_output": [[1]], "extraction_successful": True},
        {"environment": "arc_agi", "reward": 0.0, "predicted_output": [[2]], "extraction_successful": True},
        {"environment": "arc_agi", "reward": 0.0, "predicted_output": None, "extraction_successful": False},
        {"environment": "arc_agi", "reward": 0.0, "predicted_output": None, "extraction_successful": False},
        {"environment": "math", "reward": 1.0, "extraction_successful": True},
    ]
    assert manager.aggregate_metrics(rows) == {
        "arc_agi/mean/extraction_successful": 0.5,
        "arc_agi/std/extraction_successful": 0.5,
        "arc_agi/min/extraction_successful": 0.0,
        "arc_agi/max/extraction_successful": 1.0,
        "arc_agi/median/extraction_successful": 0.5,
    }
    assert manager.aggregate_metrics([{"environment": "math", "reward": 1.0}]) == {}


@pytest.mark.parametrize(
    "name, overrides",
    [
        ("arc_agi_local.yaml", []),
        ("arc_agi_scripted.yaml", []),
        ("arc_agi.yaml", ["policy_model.base_url=http://127.0.0.1:8000/v1", "policy_model.model=some-model"]),
    ],
)
def test_configs_validate(name, overrides):
    from gym_core.config import load_config

    manager = plugins(*first_party("local_llama", "openai_model", "scripted", "simple_agent"))
    config = load_config([PACKAGE / "configs" / name], overrides, env_file=None, server_types=manager.servers())
    assert config.instances["arc_agi_agent"].plugin == "simple_agent"
    assert config.instances["arc_agi"].plugin == "arc_agi"
