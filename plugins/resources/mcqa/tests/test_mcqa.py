"""Tests of the mcqa plugin over real HTTP, servers on loopback: gym's conformance kit for a
resources server, then what is particular to this one (the wire format of verify, bad rows, the
time limit, the server's grading_mode), then the example config end to end with the scripted model.

The plugin is registered explicitly rather than found through its entry point, so these tests also
run from a source checkout. The test of the example config needs gym's first-party plugins too; it
is skipped where they are not installed (in the plugin's own venv, say).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from gym_core import PluginManager, ServerClient
from gym_core.testing import (
    HTTPCaller,
    ResourcesServerTests,
    RunningServers,
    assistant_response,
    first_party,
    plugin_manager,
    read_rows,
    running_servers,
)

import gym_mcqa.plugin

PACKAGE = Path(__file__).resolve().parents[1]
EXAMPLES = PACKAGE / "data" / "example.jsonl"

OPTIONS = [{"A": "Karyotyping"}, {"B": "Polymerase Chain Reaction (PCR)"}, {"C": "Western blot"}, {"D": "ELISA"}]
TASK = {"responses_create_params": {"input": "Which test?"}, "options": OPTIONS, "expected_answer": "B"}


def plugins(*others: object) -> PluginManager:
    """A plugin manager holding this plugin and ``others``."""
    return plugin_manager(gym_mcqa.plugin, *others)


class TestMcqa(ResourcesServerTests):
    server_type = "mcqa"
    plugins = [gym_mcqa.plugin]
    # Small limits so that the worker path and the time limit are exercised quickly.
    options = {"verify_timeout_s": 1.0, "inline_max_chars": 5000}
    example_data = EXAMPLES

    # Each example row's `conformance` field (which mcqa ignores) holds the response the kit sends
    # and the reward it must get.

    def verify(self, servers: RunningServers, task: dict, text: str):
        return servers.caller().post("/verify", {**task, "response": assistant_response(text)})

    def test_verify_reports_gold_extracted_answer_and_reason(self, gym_servers: RunningServers):
        right = self.verify(gym_servers, {**TASK, "expected_answer": " b "}, "So \\boxed{B}.").json()
        assert right == {"reward": 1.0, "expected_answer": "B", "extracted_answer": "B", "reason": "correct"}
        wrong = self.verify(gym_servers, TASK, "\\boxed{D}").json()
        assert (wrong["reward"], wrong["extracted_answer"], wrong["reason"]) == (0.0, "D", "wrong")

    def test_an_unparseable_answer_scores_zero_with_null_extracted_answer(self, gym_servers: RunningServers):
        reply = self.verify(gym_servers, TASK, "It is probably PCR.")
        assert reply.status == 200
        assert reply.json() == {"reward": 0.0, "expected_answer": "B", "extracted_answer": None, "reason": "no_answer"}

    def test_an_empty_response_scores_zero(self, gym_servers: RunningServers):
        body = {**TASK, "response": {"output": []}}
        assert gym_servers.caller().post("/verify", body).json()["reason"] == "empty_response"

    def test_every_row_grading_mode_over_http(self, gym_servers: RunningServers):
        cases = [
            ("strict_single_letter_boxed", "\\boxed{[B]}", "B"),
            ("lenient_boxed", "\\boxed{\\text{polymerase chain reaction (pcr)}}", "B"),
            ("lenient_answer_colon", "Reasoning...\nAnswer: b", "B"),
            (None, "\\boxed{C}", "C"),  # null: the default, strict
        ]
        for mode, text, letter in cases:
            verdict = self.verify(gym_servers, {**TASK, "grading_mode": mode}, text).json()
            assert verdict["extracted_answer"] == letter, (mode, verdict)

    def test_rows_with_nulls_are_accepted(self, gym_servers: RunningServers):
        task = {**TASK, "options": [{"A": None}, {"B": "x"}], "grading_mode": None, "template_metadata": None}
        assert self.verify(gym_servers, task, "\\boxed{B}").json()["reward"] == 1.0
        assert self.verify(gym_servers, task, "\\boxed{A}").json()["extracted_answer"] is None

    def test_row_output_regex_runs_first_in_a_worker(self, gym_servers: RunningServers):
        task = {**TASK, "template_metadata": {"output_regex": r"my pick:\s*\(?([a-z])"}}
        verdict = self.verify(gym_servers, task, "\\boxed{A}. My pick: (b)").json()
        assert (verdict["reward"], verdict["extracted_answer"]) == (1.0, "B")

    def test_a_pathological_regex_times_out_with_reward_zero(self, gym_servers: RunningServers):
        task = {**TASK, "template_metadata": {"output_regex": r"(a+)+$"}}
        verdict = self.verify(gym_servers, task, "a" * 40 + "!").json()
        assert verdict == {"reward": 0.0, "expected_answer": "B", "extracted_answer": None, "reason": "timeout"}
        # The server is not stalled, and the killed worker was replaced.
        assert (
            self.verify(gym_servers, {**task, "template_metadata": {"output_regex": "(B)"}}, "B").json()["reward"]
            == 1.0
        )

    def test_long_outputs_are_graded_in_a_worker(self, gym_servers: RunningServers):
        assert self.verify(gym_servers, TASK, "x" * 20_000 + " \\boxed{B}").json()["reward"] == 1.0

    def test_a_regex_with_two_groups_is_a_422_naming_the_field(self, gym_servers: RunningServers):
        task = {**TASK, "template_metadata": {"output_regex": r"(final):\s*(\w)"}}
        reply = self.verify(gym_servers, task, "final: B")
        assert reply.status == 422
        assert "template_metadata.output_regex" in reply.text

    @pytest.mark.parametrize(
        "field, value",
        [
            ("options", "A: x"),
            ("options", [{"A": 5}]),
            ("expected_answer", 2),
            ("grading_mode", "lenient_answer_colon_md"),  # server config only
            ("grading_mode", "loose"),
        ],
    )
    def test_bad_row_fields_are_a_422_naming_the_field(self, gym_servers: RunningServers, field, value):
        reply = self.verify(gym_servers, {**TASK, field: value}, "\\boxed{B}")
        assert reply.status == 422, reply.text
        assert field in reply.json()["error"]["message"]


def test_the_server_grading_mode_overrides_the_row_mode():
    # The server's grading_mode is the only way to the markdown mode.
    config = {"mcqa": {"plugin": "mcqa", "grading_mode": "lenient_answer_colon_md"}}
    with running_servers(config, plugins=plugins()) as running:
        caller = HTTPCaller(running.instances["mcqa"].url)
        task = {**TASK, "grading_mode": "strict_single_letter_boxed"}
        md = caller.post("/verify", {**task, "response": assistant_response("**Answer:** `B`")}).json()
        boxed = caller.post("/verify", {**task, "response": assistant_response("\\boxed{B}")}).json()
    assert (md["reward"], md["extracted_answer"]) == (1.0, "B")
    assert (boxed["reward"], boxed["extracted_answer"]) == (0.0, None)


async def test_the_scripted_config_grades_every_example_through_the_agent():
    # The scripted model answers each example with its conformance response (its script rides in metadata).
    config = yaml.safe_load((PACKAGE / "configs" / "mcqa_scripted.yaml").read_text())
    manager = plugins(*first_party("scripted", "simple_agent"))
    with running_servers(config, plugins=manager) as running:
        async with ServerClient(running) as client:
            for task in read_rows(EXAMPLES):
                script = [{"text": task["conformance"]["response"]}]
                params = {**task["responses_create_params"], "metadata": {"scripted_turns": json.dumps(script)}}
                result = await client.post("agent", "/run", {**task, "responses_create_params": params})
                assert result["reward"] == task["conformance"]["reward"], result
                assert "extracted_answer" in result


@pytest.mark.parametrize("name", ["mcqa.yaml", "mcqa_local.yaml", "mcqa_scripted.yaml"])
def test_configs_validate(name):
    from gym_core.config import load_config

    manager = plugins(*first_party("scripted", "simple_agent", "local_llama", "openai_model"))
    overrides = ["policy_model.base_url=http://127.0.0.1:1/v1", "policy_model.model=m"] if name == "mcqa.yaml" else []
    config = load_config([PACKAGE / "configs" / name], overrides, env_file=None, server_types=manager.servers())
    assert config.instances["mcqa"].plugin == "mcqa"
