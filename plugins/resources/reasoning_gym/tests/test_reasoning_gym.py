"""Tests of the reasoning_gym plugin over real HTTP, servers on loopback: gym's conformance kit for a
resources server, then what is particular to this one (the verify response, bad rows, the time
limit), then `gym reasoning-gym generate` rows of three tasks collected with the scripted model.

The plugin is registered explicitly rather than found through its entry point, so these tests also
run from a source checkout. The tests that need gym's first-party plugins (scripted, simple_agent)
are skipped where they are not installed (in the plugin's own venv, say).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from reference_answers import reference_answer

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

import gym_reasoning_gym.plugin
from gym_reasoning_gym.scoring import generate_rows

PACKAGE = Path(__file__).resolve().parents[1]
EXAMPLES = PACKAGE / "data" / "example.jsonl"

TASK = {
    "responses_create_params": {"input": "What is 2 + 3?"},
    "question": "What is 2 + 3?",
    "answer": "5",
    "metadata": {"source_dataset": "basic_arithmetic", "source_index": 0},
}


def plugins(*others: object) -> PluginManager:
    """A plugin manager holding this plugin and ``others``."""
    return plugin_manager(gym_reasoning_gym.plugin, *others)


class TestReasoningGym(ResourcesServerTests):
    server_type = "reasoning_gym"
    plugins = [gym_reasoning_gym.plugin]
    # A short limit so that the pathological answer below times out quickly (scoring takes ms).
    options = {"verify_timeout_s": 3.0}
    example_data = EXAMPLES

    # Each example row carries the response to send and the reward it must get in its
    # `conformance` field, which reasoning_gym ignores (hand-written: right, wrong, partial credit,
    # boxed, null oracle, malformed, empty; `generate --conformance` writes oracle answers only).

    def verify(self, servers: RunningServers, task: dict, text: str):
        return servers.caller().post("/verify", {**task, "response": assistant_response(text)})

    def test_verify_reports_task_score_and_extracted_answer(self, gym_servers: RunningServers):
        right = self.verify(gym_servers, TASK, "2 + 3 = 5. <answer> 5 </answer>").json()
        assert right == {
            "reward": 1.0, "task_name": "basic_arithmetic", "score": 1.0, "extracted_answer": "5", "reason": "scored"
        }  # fmt: skip
        partial = self.verify(gym_servers, TASK, "\\boxed{it is 5}").json()
        assert (partial["reward"], partial["extracted_answer"]) == (pytest.approx(1 / 7), "it is 5")
        assert partial["score"] == partial["reward"]

    def test_an_empty_response_scores_zero_with_an_empty_answer(self, gym_servers: RunningServers):
        reply = gym_servers.caller().post("/verify", {**TASK, "response": {"output": []}})
        assert reply.status == 200
        assert (reply.json()["reward"], reply.json()["extracted_answer"]) == (0.0, "")

    def test_example_rows_are_scored_by_their_task_scorer(self, gym_servers: RunningServers):
        for row in read_rows(EXAMPLES):
            verdict = self.verify(gym_servers, row, row["conformance"]["response"]).json()
            assert verdict["task_name"] == row["metadata"]["source_dataset"]
            assert verdict["reward"] == pytest.approx(row["conformance"]["reward"])

    def test_a_null_answer_is_accepted_and_a_raising_scorer_gives_zero(self, gym_servers: RunningServers):
        verdict = self.verify(gym_servers, {**TASK, "answer": None}, "<answer>5</answer>").json()
        assert (verdict["reward"], verdict["extracted_answer"], verdict["reason"]) == (0.0, "5", "error")

    def test_an_unknown_task_scores_zero(self, gym_servers: RunningServers):
        task = {**TASK, "metadata": {"source_dataset": "no_such_task"}}
        verdict = self.verify(gym_servers, task, "<answer>5</answer>").json()
        assert (verdict["reward"], verdict["task_name"], verdict["reason"]) == (0.0, "no_such_task", "error")

    @pytest.mark.parametrize("metadata", [{}, {"source_dataset": ""}, {"source_dataset": None}])
    def test_a_missing_source_dataset_fails_the_rollout_naming_it(self, gym_servers: RunningServers, metadata):
        reply = self.verify(gym_servers, {**TASK, "metadata": metadata}, "<answer>5</answer>")
        assert reply.status == 422
        assert "metadata.source_dataset" in reply.json()["error"]["message"]

    @pytest.mark.parametrize("field", ["question", "answer", "metadata"])
    def test_a_missing_field_is_a_422_naming_it(self, gym_servers: RunningServers, field):
        task = {k: v for k, v in TASK.items() if k != field}
        reply = self.verify(gym_servers, task, "<answer>5</answer>")
        assert reply.status == 422
        assert field in reply.json()["error"]["message"]

    def test_a_right_arc_grid_scores_the_reference_quirk_by_default(self, gym_servers: RunningServers):
        # metadata.output comes back from JSON as lists, the parsed answer is tuples: 0.05, as in
        # the reference (restore_tuple_grids=True gives 1.0: tests/test_all_tasks.py).
        (row,) = generate_rows({"arc_agi": 1}, 1, seed=0)
        verdict = self.verify(gym_servers, row, f"<answer>{row['answer']}</answer>").json()
        assert (verdict["reward"], verdict["reason"]) == (0.05, "scored")

    def test_a_pathological_answer_times_out_with_reward_zero(self, gym_servers: RunningServers):
        # Unclosed answer tags make the extraction quadratic: far past the limit.
        verdict = self.verify(gym_servers, TASK, "<answer>" * 60_000).json()
        assert verdict == {
            "reward": 0.0, "task_name": "basic_arithmetic", "score": 0.0, "extracted_answer": None, "reason": "timeout"
        }  # fmt: skip
        # The server is not stalled, and the killed worker was replaced.
        assert self.verify(gym_servers, TASK, "<answer>5</answer>").json()["reward"] == 1.0


def generate_with_the_command(tmp_path: Path, *args: str) -> list[dict]:
    """Runs `gym reasoning-gym generate ARGS -o FILE`, the command as this plugin registers it."""
    commands = plugins().commands()
    output = tmp_path / "tasks.jsonl"
    result = CliRunner().invoke(commands["reasoning-gym"], ["generate", *args, "-o", str(output)])
    assert result.exit_code == 0, result.output
    assert f"wrote {len(output.read_text().splitlines())} rows" in result.output
    return read_rows(output)


def test_the_tasks_command_lists_the_tasks():
    result = CliRunner().invoke(plugins().commands()["reasoning-gym"], ["tasks", "--json"])
    assert result.exit_code == 0, result.output
    names = json.loads(result.output)
    assert len(names) >= 100 and "knights_knaves" in names and "composite" not in names


def test_the_generate_command_refuses_an_unknown_task(tmp_path):
    result = CliRunner().invoke(
        plugins().commands()["reasoning-gym"], ["generate", "nope=2", "-n", "1", "-o", str(tmp_path / "x.jsonl")]
    )
    assert result.exit_code != 0
    assert "nope" in str(result.exception or result.output)


def test_the_generate_command_writes_the_conformance_field_on_request(tmp_path):
    plain = generate_with_the_command(tmp_path, "gcd", "graph_color", "arc_agi", "-n", "4", "--seed", "0")
    rows = generate_with_the_command(
        tmp_path, "gcd", "graph_color", "arc_agi", "-n", "4", "--seed", "0", "--conformance"
    )
    assert [{k: v for k, v in row.items() if k != "conformance"} for row in rows] == plain
    assert {row["metadata"]["source_dataset"] for row in rows} == {"gcd", "graph_color", "arc_agi"}
    for row in rows:
        task = row["metadata"]["source_dataset"]
        if task == "graph_color":  # no oracle answer: no conformance
            assert "conformance" not in row
        else:  # the oracle answer, and what a default server gives it (the tuple-grid quirk for arc)
            reward = 0.05 if task == "arc_agi" else 1.0
            assert row["conformance"] == {"response": f"<answer>{row['answer']}</answer>", "reward": reward}


def test_the_generate_command_is_deterministic(tmp_path):
    first = generate_with_the_command(tmp_path, "gcd", "lcm=2", "-n", "5", "--seed", "9")
    assert first == generate_with_the_command(tmp_path, "gcd", "lcm=2", "-n", "5", "--seed", "9")
    assert len(first) == 5


async def test_generated_rows_of_three_tasks_collected_with_the_scripted_model(tmp_path):
    rows = generate_with_the_command(
        tmp_path, "knights_knaves", "basic_arithmetic", "graph_color=2", "-n", "8", "--seed", "3"
    )
    assert {row["metadata"]["source_dataset"] for row in rows} == {"knights_knaves", "basic_arithmetic", "graph_color"}
    config = yaml.safe_load((PACKAGE / "configs" / "reasoning_gym_scripted.yaml").read_text())
    manager = plugins(*first_party("scripted", "simple_agent"))
    with running_servers(config, plugins=manager) as running:
        async with ServerClient(running) as client:
            for index, row in enumerate(rows):
                right = index % 2 == 0
                answer = reference_answer(row) if right else "I do not know"
                script = [{"text": f"Thinking...\n<answer>{answer}</answer>"}]
                params = {**row["responses_create_params"], "metadata": {"scripted_turns": json.dumps(script)}}
                result = await client.post("agent", "/run", {**row, "responses_create_params": params})
                assert result["task_name"] == row["metadata"]["source_dataset"]
                assert result["extracted_answer"] == answer
                if right:
                    assert result["reward"] == 1.0, result
                else:
                    assert result["reward"] < 1.0, result


@pytest.mark.parametrize("name", ["reasoning_gym.yaml", "reasoning_gym_local.yaml", "reasoning_gym_scripted.yaml"])
def test_configs_validate(name):
    from gym_core.config import load_config

    manager = plugins(*first_party("scripted", "simple_agent", "local_llama", "openai_model"))
    overrides = []
    if name == "reasoning_gym.yaml":
        overrides = ["policy_model.base_url=http://127.0.0.1:1/v1", "policy_model.model=m"]
    config = load_config([PACKAGE / "configs" / name], overrides, env_file=None, server_types=manager.servers())
    assert config.instances["reasoning_gym"].plugin == "reasoning_gym"
