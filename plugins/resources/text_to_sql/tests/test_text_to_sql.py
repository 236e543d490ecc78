"""Tests of the text_to_sql plugin over real HTTP, servers on loopback: gym's conformance kit for a
resources server, then each verify rule against judges whose verdicts are exact (the scripted model
with rules, and two small judge servers defined here), then the scripted config end to end.

The plugins are registered explicitly rather than found through their entry points, so these tests
also run from a source checkout. The test of the example config needs gym's simple agent too; it is
skipped where it is not installed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from gym_core import ModelServer, ServerClient, hookimpl
from gym_core.schemas import Message, OutputText, Reasoning, Response, ResponseCreateParams, SummaryText
from gym_core.testing import (
    ResourcesServerTests,
    RunningServers,
    assistant_response,
    first_party,
    plugin_manager,
    read_rows,
    running_servers,
)

import gym_scripted.plugin
import gym_text_to_sql.plugin
from gym_text_to_sql.config import DEFAULT_JUDGE_SYSTEM_MESSAGE

PACKAGE = Path(__file__).resolve().parents[1]
EXAMPLES = PACKAGE / "data" / "example.jsonl"
# The environment and its scripted judge (the benchmark's config), then a scripted policy and the agent.
BENCH_CONFIG = yaml.safe_load((PACKAGE / "configs" / "text_to_sql_bench.yaml").read_text())
SCRIPTED_CONFIG = {**BENCH_CONFIG, **yaml.safe_load((PACKAGE / "configs" / "text_to_sql_scripted.yaml").read_text())}

GOLD = "SELECT name FROM pet WHERE age > 3"
TASK = {
    "responses_create_params": {"input": [{"role": "user", "content": "Which pets are older than 3?"}]},
    "sql": GOLD,
    "sql_dialect": "sqlite",
    "sql_context": "CREATE TABLE pet (id INTEGER PRIMARY KEY, name TEXT, age INTEGER);",
    "sql_prompt": "Which pets are older than 3?",
}
# The cheapest-product query the scripted judge calls equal as B and not equal as A (see the bench config).
UNSTABLE = "SELECT name FROM product ORDER BY price ASC LIMIT 1"


class ReadingJudge(ModelServer):
    """A judge whose replies spread over several output items, chosen by a marker in the question:
    what text_to_sql reads of a judge reply (every assistant message, reasoning left out)."""

    async def responses(self, params: ResponseCreateParams) -> Response:
        prompt = "\n".join(str(item.content) for item in params.input if isinstance(item, Message))

        def message(*texts: str) -> Message:
            return Message(role="assistant", status="completed", content=[OutputText(text=t) for t in texts])

        if "<<label-in-a-later-message>>" in prompt:
            output: list[Any] = [message("I compared both queries."), message("  ", "Verdict: [[A=B]]")]
        elif "<<reasoning-says-equal>>" in prompt:
            output = [Reasoning(summary=[SummaryText(text="[[A=B]]")]), message("They differ. [[A!=B]]")]
        else:
            output = [message("No opinion.")]
        return Response(model="reading-judge", output=output)


class GarbageJudge(ModelServer):
    """A judge that answers 200 with something that is not a Responses object."""

    async def responses(self, params: ResponseCreateParams) -> Any:
        return {"output": "not a list of items"}


class HelperJudges:
    @hookimpl
    def gym_register_servers(self, register):
        register(name="reading_judge", kind="model", server=ReadingJudge)
        register(name="garbage_judge", kind="model", server=GarbageJudge)


def environment(judge: str = "judge", **options: Any) -> dict[str, Any]:
    """A text_to_sql instance of the scripted config, asking ``judge``, with ``options``."""
    # A short extraction limit, so that the timeout test is quick; one worker per instance.
    base = {**BENCH_CONFIG["text_to_sql"], "extract_timeout_s": 1.0, "extract_workers": 1}
    return {**base, "judge_model_server": judge, **options}


def answer(sql: str) -> dict[str, Any]:
    return assistant_response(f"Here it is:\n```sql\n{sql}\n```")


class TestTextToSql(ResourcesServerTests):
    plugins = [gym_text_to_sql.plugin, gym_scripted.plugin, HelperJudges()]
    instances = {
        "judge": BENCH_CONFIG["judge"],
        "failing_judge": {"plugin": "scripted", "rules": [{"match": "", "error_status": 500}]},
        "reading_judge": {"plugin": "reading_judge"},
        "garbage_judge": {"plugin": "garbage_judge"},
        "text_to_sql": environment(),
        "no_swap": environment(check_twice_swap=False),
        "swap_penalty": environment(reward_if_swap_fails=-1.0),
        "failing": environment("failing_judge", judge_max_attempts=2),
        "garbage": environment("garbage_judge", judge_max_attempts=1),
        "reading": environment("reading_judge"),
    }
    instance = "text_to_sql"
    example_data = EXAMPLES
    # Each example row's `conformance` field (which text_to_sql ignores) holds the answer the kit
    # sends and the reward it must get with the scripted judge of the config.

    def verify(self, servers: RunningServers, task: dict, response: dict, instance: str | None = None):
        return servers.caller(instance).post("/verify", {**task, "response": response})

    # --- the verdict --------------------------------------------------------------------------

    def test_equal_both_ways_scores_one_with_every_field(self, gym_servers: RunningServers):
        verdict = self.verify(gym_servers, {**TASK, "uuid": "pets-1"}, answer(GOLD)).json()
        evaluations = verdict.pop("judge_evaluations")
        assert verdict == {
            "reward": 1.0, "model_output": f"Here it is:\n```sql\n{GOLD}\n```", "extracted_sql": GOLD,
            "judge_passed": True, "failure_reason": "none", "sql_dialect": "sqlite", "sql": GOLD,
            "sql_context": TASK["sql_context"], "sql_prompt": TASK["sql_prompt"], "uuid": "pets-1",
        }  # fmt: skip
        assert [e["verdict_label"] for e in evaluations] == ["[[A=B]]", "[[A=B]]"]

    def test_judge_evaluations_record_each_call(self, gym_servers: RunningServers):
        first, second = self.verify(gym_servers, TASK, answer(GOLD)).json()["judge_evaluations"]
        assert set(first) == set(second) == {"responses_create_params", "response", "verdict_label"}
        params = first["responses_create_params"]
        # The config's generation parameters, and input = the rubric, then the filled prompt.
        assert (params["max_output_tokens"], params["temperature"]) == (512, 0.0)
        assert params["input"][0] == {"role": "system", "content": DEFAULT_JUDGE_SYSTEM_MESSAGE}
        user = params["input"][1]
        assert user["role"] == "user"
        sections = [
            "<|SQL Dialect|>\nsqlite",
            "<|Database Schema and Sample Data|>\nCREATE TABLE pet",
            "<|Natural Language Question|>\nWhich pets",
            "<|Start of SQL Query A|>",
            "<|End of SQL Query A|>",
            "<|Start of SQL Query B|>",
            "<|End of SQL Query B|>",
        ]
        positions = [user["content"].index(section) for section in sections]
        assert positions == sorted(positions)
        assert second["responses_create_params"]["input"][0]["content"] == DEFAULT_JUDGE_SYSTEM_MESSAGE
        # The judge's whole reply is kept.
        assert first["response"]["object"] == "response"
        assert first["response"]["output"][0]["content"][0]["text"] == "The two queries are the same text. [[A=B]]"
        # No judge call, no entry; a not-equal first verdict, one entry.
        assert self.verify(gym_servers, TASK, answer("")).json()["judge_evaluations"] == []
        one = self.verify(gym_servers, TASK, answer("SELECT name FROM pet")).json()["judge_evaluations"]
        assert [e["verdict_label"] for e in one] == ["[[A!=B]]"]
        assert one[0]["response"]["output"][0]["content"][0]["text"] == "The queries return different rows. [[A!=B]]"

    def test_the_swap_asks_with_the_queries_in_the_other_order(self, gym_servers: RunningServers):
        gold = "SELECT name FROM product WHERE price = (SELECT MIN(price) FROM product)"
        evaluations = self.verify(gym_servers, {**TASK, "sql": gold}, answer(UNSTABLE)).json()["judge_evaluations"]
        first, second = (e["responses_create_params"]["input"][1]["content"] for e in evaluations)
        assert f"<|Start of SQL Query A|>\n{gold}\n<|End of SQL Query A|>" in first
        assert f"<|Start of SQL Query B|>\n{UNSTABLE}\n<|End of SQL Query B|>" in first
        assert f"<|Start of SQL Query A|>\n{UNSTABLE}\n<|End of SQL Query A|>" in second
        assert f"<|Start of SQL Query B|>\n{gold}\n<|End of SQL Query B|>" in second

    def test_first_verdict_not_equal_scores_zero_without_a_swap(self, gym_servers: RunningServers):
        verdict = self.verify(gym_servers, TASK, answer("SELECT name FROM pet WHERE age >= 3")).json()
        assert (verdict["reward"], verdict["judge_passed"], verdict["failure_reason"]) == (
            0.0,
            False,
            "judge_evaluation_failed",
        )
        assert verdict["extracted_sql"] == "SELECT name FROM pet WHERE age >= 3"
        assert len(verdict["judge_evaluations"]) == 1

    def test_swap_failure_gives_reward_if_swap_fails(self, gym_servers: RunningServers):
        # The scripted judge says equal with the answer as B, not equal with it as A.
        task = {**TASK, "sql": "SELECT name FROM product WHERE price = (SELECT MIN(price) FROM product)"}
        for instance, reward in (("text_to_sql", 0.0), ("swap_penalty", -1.0)):
            verdict = self.verify(gym_servers, task, answer(UNSTABLE), instance).json()
            assert verdict["reward"] == reward, (instance, verdict)
            assert (verdict["judge_passed"], verdict["failure_reason"]) == (False, "judge_evaluation_failed")
            assert [e["verdict_label"] for e in verdict["judge_evaluations"]] == ["[[A=B]]", "[[A!=B]]"]
        # Equal both ways still scores 1 where a swap failure would cost -1.
        assert self.verify(gym_servers, TASK, answer(GOLD), "swap_penalty").json()["reward"] == 1.0

    def test_a_not_equal_first_verdict_is_zero_even_with_a_swap_penalty(self, gym_servers: RunningServers):
        verdict = self.verify(gym_servers, TASK, answer("SELECT 1"), "swap_penalty").json()
        assert (verdict["reward"], verdict["failure_reason"]) == (0.0, "judge_evaluation_failed")

    def test_without_check_twice_swap_the_first_equal_verdict_scores_one(self, gym_servers: RunningServers):
        task = {**TASK, "sql": "SELECT name FROM product WHERE price = (SELECT MIN(price) FROM product)"}
        verdict = self.verify(gym_servers, task, answer(UNSTABLE), "no_swap").json()
        assert (verdict["reward"], verdict["judge_passed"], verdict["failure_reason"]) == (1.0, True, "none")
        assert [e["verdict_label"] for e in verdict["judge_evaluations"]] == ["[[A=B]]"]
        wrong = self.verify(gym_servers, TASK, answer("SELECT 2"), "no_swap").json()
        assert (wrong["reward"], wrong["failure_reason"]) == (0.0, "judge_evaluation_failed")

    # --- the judge's text -----------------------------------------------------------------------

    def test_the_judge_text_is_every_assistant_message_joined(self, gym_servers: RunningServers):
        # The label is in the second message (after a blank part): equal, both ways.
        task = {**TASK, "sql_prompt": "<<label-in-a-later-message>> Which pets are older than 3?"}
        verdict = self.verify(gym_servers, task, answer("SELECT 1"), "reading").json()
        assert (verdict["reward"], verdict["judge_passed"]) == (1.0, True), verdict
        assert [e["verdict_label"] for e in verdict["judge_evaluations"]] == ["[[A=B]]", "[[A=B]]"]
        assert len(verdict["judge_evaluations"][0]["response"]["output"]) == 2

    def test_reasoning_items_of_the_judge_are_not_read(self, gym_servers: RunningServers):
        task = {**TASK, "sql_prompt": "<<reasoning-says-equal>> Which pets are older than 3?"}
        verdict = self.verify(gym_servers, task, answer("SELECT 1"), "reading").json()
        assert (verdict["reward"], verdict["failure_reason"]) == (0.0, "judge_evaluation_failed")
        assert verdict["judge_evaluations"][0]["verdict_label"] == "[[A!=B]]"

    def test_a_reply_without_a_label_is_not_equal_with_no_label(self, gym_servers: RunningServers):
        verdict = self.verify(gym_servers, TASK, answer("SELECT 1"), "reading").json()
        assert (verdict["reward"], verdict["failure_reason"]) == (0.0, "judge_evaluation_failed")
        assert verdict["judge_evaluations"][0]["verdict_label"] is None

    # --- no SQL: no judge call ------------------------------------------------------------------

    @pytest.mark.parametrize(
        "response",
        [
            assistant_response(""),
            {"output": []},
            assistant_response("I cannot tell from this schema."),
            assistant_response("```sql\n   \n```"),  # an empty sql block
            # Only function calls and reasoning: OUTPUT_TEXT is empty.
            {
                "output": [
                    {"type": "reasoning", "summary": [{"type": "summary_text", "text": "SELECT 1;"}]},
                    {"type": "function_call", "call_id": "c1", "name": "run_sql", "arguments": '{"q": "SELECT 1"}'},
                ]
            },
        ],
        ids=["empty-text", "no-output", "prose", "empty-block", "reasoning-and-calls"],
    )
    def test_no_sql_scores_zero_without_asking_the_judge(self, gym_servers: RunningServers, response):
        # The `failing` instance's judge answers every request with a 500: asking it would be a 502.
        reply = self.verify(gym_servers, TASK, response, "failing")
        assert reply.status == 200, reply.text
        verdict = reply.json()
        assert (verdict["reward"], verdict["failure_reason"], verdict["extracted_sql"]) == (
            0.0,
            "no_sql_extracted",
            None,
        )
        assert (verdict["judge_passed"], verdict["judge_evaluations"]) == (False, [])

    def test_the_raw_fallback_reaches_the_judge(self, gym_servers: RunningServers):
        verdict = self.verify(gym_servers, TASK, assistant_response(f"Use {GOLD}; then read the names.")).json()
        assert verdict["extracted_sql"] == GOLD + ";"

    # --- judge failures -------------------------------------------------------------------------

    def test_a_failing_judge_is_a_502_judge_failed_never_a_reward(self, gym_servers: RunningServers):
        reply = self.verify(gym_servers, TASK, answer(GOLD), "failing")
        assert reply.status == 502, reply.text
        assert reply.json()["error"]["type"] == "judge_failed"
        assert "reward" not in reply.json()

    def test_a_judge_reply_that_is_not_a_response_is_judge_failed(self, gym_servers: RunningServers):
        reply = self.verify(gym_servers, TASK, answer(GOLD), "garbage")
        assert (reply.status, reply.json()["error"]["type"]) == (502, "judge_failed"), reply.text

    # --- rows -----------------------------------------------------------------------------------

    @pytest.mark.parametrize(
        "given, normalised",
        [
            ("sqlite", "sqlite"),
            (" MySQL ", "mysql"),
            ("Postgres", "postgresql"),
            ("pg", "postgresql"),
            ("POSTGRESQL", "postgresql"),
            ("sqlite3", "sqlite"),
        ],
    )
    def test_the_dialect_is_normalised_in_the_verdict_and_the_prompt(
        self, gym_servers: RunningServers, given, normalised
    ):
        verdict = self.verify(gym_servers, {**TASK, "sql_dialect": given}, answer(GOLD)).json()
        assert verdict["sql_dialect"] == normalised
        prompt = verdict["judge_evaluations"][0]["responses_create_params"]["input"][1]["content"]
        assert prompt.startswith(f"<|SQL Dialect|>\n{normalised}\n\n")

    @pytest.mark.parametrize("dialect", ["oracle", "", "postgre sql", "tsql"])
    def test_an_unknown_dialect_is_a_422_naming_the_field_and_the_allowed_values(
        self, gym_servers: RunningServers, dialect
    ):
        reply = self.verify(gym_servers, {**TASK, "sql_dialect": dialect}, answer(GOLD), "failing")
        assert reply.status == 422, reply.text
        message = reply.json()["error"]["message"]
        assert "sql_dialect" in message and "mysql, postgresql, sqlite" in message, message

    @pytest.mark.parametrize("field", ["sql", "sql_dialect", "sql_prompt"])
    def test_a_missing_required_field_is_a_422_naming_it(self, gym_servers: RunningServers, field):
        task = {key: value for key, value in TASK.items() if key != field}
        reply = self.verify(gym_servers, task, answer(GOLD), "failing")
        assert reply.status == 422, reply.text
        assert f"`{field}`" in reply.json()["error"]["message"]

    def test_rows_with_nulls_and_extra_keys_are_accepted(self, gym_servers: RunningServers):
        task = {**TASK, "sql_context": None, "uuid": 7, "metadata": None, "source": "spider", "extra": {"a": [1]}}
        task["responses_create_params"] = {**TASK["responses_create_params"], "temperature": None, "tools": None}
        verdict = self.verify(gym_servers, task, answer(GOLD)).json()
        assert (verdict["reward"], verdict["sql_context"], verdict["uuid"]) == (1.0, "", 7)
        prompt = verdict["judge_evaluations"][0]["responses_create_params"]["input"][1]["content"]
        assert "<|Database Schema and Sample Data|>\n\n\n<|Natural Language Question|>" in prompt

    # --- extraction under a time limit ------------------------------------------------------------

    def test_pathological_answers_are_extracted_quickly_inline_and_in_a_worker(self, gym_servers: RunningServers):
        # Spaces after an unclosed fence once took the extraction's patterns minutes (a stalled
        # server); gym_sql's scan is linear. Short: inline; long: in a worker. No SQL either way,
        # and the judge (the failing one) is never asked.
        for spaces in (4_000, 200_000):
            verdict = self.verify(gym_servers, TASK, assistant_response("```sql" + " " * spaces), "failing").json()
            assert (verdict["reward"], verdict["failure_reason"], verdict["extracted_sql"]) == (
                0.0,
                "no_sql_extracted",
                None,
            )
        long_right = assistant_response(" " * 50_000 + f"Here it is:\n```sql\n{GOLD}\n```")  # in a worker
        assert self.verify(gym_servers, TASK, long_right).json()["reward"] == 1.0

    def test_long_fenced_answers_are_extracted_in_a_worker(self, gym_servers: RunningServers):
        text = "Let me think. " * 3000 + f"\n```sql\n{GOLD}\n```\nDone."
        verdict = self.verify(gym_servers, TASK, assistant_response(text)).json()
        assert (verdict["reward"], verdict["extracted_sql"]) == (1.0, GOLD)


async def test_the_scripted_config_grades_every_example_through_the_agent():
    # The scripted policy answers each example with its conformance response (its script rides in metadata).
    manager = plugin_manager(gym_text_to_sql.plugin, *first_party("scripted", "simple_agent"))
    with running_servers(SCRIPTED_CONFIG, plugins=manager) as running:
        async with ServerClient(running) as client:
            for task in read_rows(EXAMPLES):
                script = [{"text": task["conformance"]["response"]}]
                params = {**task["responses_create_params"], "metadata": {"scripted_turns": json.dumps(script)}}
                result = await client.post("agent", "/run", {**task, "responses_create_params": params})
                assert result["reward"] == task["conformance"]["reward"], result
                assert result["failure_reason"] in ("none", "no_sql_extracted", "judge_evaluation_failed")
