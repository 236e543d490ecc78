"""The equivalence_llm_judge server over real HTTP, with the scripted model as its judge: gym's
conformance kit on the example rows, then every verify rule of §17 (question, regex choice, length
skip, extraction failure, last-item verdicts, lc_judge labels, swap check, full-generation rescue,
judge failures), and the example config end to end through the simple agent.

The judge's ``rules`` make its verdicts exact: it says [[A=B]] when the first line of the candidate
answer contains the gold answer, [[A!=B]] otherwise; questions holding a marker word (FAIL_JUDGE,
CALL_A_TOOL, NO_LABEL) get a failure or an odd reply. Several instances of the environment, each
with other options, share that judge.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

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

import gym_equivalence_llm_judge.plugin
import gym_scripted.plugin

PACKAGE = Path(__file__).resolve().parents[1]
EXAMPLES = PACKAGE / "data" / "example.jsonl"
CONFIG = PACKAGE / "configs" / "equivalence_llm_judge.yaml"
PAREN_REGEX = r"\(\((.*?)\)\)"
LONG_GOLD = "The " + "very " * 30 + "long gold answer"  # > 120 characters
# The first line of the candidate answer holds the gold answer (the example config's rule).
SAME = "<reference_answer>\n(.+?)\n</reference_answer>\n\n<candidate_answer>\n[^\n]*?\\1"

JUDGE_RULES = [
    {"match": "FAIL_JUDGE", "error_status": 500},
    {"match": "CALL_A_TOOL", "text": "[[A=B]]", "tool_calls": [{"name": "lookup", "arguments": {}}]},
    {"match": "NO_LABEL", "text": "I cannot decide."},
    # Equal in this order only: the swapped question is not equal.
    {
        "match": "<reference_answer>\nalpha-swap\n</reference_answer>\n\n<candidate_answer>\nbeta-swap\n",
        "text": "Fine. [[A=B]]",
    },
    {"match": f"(?s){SAME}.*Reply with one word only", "text": "CORRECT"},
    {"match": "Reply with one word only: CORRECT or INCORRECT", "text": "INCORRECT"},
    {"match": f"(?s){SAME}", "text": "Same answer. [[A=B]]"},
    {"match": ".", "text": "Different answers. [[A!=B]]"},
]
ENV = {"plugin": "equivalence_llm_judge", "judge_model_server": "judge", "judge_max_attempts": 2}
LC = {
    "judge_prompt_template_fpath": "prompt_templates/lc_judge.txt",
    "judge_equal_label": "CORRECT",
    "judge_not_equal_label": "INCORRECT",
    "question_extract_regex": r"^QUESTION:\s*(.*)$|</text>\n\n(.*)$",
    "msg_extraction_failure": "",
}


def task(question: Any = "q", expected: Any = "gold", regex: str | None = None, **fields: Any) -> dict:
    """A row: ``question`` is the input (a string, or a list of input items)."""
    items = question if isinstance(question, list) else [{"role": "user", "content": question}]
    row = {"responses_create_params": {"input": items}, "expected_answer": expected, **fields}
    if regex is not None:
        row["template_metadata"] = {"output_regex": regex}
    return row


def verify(servers: RunningServers, instance: str, row: dict, answer: str | dict) -> dict:
    response = assistant_response(answer) if isinstance(answer, str) else answer
    reply = servers.caller(instance).post("/verify", {**row, "response": response})
    assert reply.status == 200, reply.text[:1000]
    return reply.json()


def prompts(verdict: dict) -> list[str]:
    """The user message of each judge call."""
    return [e["responses_create_params"]["input"][-1]["content"] for e in verdict["judge_evaluations"]]


def block(gold: str, candidate: str) -> str:
    """The gold and candidate answers as the shipped templates carry them."""
    return f"<reference_answer>\n{gold}\n</reference_answer>\n\n<candidate_answer>\n{candidate}\n</candidate_answer>"


def labels(verdict: dict) -> list[str | None]:
    return [e["verdict_label"] for e in verdict["judge_evaluations"]]


class TestEquivalenceLlmJudge(ResourcesServerTests):
    instances = {
        "judge": {"plugin": "scripted", "rules": JUDGE_RULES},
        "equivalence_llm_judge": ENV,
        "swap": {
            **ENV,
            "check_twice_swap": True,
            "reward_if_swap_fails": 0.25,
            "judge_system_message": "You grade answers.",
            "judge_responses_create_params": {"max_output_tokens": 77, "input": [{"role": "user", "content": "gone"}]},
        },
        "lc": {**ENV, **LC},
        "config_regex": {**ENV, "response_extract_regex": r"ANSWER=(\S+)"},
        "no_per_row": {**ENV, "response_extract_regex": r"ANSWER=(\S+)", "use_per_record_regex": False},
        "yaml_values": {
            **ENV,
            "extraction_length_threshold": None,
            "check_full_generation_on_fail": False,
            "reward_if_full_generation_succeeds": 0.0,
        },
        "in_worker": {**ENV, "inline_max_chars": 0, "verify_timeout_s": 1.0, "verify_workers": 1},
    }
    instance = "equivalence_llm_judge"
    plugins = [gym_equivalence_llm_judge.plugin, gym_scripted.plugin]
    example_data = EXAMPLES

    def test_example_rows_cover_every_outcome(self):
        rows = read_rows(EXAMPLES)
        assert len(rows) >= 5
        assert {row["conformance"]["reward"] for row in rows} == {0.0, 0.5, 1.0}

    # ------------------------------------------------------------ the question

    def test_the_question_is_the_last_user_message(self, gym_servers: RunningServers):
        items = [
            {"role": "user", "content": "an earlier question"},
            {"role": "assistant", "content": "an earlier answer"},
            {
                "role": "user",
                "content": [{"type": "input_text", "text": "part one"}, {"type": "input_text", "text": "part two"}],
            },
        ]
        verdict = verify(gym_servers, "equivalence_llm_judge", task(items, "Na"), "Na")
        assert f"<question>\npart one\npart two\n</question>\n\n{block('Na', 'Na')}" in prompts(verdict)[0]
        assert verdict["reward"] == 1.0

    def test_question_extract_regex(self, gym_servers: RunningServers):
        documents = {
            "<text>A long document about the sky.</text>\n\nWhat colour is the sky?": "What colour is the sky?",
            "Some context.\nQUESTION:  Which planet is red?": "Which planet is red?",
            "No marker, so all of this is the question.": "No marker, so all of this is the question.",
        }
        for text, question in documents.items():
            verdict = verify(gym_servers, "lc", task(text, "blue"), "blue")
            assert f"<question>\n{question}\n</question>\n\n{block('blue', 'blue')}" in prompts(verdict)[0]

    # ------------------------------------------------------------ which regex

    def test_the_row_regex_replaces_the_config_regex(self, gym_servers: RunningServers):
        answer = "ANSWER=wrong but ((right))"
        by_row = verify(gym_servers, "config_regex", task(expected="right", regex=PAREN_REGEX), answer)
        assert (by_row["extracted_answer"], by_row["reward"]) == ("right", 1.0)
        by_config = verify(gym_servers, "config_regex", task(expected="right"), answer)
        assert by_config["extracted_answer"] == "wrong"
        # No rescue without a row regex: one judge call.
        assert (by_config["reward"], len(by_config["judge_evaluations"]), by_config["reason"]) == (0.0, 1, "not_equal")
        ignored = verify(gym_servers, "no_per_row", task(expected="right", regex=PAREN_REGEX), answer)
        assert (ignored["extracted_answer"], ignored["reward"]) == ("wrong", 0.0)

    def test_no_match_sends_the_whole_message(self, gym_servers: RunningServers):
        verdict = verify(
            gym_servers, "equivalence_llm_judge", task(expected="9.8", regex=PAREN_REGEX), "about 9.8 m/s^2"
        )
        assert (verdict["extracted_answer"], verdict["reward"]) == ("about 9.8 m/s^2", 1.0)

    def test_a_long_gold_answer_skips_the_row_regex_the_rescue_and_the_swap(self, gym_servers: RunningServers):
        row = task(expected=LONG_GOLD, regex=PAREN_REGEX)
        right = verify(gym_servers, "equivalence_llm_judge", row, f"((short)) {LONG_GOLD}")
        assert (right["extracted_answer"], right["reward"]) == (f"((short)) {LONG_GOLD}", 1.0)
        wrong = verify(gym_servers, "equivalence_llm_judge", row, "((short)) something else")
        assert (wrong["reward"], wrong["reason"], len(wrong["judge_evaluations"])) == (0.0, "not_equal", 1)
        no_swap = verify(gym_servers, "swap", row, f"((short)) {LONG_GOLD}")
        assert (no_swap["reward"], len(no_swap["judge_evaluations"])) == (1.0, 1)
        # Without a threshold (the shipped yaml), the row regex applies to the same row.
        regex = verify(gym_servers, "yaml_values", row, f"((short)) {LONG_GOLD}")
        assert (regex["extracted_answer"], regex["reward"]) == ("short", 0.0)

    # ------------------------------------------------------------ no answer

    def test_msg_extraction_failure_when_there_is_no_assistant_text(self, gym_servers: RunningServers):
        reasoning_only = {"output": [{"type": "reasoning", "summary": [{"type": "summary_text", "text": "gold"}]}]}
        for response in (reasoning_only, {"output": []}, assistant_response("   ")):
            verdict = verify(gym_servers, "equivalence_llm_judge", task(expected="gold"), response)
            assert "<candidate_answer>\n[NO VALID ANSWER EXTRACTED]\n</candidate_answer>" in prompts(verdict)[0]
            assert (verdict["extracted_answer"], verdict["reward"]) == (None, 0.0)
        lc = verify(gym_servers, "lc", task("QUESTION: q", expected="gold"), {"output": []})
        assert f"{block('gold', '')}\n\nReply" in prompts(lc)[0]
        assert (lc["extracted_answer"], lc["reward"], labels(lc)) == (None, 0.0, ["INCORRECT"])

    def test_only_the_last_assistant_message_is_graded(self, gym_servers: RunningServers):
        response = {
            "output": [
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "gold"}]},
                {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c1", "output": "gold"},
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "lead"}]},
            ]
        }
        verdict = verify(gym_servers, "equivalence_llm_judge", task(expected="gold"), response)
        assert (verdict["extracted_answer"], verdict["reward"]) == ("lead", 0.0)

    # ------------------------------------------------------------ reading the verdict

    def test_a_reply_ending_with_a_non_message_item_is_not_equal(self, gym_servers: RunningServers):
        # The judge's reply is a message saying [[A=B]] followed by a function call.
        verdict = verify(gym_servers, "equivalence_llm_judge", task("CALL_A_TOOL: q", "x"), "x")
        output = verdict["judge_evaluations"][0]["response"]["output"]
        assert [item["type"] for item in output] == ["message", "function_call"]
        assert (verdict["reward"], labels(verdict), verdict["reason"]) == (0.0, [None], "not_equal")

    def test_a_reply_without_a_label_is_not_equal(self, gym_servers: RunningServers):
        verdict = verify(gym_servers, "equivalence_llm_judge", task("NO_LABEL: q", "x"), "x")
        assert (verdict["reward"], labels(verdict)) == (0.0, [None])

    def test_lc_judge_correct_and_incorrect(self, gym_servers: RunningServers):
        right = verify(gym_servers, "lc", task("QUESTION: capital of France?", "Paris"), "Paris")
        assert (right["reward"], labels(right)) == (1.0, ["CORRECT"])
        # "INCORRECT" holds "CORRECT", but the not-equal label occurs first: not equal.
        wrong = verify(gym_servers, "lc", task("QUESTION: capital of France?", "Paris"), "Rome")
        assert wrong["judge_evaluations"][0]["response"]["output"][-1]["content"][-1]["text"] == "INCORRECT"
        assert (wrong["reward"], labels(wrong)) == (0.0, ["INCORRECT"])

    # ------------------------------------------------------------ swap check

    def test_the_swap_check(self, gym_servers: RunningServers):
        row = task(expected="alpha-swap")
        swapped = verify(gym_servers, "swap", row, "beta-swap")
        assert (swapped["reward"], swapped["reason"], labels(swapped)) == (0.25, "swap_failed", ["[[A=B]]", "[[A!=B]]"])
        first, second = prompts(swapped)
        assert block("alpha-swap", "beta-swap") in first
        assert block("beta-swap", "alpha-swap") in second
        params = swapped["judge_evaluations"][0]["responses_create_params"]
        assert params["input"][0] == {"role": "system", "content": "You grade answers."}
        assert params["max_output_tokens"] == 77 and len(params["input"]) == 2  # the base input is replaced
        both = verify(gym_servers, "swap", task(expected="Na"), "Na")
        assert (both["reward"], both["reason"], len(both["judge_evaluations"])) == (1.0, "equal", 2)
        # Off by default: one call, reward 1.
        once = verify(gym_servers, "equivalence_llm_judge", row, "beta-swap")
        assert (once["reward"], len(once["judge_evaluations"])) == (1.0, 1)
        assert [m["role"] for m in once["judge_evaluations"][0]["responses_create_params"]["input"]] == ["user"]

    # ------------------------------------------------------------ full-generation rescue

    def test_the_full_generation_rescue(self, gym_servers: RunningServers):
        row = task(expected="6", regex=PAREN_REGEX)
        text = "((12)) is its mass number; it has 6 protons."
        rescued = verify(gym_servers, "equivalence_llm_judge", row, text)
        assert (rescued["reward"], rescued["reason"], rescued["extracted_answer"]) == (
            0.5,
            "full_generation_equal",
            "12",
        )
        assert f"<candidate_answer>\n{text}\n</candidate_answer>" in prompts(rescued)[1]
        failed = verify(gym_servers, "equivalence_llm_judge", row, "((12)) is my answer.")
        assert (failed["reward"], failed["reason"], len(failed["judge_evaluations"])) == (
            0.0,
            "full_generation_not_equal",
            2,
        )
        off = verify(gym_servers, "yaml_values", row, text)
        assert (off["reward"], off["reason"], len(off["judge_evaluations"])) == (0.0, "not_equal", 1)

    # ------------------------------------------------------------ failures and bad rows

    def test_a_failed_judge_fails_the_verify(self, gym_servers: RunningServers):
        reply = gym_servers.caller().post(
            "/verify", {**task("FAIL_JUDGE: q", "x"), "response": assistant_response("x")}
        )
        assert reply.status == 502, reply.text[:500]
        assert reply.json()["error"]["type"] == "judge_failed"
        assert "reward" not in reply.json()

    def test_rows_with_nulls_or_no_gold_answer_are_accepted(self, gym_servers: RunningServers):
        row = {
            "responses_create_params": {"input": "q"},
            "expected_answer": None,
            "template_metadata": None,
            "metadata": {"expected_answer": "meta-gold"},
            "options": None,
            "uuid": None,
        }
        verdict = verify(gym_servers, "equivalence_llm_judge", row, "meta-gold")
        assert (verdict["expected_answer"], verdict["reward"]) == ("meta-gold", 1.0)
        bare = verify(gym_servers, "equivalence_llm_judge", {"responses_create_params": {"input": "q"}}, "x")
        assert bare["expected_answer"] == ""

    def test_a_row_field_of_the_wrong_type_is_a_422_naming_it(self, gym_servers: RunningServers):
        body = {**task(), "template_metadata": "not an object", "response": assistant_response("x")}
        reply = gym_servers.caller().post("/verify", body)
        assert reply.status == 422, reply.text[:500]
        assert "template_metadata" in reply.json()["error"]["message"]

    # ------------------------------------------------------------ long texts in a worker

    def test_long_texts_are_extracted_in_a_worker(self, gym_servers: RunningServers):
        verdict = verify(gym_servers, "in_worker", task(expected="6", regex=PAREN_REGEX), "x" * 500 + " ((6))")
        assert (verdict["extracted_answer"], verdict["reward"]) == ("6", 1.0)

    def test_a_pathological_regex_times_out_without_a_judge_call(self, gym_servers: RunningServers):
        row = task(expected="a", regex=r"(a+)+$")
        verdict = verify(gym_servers, "in_worker", row, "a" * 40 + "b")
        assert (verdict["reward"], verdict["reason"], verdict["judge_evaluations"]) == (0.0, "timeout", [])
        assert verdict["extracted_answer"] is None
        # The server is still fine afterwards.
        again = verify(gym_servers, "in_worker", task(expected="6", regex=PAREN_REGEX), "((6))")
        assert again["reward"] == 1.0


# ---------------------------------------------------------------- the example config, end to end


async def test_example_config_through_the_simple_agent():
    # The scripted policy answers each example row with its conformance response (as a script in metadata).
    manager: PluginManager = plugin_manager(gym_equivalence_llm_judge.plugin, *first_party("scripted", "simple_agent"))
    config = yaml.safe_load(CONFIG.read_text())
    with running_servers(config, plugins=manager) as running:
        async with ServerClient(running) as client:
            for row in read_rows(EXAMPLES):
                answer = row["conformance"]["response"]
                if not isinstance(answer, str):
                    continue  # a whole Responses object: not something a scripted turn can say
                params = {
                    **row["responses_create_params"],
                    "metadata": {"scripted_turns": json.dumps([{"text": answer}])},
                }
                result = await client.post("agent", "/run", {**row, "responses_create_params": params})
                assert result["reward"] == row["conformance"]["reward"], result
                assert result["judge_evaluations"], result
