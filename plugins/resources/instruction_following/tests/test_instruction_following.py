"""Tests of the instruction_following plugin over real HTTP, servers on loopback: gym's conformance
kit for a resources server, then what is particular to this one (the row formats, grading modes,
the text checked, bad rows, unknown ids, the time limit), then the example configs.

The plugin is registered explicitly rather than found through its entry point, so these tests also
run from a source checkout. The tests of the example configs need gym's first-party plugins too;
they are skipped where those are not installed (in the plugin's own venv, say).
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

import gym_instruction_following.plugin
from gym_instruction_following.plugin import instruction_following_metrics

PACKAGE = Path(__file__).resolve().parents[1]
EXAMPLES = PACKAGE / "data" / "example.jsonl"

METADATA = {
    "instruction_id_list": ["punctuation:no_comma", "keywords:existence"],
    "prompt": "Describe tea without commas and mention green tea.",
    "kwargs": [None, {"keywords": ["green"]}],
}
TASK = {
    "id": 7,
    "responses_create_params": {"input": "Describe tea."},
    "verifier_metadata": METADATA,
}


def plugins(*others: object) -> PluginManager:
    """A plugin manager holding this plugin and ``others``."""
    return plugin_manager(gym_instruction_following.plugin, *others)


class TestInstructionFollowing(ResourcesServerTests):
    server_type = "instruction_following"
    plugins = [gym_instruction_following.plugin]
    options = {"verify_timeout_s": 2.0}
    example_data = EXAMPLES

    # Each example row's `conformance` field (which instruction_following ignores) holds the
    # response the kit sends and the reward it must get.

    def verify(self, servers: RunningServers, task: dict, response: str | dict):
        if isinstance(response, str):
            response = assistant_response(response)
        return servers.caller().post("/verify", {**task, "response": response})

    def test_verify_reports_each_instruction_and_echoes_the_metadata(self, gym_servers: RunningServers):
        verdict = self.verify(gym_servers, TASK, "Green tea is calm.").json()
        assert verdict == {
            "reward": 1.0,
            "id": 7,
            "verifier_metadata": METADATA,
            "follow_all_instructions": True,
            "follow_instruction_list": [True, True],
            "instruction_errors": [None, None],
            "reason": "",
        }
        wrong = self.verify(gym_servers, TASK, "Black, strong tea.").json()
        assert (
            wrong["reward"],
            wrong["follow_instruction_list"],
            wrong["follow_all_instructions"],
        ) == (0.0, [False, False], False)

    def test_fraction_mode_gives_the_share_followed(self, gym_servers: RunningServers):
        task = {**TASK, "verifier_metadata": {**METADATA, "grading_mode": "fraction"}}
        assert self.verify(gym_servers, task, "Black tea, strong.").json()["reward"] == 0.0
        verdict = self.verify(gym_servers, task, "Green tea, calm.").json()
        assert (verdict["reward"], verdict["follow_all_instructions"]) == (0.5, False)

    def test_keyword_stuffing_follows_no_instruction(self, gym_servers: RunningServers):
        """gym redteam's keyword_stuffing: the instructions' own parameters and nothing else."""
        task = {**TASK, "verifier_metadata": {**METADATA, "grading_mode": "fraction"}}
        stuffed = self.verify(gym_servers, task, "green green GREEN green").json()
        assert (stuffed["reward"], stuffed["reason"]) == (0.0, "keyword_stuffing")
        assert stuffed["follow_instruction_list"] == [False, False]
        # The same keyword in words of the response's own is checked as usual.
        assert self.verify(gym_servers, task, "Green tea is calm.").json()["reward"] == 1.0
        postscript = {
            **TASK,
            "verifier_metadata": {
                "instruction_id_list": ["detectable_content:postscript", "punctuation:no_comma"],
                "prompt": "Include a P.S. and no commas.",
                "kwargs": [{"postscript_marker": "P.S."}, None],
                "grading_mode": "fraction",
            },
        }
        assert self.verify(gym_servers, postscript, "P.S. P.S. P.S.").json()["reason"] == "keyword_stuffing"

    def test_an_empty_instruction_list_is_1_in_binary_and_0_in_fraction_mode(self, gym_servers: RunningServers):
        empty = {**METADATA, "instruction_id_list": [], "kwargs": []}
        binary = self.verify(gym_servers, {**TASK, "verifier_metadata": empty}, "x").json()
        fraction = self.verify(
            gym_servers,
            {**TASK, "verifier_metadata": {**empty, "grading_mode": "fraction"}},
            "x",
        ).json()
        assert (binary["reward"], binary["follow_all_instructions"]) == (1.0, True)
        assert (fraction["reward"], fraction["follow_instruction_list"]) == (0.0, [])

    def test_legacy_top_level_keys_fill_in_what_verifier_metadata_lacks(self, gym_servers: RunningServers):
        legacy = {
            "id": 1,
            "responses_create_params": {"input": "q"},
            **METADATA,
            "grading_mode": "fraction",
        }
        verdict = self.verify(gym_servers, legacy, "Green, tea").json()
        assert (verdict["reward"], verdict["verifier_metadata"]["grading_mode"]) == (
            0.5,
            "fraction",
        )
        # A key present in verifier_metadata wins over the top-level one.
        mixed = {
            **legacy,
            "verifier_metadata": {
                "grading_mode": "binary",
                "kwargs": [None, {"keywords": ["black"]}],
            },
        }
        verdict = self.verify(gym_servers, mixed, "Green tea").json()
        assert verdict["reward"] == 0.0
        assert verdict["verifier_metadata"]["kwargs"] == [None, {"keywords": ["black"]}]
        assert verdict["verifier_metadata"]["instruction_id_list"] == METADATA["instruction_id_list"]

    def test_ids_and_kwargs_are_paired_up_to_the_shorter_list(self, gym_servers: RunningServers):
        task = {**TASK, "verifier_metadata": {**METADATA, "kwargs": [None]}}
        verdict = self.verify(gym_servers, task, "has, a comma").json()
        assert (verdict["reward"], verdict["follow_instruction_list"]) == (0.0, [False])

    def test_the_text_is_the_first_part_of_the_last_output_item(self, gym_servers: RunningServers):
        first_message = {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "Red, tea"}],
        }
        last_message = {
            "type": "message",
            "role": "assistant",
            "content": [
                {"type": "output_text", "text": "Green tea"},
                {"type": "output_text", "text": ", more"},
            ],
        }
        verdict = self.verify(gym_servers, TASK, {"output": [first_message, last_message]}).json()
        assert verdict["reward"] == 1.0  # earlier messages and later parts are not read
        call = {
            "type": "function_call",
            "call_id": "c1",
            "name": "f",
            "arguments": "{}",
        }
        ends_in_a_call = self.verify(gym_servers, TASK, {"output": [last_message, call]}).json()
        assert ends_in_a_call["follow_instruction_list"] == [
            True,
            False,
        ]  # the text is ""
        assert self.verify(gym_servers, TASK, {"output": []}).json()["follow_instruction_list"] == [True, False]

    def test_missing_parameters_and_bad_kwargs_fail_that_instruction_with_a_reason(self, gym_servers: RunningServers):
        metadata = {
            "instruction_id_list": [
                "keywords:frequency",
                "punctuation:no_comma",
                "keywords:existence",
            ],
            "prompt": "p",
            "kwargs": [{"keyword": "tea"}, {"surprise": 1}, {"keywords": ["("]}],
            "grading_mode": "fraction",
        }
        # (Words of its own: "tea" alone would be keyword stuffing, checked by no instruction.)
        verdict = self.verify(gym_servers, {**TASK, "verifier_metadata": metadata}, "Tea is fine").json()
        assert verdict["follow_instruction_list"] == [False, False, False]
        assert verdict["reward"] == 0.0
        missing, unexpected, bad_regex = verdict["instruction_errors"]
        assert "missing parameter(s) frequency, relation" in missing
        assert "unexpected parameter(s) surprise" in unexpected
        assert bad_regex.startswith("keywords:existence: error")

    def test_an_unknown_instruction_id_is_a_422_naming_it(self, gym_servers: RunningServers):
        task = {
            **TASK,
            "verifier_metadata": {
                **METADATA,
                "instruction_id_list": ["punctuation:no_comma", "made:up"],
            },
        }
        reply = self.verify(gym_servers, task, "Green tea")
        assert reply.status == 422
        assert "'made:up'" in reply.json()["error"]["message"]

    @pytest.mark.parametrize("key", ["instruction_id_list", "prompt", "kwargs"])
    def test_a_missing_required_key_is_a_422_naming_it(self, gym_servers: RunningServers, key):
        metadata = {k: v for k, v in METADATA.items() if k != key}
        reply = self.verify(gym_servers, {**TASK, "verifier_metadata": metadata}, "Green tea")
        assert reply.status == 422, reply.text
        assert f"verifier_metadata.{key}" in reply.json()["error"]["message"]

    @pytest.mark.parametrize(
        "field, value",
        [
            ("id", None),
            ("id", "seven"),
            ("verifier_metadata", {**METADATA, "grading_mode": "partial"}),
            ("verifier_metadata", {**METADATA, "kwargs": None}),
            ("verifier_metadata", {**METADATA, "kwargs": ["x"]}),
        ],
    )
    def test_bad_row_fields_are_a_422_naming_the_field(self, gym_servers: RunningServers, field, value):
        reply = self.verify(gym_servers, {**TASK, field: value}, "Green tea")
        assert reply.status == 422, reply.text
        assert field in reply.json()["error"]["message"]

    def test_a_missing_id_is_a_422(self, gym_servers: RunningServers):
        task = {k: v for k, v in TASK.items() if k != "id"}
        reply = self.verify(gym_servers, task, "Green tea")
        assert reply.status == 422 and "id" in reply.json()["error"]["message"]

    def test_a_pathological_check_times_out_with_reward_zero(self, gym_servers: RunningServers):
        metadata = {
            "instruction_id_list": ["keywords:existence"],
            "prompt": "p",
            "kwargs": [{"keywords": ["(a+)+$"]}],
        }
        verdict = self.verify(gym_servers, {**TASK, "verifier_metadata": metadata}, "a" * 40 + "!").json()
        assert (
            verdict["reward"],
            verdict["reason"],
            verdict["follow_instruction_list"],
        ) == (0.0, "timeout", [False])
        # The server is not stalled, and the killed worker was replaced.
        assert self.verify(gym_servers, TASK, "Green tea").json()["reward"] == 1.0


def test_unknown_ids_can_count_as_not_followed_like_the_reference():
    config = {
        "instruction_following": {
            "plugin": "instruction_following",
            "unknown_instruction_ids": "fail",
        }
    }
    task = {
        **TASK,
        "verifier_metadata": {
            **METADATA,
            "instruction_id_list": ["punctuation:no_comma", "made:up"],
            "grading_mode": "fraction",
        },
    }
    with running_servers(config, plugins=plugins()) as running:
        caller = HTTPCaller(running.instances["instruction_following"].url)
        verdict = caller.post("/verify", {**task, "response": assistant_response("Green tea")}).json()
    assert (verdict["reward"], verdict["follow_instruction_list"]) == (
        0.5,
        [True, False],
    )
    assert verdict["instruction_errors"][1] == "unknown instruction id 'made:up'"


def test_aggregate_metrics():
    rows = [
        {
            "reward": 1.0,
            "follow_all_instructions": True,
            "follow_instruction_list": [True, True],
            "reason": "",
        },
        {
            "reward": 0.0,
            "follow_all_instructions": False,
            "follow_instruction_list": [True, False],
            "reason": "",
        },
        {
            "reward": 0.0,
            "follow_all_instructions": False,
            "follow_instruction_list": [False],
            "reason": "timeout",
        },
        {
            "reward": 1.0,
            "follow_all_instructions": True,
            "follow_instruction_list": [],
            "reason": "",
        },
    ]
    assert instruction_following_metrics(rows) == {
        "instruction_following/follow_all_instructions": 0.5,
        "instruction_following/instruction_accuracy": 0.6,
        "instruction_following/timeout_rate": 0.25,
    }
    assert instruction_following_metrics([]) == {}


async def test_the_scripted_config_grades_every_example_through_the_agent():
    # The scripted model answers each example with its conformance response (its script rides in metadata).
    config = yaml.safe_load((PACKAGE / "configs" / "instruction_following_scripted.yaml").read_text())
    manager = plugins(*first_party("scripted", "simple_agent"))
    with running_servers(config, plugins=manager) as running:
        async with ServerClient(running) as client:
            for task in read_rows(EXAMPLES):
                script = [{"text": task["conformance"]["response"]}]
                params = {
                    **task["responses_create_params"],
                    "metadata": {"scripted_turns": json.dumps(script)},
                }
                result = await client.post("agent", "/run", {**task, "responses_create_params": params})
                assert result["reward"] == task["conformance"]["reward"], result
                assert "follow_instruction_list" in result


@pytest.mark.parametrize(
    "name",
    [
        "instruction_following.yaml",
        "instruction_following_local.yaml",
        "instruction_following_scripted.yaml",
    ],
)
def test_configs_validate(name):
    from gym_core.config import load_config

    manager = plugins(*first_party("scripted", "simple_agent", "local_llama", "openai_model"))
    overrides = (
        ["policy_model.base_url=http://127.0.0.1:1/v1", "policy_model.model=m"]
        if name == "instruction_following.yaml"
        else []
    )
    config = load_config(
        [PACKAGE / "configs" / name],
        overrides,
        env_file=None,
        server_types=manager.servers(),
    )
    assert config.instances["instruction_following"].plugin == "instruction_following"


def test_keyword_stuffing_reference_checks_it_like_any_text():
    config = {"instruction_following": {"plugin": "instruction_following", "keyword_stuffing": "reference"}}
    task = {**TASK, "verifier_metadata": {**METADATA, "grading_mode": "fraction"}}
    with running_servers(config, plugins=plugins()) as running:
        caller = HTTPCaller(running.instances["instruction_following"].url)
        verdict = caller.post("/verify", {**task, "response": assistant_response("green green")}).json()
    assert (verdict["reward"], verdict["reason"]) == (1.0, "")
