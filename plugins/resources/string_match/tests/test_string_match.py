"""The string_match server over real HTTP (gym's conformance kit, then its verdicts), its metrics,
and the example config end to end through the simple agent and the scripted model.

The plugin is registered explicitly rather than found through its entry point, so these tests also
run from a source checkout. The test of the example config needs gym's first-party plugins too; it
is skipped where they are not installed (in the plugin's own venv, say).

Each example row carries, in its ``conformance`` field (which the environment ignores), the response
the tests send and the reward it must get; the conformance kit reads it.
"""

from __future__ import annotations

import json
from pathlib import Path

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

import gym_string_match.plugin

PACKAGE = Path(__file__).resolve().parents[1]
EXAMPLES = PACKAGE / "data" / "example.jsonl"
CONFIG = PACKAGE / "configs" / "string_match.yaml"


def plugins(*others: object) -> PluginManager:
    """A plugin manager holding this plugin and ``others``."""
    return plugin_manager(gym_string_match.plugin, *others)


def task(expected="Paris", **fields) -> dict:
    params = {"input": [{"role": "user", "content": "q"}]}
    return {"responses_create_params": params, "expected_answer": expected, **fields}


def verify(servers: RunningServers, text_or_response, **row):
    response = assistant_response(text_or_response) if isinstance(text_or_response, str) else text_or_response
    return servers.caller().post("/verify", {**task(**row), "response": response})


def verdict(reward, extracted, reason, matched_by=None, expected="Paris") -> dict:
    """The body /verify must answer."""
    return {
        "reward": reward,
        "expected_answer": expected,
        "extracted_answer": extracted,
        "reason": reason,
        "matched_by": matched_by,
    }


def message(*texts: str) -> dict:
    return {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": t} for t in texts]}


class TestStringMatch(ResourcesServerTests):
    server_type = "string_match"
    plugins = [gym_string_match.plugin]
    example_data = EXAMPLES

    def test_example_rows_cover_every_reward_and_mode(self):
        rows = read_rows(EXAMPLES)
        assert {row["conformance"]["reward"] for row in rows} == {0.0, 0.98, 1.0}
        modes = {row.get("extraction_mode", "final_answer") for row in rows}
        assert modes == {"boxed", "final_answer", "last_line", "full_response"}

    def test_verify_reports_expected_and_extracted_answers(self, gym_servers: RunningServers):
        right = verify(gym_servers, "so \\boxed{\\text{paris}}", extraction_mode="boxed").json()
        near = verify(gym_servers, "Final answer: 80 km.", expected="80").json()
        wrong = verify(gym_servers, "Answer: Rome", case_sensitive=False).json()
        assert right == verdict(1.0, "paris", "match", "exact")
        assert near == verdict(0.98, "80 km", "near_match", "soft_numeric", expected="80")
        assert wrong == verdict(0.0, "Rome", "mismatch")

    def test_nothing_extracted_scores_zero_with_a_null_answer(self, gym_servers: RunningServers):
        for mode in ("boxed", "final_answer", "last_line", "full_response"):
            body = verify(gym_servers, "  \n ", extraction_mode=mode).json()
            assert body == verdict(0.0, None, "no_answer")
        assert verify(gym_servers, "It is \\boxed{Paris", extraction_mode="boxed").json()["extracted_answer"] is None

    def test_empty_expected_answer_scores_zero(self, gym_servers: RunningServers):
        body = verify(gym_servers, "Answer: Paris", expected="").json()
        assert (body["reward"], body["extracted_answer"], body["reason"]) == (0.0, "Paris", "empty_expected_answer")

    def test_case_sensitive_rows_compare_exactly_and_accept_lax_booleans(self, gym_servers: RunningServers):
        for flag in (True, "True", "yes", 1):
            assert verify(gym_servers, "Answer: paris", case_sensitive=flag).json()["reward"] == 0.0, flag
            assert verify(gym_servers, "Answer:  Paris ", case_sensitive=flag).json()["reward"] == 1.0, flag
        for flag in (False, "false", 0, None):
            assert verify(gym_servers, "Answer: paris", case_sensitive=flag).json()["reward"] == 1.0, flag

    def test_nulls_read_as_defaults(self, gym_servers: RunningServers):
        text = "Answer: Paris\n\\boxed{Rome}"
        body = verify(gym_servers, text, extraction_mode=None, case_sensitive=None, metadata=None).json()
        assert (body["reward"], body["extracted_answer"]) == (1.0, "Paris")  # final_answer, lenient

    def test_bad_rows_get_a_422_naming_the_field(self, gym_servers: RunningServers):
        row = task()
        del row["expected_answer"]
        missing = gym_servers.caller().post("/verify", {**row, "response": assistant_response("x")})
        assert missing.status == 422 and "expected_answer" in missing.json()["error"]["message"]
        bad = [("extraction_mode", "first_line"), ("case_sensitive", "maybe"), ("case_sensitive", 2)]
        bad.append(("expected_answer", 5))
        for field, value in bad:
            reply = verify(gym_servers, "x", **{field: value})
            assert reply.status == 422, (field, value, reply.text)
            assert field in reply.json()["error"]["message"], reply.text

    def test_text_is_every_assistant_message_joined_by_newlines(self, gym_servers: RunningServers):
        response = {
            "output": [
                {"type": "reasoning", "summary": [{"type": "summary_text", "text": "Answer: Rome"}]},
                message("Answer: Par", "is"),  # parts of one message are joined by newlines too
                {"type": "function_call", "call_id": "c1", "name": "lookup", "arguments": "{}"},
                {"type": "message", "role": "assistant", "content": [{"type": "refusal", "refusal": "Answer: Rome"}]},
                message("Paris is right.", "Final line"),
            ]
        }
        extracted = {
            mode: verify(gym_servers, response, extraction_mode=mode).json()["extracted_answer"]
            for mode in ("final_answer", "last_line", "full_response")
        }
        assert extracted == {
            "final_answer": "Par",
            "last_line": "Final line",
            "full_response": "Answer: Par\nis\nParis is right.\nFinal line",
        }

    def test_lenient_stages_over_http(self, gym_servers: RunningServers):
        cases = [
            ("Answer: 1,234", "1234", 1.0),
            ("Answer: 1,234,567", "1234567", 0.98),  # the single-pass separator removal misses it
            ("Answer: Texas", "TX", 1.0),
            ("Answer: 5 meters", "5", 0.0),  # the unit regex deletes the bare m, "eters" stays
            ("Answer: \\text{5 km}", "5", 1.0),
        ]
        for text, expected, reward in cases:
            assert verify(gym_servers, text, expected=expected).json()["reward"] == reward, text


class TestStringMatchInWorkers(ResourcesServerTests):
    """The same contract with every grading done in a worker process, and its hard time limit."""

    server_type = "string_match"
    plugins = [gym_string_match.plugin]
    example_data = EXAMPLES
    options = {"inline_max_chars": 0, "verify_timeout_s": 1.0, "verify_workers": 1}

    def test_workers_give_the_inline_verdicts(self, gym_servers: RunningServers):
        body = verify(gym_servers, "Answer: 80 km", expected="80").json()
        assert body == verdict(0.98, "80 km", "near_match", "soft_numeric", expected="80")

    def test_a_pathological_answer_times_out_with_reward_zero(self, gym_servers: RunningServers):
        # 20,000 nested \text{ wrappers: each removal rescans the whole string (quadratic, minutes).
        text = "\\text{" * 20_000 + "x" + "}" * 20_000
        body = verify(gym_servers, text, extraction_mode="full_response").json()
        assert body == verdict(0.0, None, "timeout")
        # The worker was replaced: the next answer is graded.
        assert verify(gym_servers, "Answer: paris").json()["reward"] == 1.0


def test_aggregate_metrics_count_string_match_rows_only():
    rows = [
        {"environment": "string_match", "reward": 1.0, "extracted_answer": "Paris", "extraction_mode": "boxed"},
        {"environment": "string_match", "reward": 0.98, "extracted_answer": "80 km"},
        {
            "environment": "string_match",
            "reward": 0.0,
            "extracted_answer": None,
            "extraction_mode": "boxed",
            "reason": "timeout",
        },
        {"environment": "string_match", "reward": 0.0, "extracted_answer": "Rome", "extraction_mode": None},
        {"environment": "math", "reward": 1.0, "extracted_answer": "4"},
    ]
    assert plugins().aggregate_metrics(rows) == {
        "string_match/no_answer": 0.25,
        "string_match/exact_match_rate": 0.25,
        "string_match/near_match_rate": 0.25,
        "string_match/timeout_rate": 0.25,
        "string_match/boxed/mean_reward": 0.5,
        "string_match/final_answer/mean_reward": 0.49,
    }
    assert plugins().aggregate_metrics([{"environment": "math", "reward": 1.0}]) == {}


async def test_example_config_gives_every_example_its_reward():
    # The scripted model answers each row with its conformance response (the script rides in metadata).
    manager = plugins(*first_party("scripted", "simple_agent"))
    with running_servers(yaml.safe_load(CONFIG.read_text()), plugins=manager) as config:
        async with ServerClient(config) as client:
            for row in read_rows(EXAMPLES):
                script = [{"text": row["conformance"]["response"]}]
                params = {**row["responses_create_params"], "metadata": {"scripted_turns": json.dumps(script)}}
                result = await client.post("agent", "/run", {**row, "responses_create_params": params})
                assert result["reward"] == row["conformance"]["reward"], result
