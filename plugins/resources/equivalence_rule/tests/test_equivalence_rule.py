"""The equivalence_rule server over real HTTP: gym's conformance kit under each grading rule, the
verdicts and their edge cases, bad rows, the time limit, the aggregate metrics and the example
config played by the scripted model.

The plugin is registered explicitly rather than found through its entry point, so these tests also
run from a source checkout. The test of the example config needs gym's first-party plugins too; it
is skipped where they are not installed (in the plugin's own venv, say).
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml

from gym_core import PluginManager, ServerClient
from gym_core.config import load_config
from gym_core.errors import ConfigError
from gym_core.testing import (
    ResourcesServerTests,
    RunningServers,
    assistant_response,
    first_party,
    plugin_manager,
    read_rows,
    running_servers,
)

import gym_equivalence_rule.plugin
from gym_equivalence_rule.scoring import score

PACKAGE = Path(__file__).resolve().parents[1]
EXAMPLES = PACKAGE / "data" / "example.jsonl"
SCRIPTED_CONFIG = PACKAGE / "configs" / "equivalence_rule_scripted.yaml"


def message(*parts: dict) -> dict:
    return {"type": "message", "role": "assistant", "status": "completed", "content": list(parts)}


def text(value: str) -> dict:
    return {"type": "output_text", "text": value, "annotations": []}


# Each example row's `conformance` field (which equivalence_rule ignores) holds the response the
# tests send (its text, or a whole response) and the `exact` reward it must get: right answers
# written differently (h01: another case and spacing; h02: split over two output_text parts after a
# reasoning item), wrong ones (h03: wrong text with the right hash; h04: cut short) and malformed
# outputs (h05: only a function call; h06: only a refusal, which is not output_text).


def graded_text(row: dict) -> str:
    """The text of the row's conformance response that is graded: its output_text parts, joined."""
    response = row["conformance"]["response"]
    if isinstance(response, str):
        return response
    messages = [item for item in response["output"] if item["type"] == "message"]
    return "".join(part["text"] for m in messages for part in m["content"] if part["type"] == "output_text")


def plugins(*others: object) -> PluginManager:
    """A plugin manager holding this plugin and ``others``."""
    return plugin_manager(gym_equivalence_rule.plugin, *others)


def verify_body(response_text: str | None, expected: Any = "the answer", **extra: Any) -> dict:
    row = {"responses_create_params": {"input": [{"role": "user", "content": "q"}]}, **extra}
    if expected is not ...:
        row["expected_answer"] = expected
    response = assistant_response(response_text) if response_text is not None else {"output": []}
    return {**row, "response": response}


class EquivalenceRuleKit(ResourcesServerTests):
    """The kit on the example rows, each answered with its conformance response; under a rule other
    than ``exact``, the reward it must get is that rule's score of the graded text."""

    server_type = "equivalence_rule"
    plugins = [gym_equivalence_rule.plugin]
    example_data = EXAMPLES
    grading_rule = "exact"

    def expected_reward(self, row):
        if self.grading_rule == "exact":
            return super().expected_reward(row)  # the row's conformance reward
        return score(self.grading_rule, graded_text(row), row["expected_answer"])


class TestExact(EquivalenceRuleKit):
    def test_every_example_row_has_a_response_and_its_exact_reward(self):
        rows = read_rows(EXAMPLES)
        assert all(
            row["conformance"]["reward"] == score("exact", graded_text(row), row["expected_answer"]) for row in rows
        )
        assert {row["conformance"]["reward"] for row in rows} == {0.0, 1.0}

    def test_verify_answers_reward_score_and_reason(self, gym_servers: RunningServers):
        caller = gym_servers.caller()
        right = caller.post("/verify", verify_body(" The  ANSWER\n", "the answer")).json()
        wrong = caller.post("/verify", verify_body("the answer.", "the answer")).json()
        empty = caller.post("/verify", verify_body(None, "the answer")).json()
        assert right == {"reward": 1.0, "equivalence_score": 1.0, "reason": "match"}
        assert wrong == {"reward": 0.0, "equivalence_score": 0.0, "reason": "no_match"}
        assert empty == {"reward": 0.0, "equivalence_score": 0.0, "reason": "empty_response"}

    def test_empty_answer_matches_an_empty_response(self, gym_servers: RunningServers):
        reply = gym_servers.caller().post("/verify", verify_body("   ", "")).json()
        assert reply == {"reward": 1.0, "equivalence_score": 1.0, "reason": "match"}

    def test_rows_with_nulls_and_extra_keys_are_accepted(self, gym_servers: RunningServers):
        body = verify_body(
            "ok",
            "OK",
            question="q?",
            dataset="mrcr.sdg_ns_out+S.0-8k",
            source="mrcr",
            hashid="abc",
            context_length=8192,
            anything_else={"nested": [1, None]},
        )
        body["responses_create_params"].update(temperature=None, tools=None, reasoning=None, max_output_tokens=None)
        body["response"].update(usage=None, incomplete_details=None, instructions=None)
        reply = gym_servers.caller().post("/verify", body)
        assert reply.status == 200, reply.text
        assert reply.json()["reward"] == 1.0

    def test_a_row_without_expected_answer_gets_a_422_naming_it(self, gym_servers: RunningServers):
        reply = gym_servers.caller().post("/verify", verify_body("x", ...))
        assert reply.status == 422, reply.text
        assert "expected_answer" in reply.json()["error"]["message"]

    @pytest.mark.parametrize("bad", [None, 42, ["a"]])
    def test_an_expected_answer_that_is_not_a_string_gets_a_422(self, gym_servers: RunningServers, bad):
        reply = gym_servers.caller().post("/verify", verify_body("42", bad))
        assert reply.status == 422, reply.text
        assert "expected_answer" in reply.json()["error"]["message"]

    def test_long_exact_comparisons_go_through_the_worker_pool(self, gym_servers: RunningServers):
        answer = "lorem ipsum dolor sit amet " * 5000  # beyond what is compared inline
        caller = gym_servers.caller()
        right = caller.post("/verify", verify_body(answer.upper(), answer)).json()
        wrong = caller.post("/verify", verify_body(answer + "!", answer)).json()
        assert right == {"reward": 1.0, "equivalence_score": 1.0, "reason": "match"}
        assert wrong["reward"] == 0.0
        assert gym_servers.server.pool.pids  # a worker did the work

    def test_default_grading_rule_is_exact(self, gym_servers: RunningServers):
        assert gym_servers.server.config.grading_rule == "exact"

    def test_no_tools(self, gym_servers: RunningServers):
        assert gym_servers.caller().get("/tools").json() == []


class TestSeqMatch(EquivalenceRuleKit):
    options = {"grading_rule": "seq_match", "verify_workers": 1}
    grading_rule = "seq_match"

    def test_partial_similarity(self, gym_servers: RunningServers):
        reply = gym_servers.caller().post("/verify", verify_body("ABCD", "bcde")).json()
        assert reply == {"reward": 0.75, "equivalence_score": 0.75, "reason": "partial"}

    def test_autojunk_quirk_over_http(self, gym_servers: RunningServers):
        # One extra leading character hides a 300-character answer of popular characters, as in difflib.
        reply = gym_servers.caller().post("/verify", verify_body("x" + "a" * 300, "A" * 300)).json()
        assert reply == {"reward": 0.0, "equivalence_score": 0.0, "reason": "no_match"}

    def test_example_rows_get_partial_credit_where_exact_gives_none(self, gym_servers: RunningServers):
        row = next(r for r in read_rows(EXAMPLES) if r["hashid"] == "h04-copy-line")
        reply = gym_servers.caller().post("/verify", {**row, "response": self.response_for(row)}).json()
        assert 0.0 < reply["reward"] < 1.0 and reply["reason"] == "partial"


class TestWeightedSeqMatch(EquivalenceRuleKit):
    options = {"grading_rule": "weighted_seq_match", "verify_workers": 1}
    grading_rule = "weighted_seq_match"

    def test_prefix_bonus(self, gym_servers: RunningServers):
        caller = gym_servers.caller()
        right_start = caller.post("/verify", verify_body("ABCDEFGHIJ xyz", "abcdefghij")).json()
        assert right_start["reward"] == pytest.approx(0.85 * 20 / 24 + 0.15)
        assert right_start["equivalence_score"] == right_start["reward"]
        # The same characters, the hash moved to the end: the prefix bonus is lost.
        moved = caller.post("/verify", verify_body("xyzabcdefghij", "abcdefghij")).json()
        assert moved["reward"] < right_start["reward"]

    def test_empty_answer_gives_only_the_prefix_weight(self, gym_servers: RunningServers):
        reply = gym_servers.caller().post("/verify", verify_body("something", "")).json()
        assert reply["reward"] == pytest.approx(0.15) and reply["reason"] == "partial"


# A response difflib needs seconds for (a long repetitive response against a 199-character
# answer, below autojunk's threshold).
SLOW_ANSWER = ("a b c " * 40)[:199]
SLOW_RESPONSE = "c b a " * 10_000


class TestTimeLimit(EquivalenceRuleKit):
    options = {"grading_rule": "seq_match", "verify_timeout_s": 0.5, "verify_workers": 1}
    grading_rule = "seq_match"

    def test_a_pathological_response_scores_0_with_reason_timeout(self, gym_servers: RunningServers):
        caller = gym_servers.caller()
        before = gym_servers.server.pool.pids
        reply = caller.post("/verify", verify_body(SLOW_RESPONSE, SLOW_ANSWER)).json()
        assert reply == {"reward": 0.0, "equivalence_score": 0.0, "reason": "timeout"}
        assert gym_servers.server.pool.pids != before  # the stuck worker was replaced
        # The server keeps scoring.
        assert caller.post("/verify", verify_body("abcd", "bcde")).json()["reward"] == 0.75

    def test_the_server_answers_while_a_comparison_runs(self, gym_servers: RunningServers):
        done = threading.Event()
        verdicts: list[dict] = []

        def slow_verify() -> None:
            verdicts.append(gym_servers.caller().post("/verify", verify_body(SLOW_RESPONSE, SLOW_ANSWER)).json())
            done.set()

        worker = threading.Thread(target=slow_verify)
        worker.start()
        try:
            health = gym_servers.caller().get("/health")
            # Answered before the comparison ended: the event loop was free.
            assert health.status == 200 and not done.is_set()
        finally:
            worker.join(30)
        assert verdicts[0]["reason"] == "timeout"


# ---------------------------------------------------------------- options


def test_an_unknown_grading_rule_is_a_config_error():
    with pytest.raises(ConfigError) as error:
        load_config(
            base={"env": {"plugin": "equivalence_rule", "grading_rule": "fuzzy"}},
            env_file=None,
            server_types=plugins().servers(),
        )
    assert "grading_rule" in str(error.value)


# ---------------------------------------------------------------- aggregate metrics


def test_aggregate_metrics_summarise_this_environments_rows():
    manager = plugins()
    rows = [
        {"environment": "equivalence_rule", "reward": 1.0, "equivalence_score": 1.0, "reason": "match"},
        {"environment": "equivalence_rule", "reward": 0.5, "equivalence_score": 0.5, "reason": "partial"},
        {"environment": "equivalence_rule", "reward": 0.0, "equivalence_score": 0.0, "reason": "timeout"},
        {"environment": "math", "reward": 1.0, "equivalence_score": 7.0},
    ]
    assert manager.aggregate_metrics(rows) == {
        "equivalence_rule/mean/equivalence_score": pytest.approx(0.5),
        "equivalence_rule/std/equivalence_score": pytest.approx((1 / 6) ** 0.5),
        "equivalence_rule/min/equivalence_score": 0.0,
        "equivalence_rule/max/equivalence_score": 1.0,
        "equivalence_rule/median/equivalence_score": 0.5,
        "equivalence_rule/full_match_rate": pytest.approx(1 / 3),
    }
    assert manager.aggregate_metrics([{"environment": "math", "reward": 1.0}]) == {}
    # Rows of this environment without a score (none should exist) contribute nothing.
    assert manager.aggregate_metrics([{"environment": "equivalence_rule", "reward": 0.0}]) == {}


# ---------------------------------------------------------------- the example config, end to end


async def test_scripted_config_scores_every_example():
    # The scripted model gives the expected answer in upper case: every row matches exactly.
    manager = plugins(*first_party("scripted", "simple_agent"))
    config = yaml.safe_load(SCRIPTED_CONFIG.read_text())
    with running_servers(config, plugins=manager) as running:
        async with ServerClient(running) as client:
            for task in read_rows(EXAMPLES):
                script = [{"text": task["expected_answer"].upper()}]
                params = {**task["responses_create_params"], "metadata": {"scripted_turns": json.dumps(script)}}
                result = await client.post("agent", "/run", {**task, "responses_create_params": params})
                assert (result["reward"], result["equivalence_score"], result["reason"]) == (1.0, 1.0, "match"), result
