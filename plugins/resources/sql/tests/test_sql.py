"""Tests of the sql plugin over real HTTP, servers on loopback: gym's conformance kit for both
server types (``bird_sql`` and ``spider2_lite``), then what is particular to them: the verify
response, bad rows, runaway and writing queries, the ``db_dir`` option.

Each example row keeps, in its ignored ``conformance`` field, the response the kit sends and the
reward it must get. The plugin is registered explicitly rather than found through its entry point.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from gym_core import PluginManager
from gym_core.testing import (
    HTTPCaller,
    ResourcesServerTests,
    RunningServers,
    assistant_response,
    read_rows,
    running_servers,
)

import gym_sql.plugin
from gym_sql.examples import build_example_databases

PACKAGE = Path(__file__).resolve().parents[1]
BIRD_EXAMPLES = PACKAGE / "data" / "example.jsonl"
SPIDER2_EXAMPLES = PACKAGE / "data" / "spider2_lite_example.jsonl"
# Short limits, so that runaway queries end quickly.
OPTIONS = {"sql_execution_timeout_s": 1.0, "max_rows": 1000, "max_concurrency": 2}

BIRD_TASK = {
    "responses_create_params": {"input": "Which schools are in Marin county?"},
    "question": "Which schools are in Marin county?",
    "gt_sql": "SELECT name FROM schools WHERE county = 'Marin'",
    "db_id": "school",
}
SPIDER2_TASK = {
    "responses_create_params": {"input": "Which players are from India?"},
    "question": "Which players are from India?",
    "db_id": "cricket",
    "gold_sql": "SELECT player_name FROM player WHERE country = 'India'",
}

WRITE = "```sql\nDELETE FROM schools\n```"
BOMB = "```sql\nSELECT COUNT(*) FROM numbers a, numbers b, numbers c, numbers d, numbers e\n```"
ENDLESS = "```sql\nWITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT COUNT(*) FROM c\n```"
ENDLESS_ROWS = "```sql\nWITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT x FROM c\n```"
RIGHT = "```sql\nSELECT name FROM schools WHERE county = 'Marin'\n```"
# Degenerate answers, none with a query in a block: the spec's patterns, run by `re`, take minutes to
# hours over the first three (cubic or quadratic in their length). All are longer than
# INLINE_EXTRACT_MAX_CHARS, so they are searched in a worker.
DEGENERATE = [
    "```sql" + " " * 50_000,
    "```\n" + " \t\n" * 20_000 + "x",
    "```sql " + "a" * 50_000,
    "with " * 20_000,
]
# A long answer (searched in a worker) with the right query at its end.
LONG_RIGHT = "Let me think. " * 1000 + RIGHT


def verify(caller: HTTPCaller, task: dict[str, Any], text: str) -> dict[str, Any]:
    reply = caller.post("/verify", {**task, "response": assistant_response(text)})
    assert reply.status == 200, reply.text
    return reply.json()


def verify_while_serving(
    servers: RunningServers, task: dict[str, Any], texts: list[str], right: str
) -> list[dict[str, Any]]:
    """The verify responses to ``texts``, sent at once, while the server is asked for its health and
    grades ``right`` (reward 1) in the meantime."""
    results: dict[int, dict[str, Any]] = {}

    def run(index: int) -> None:
        results[index] = verify(servers.caller(), task, texts[index])

    threads = [threading.Thread(target=run, args=(index,)) for index in range(len(texts))]
    for thread in threads:
        thread.start()
    caller = servers.caller()
    assert caller.get("/health").json()["status"] == "ok"
    assert verify(caller, task, right)["reward"] == 1.0
    for thread in threads:
        thread.join(timeout=120)
        assert not thread.is_alive()
    return [results[index] for index in range(len(texts))]


class TestBirdSql(ResourcesServerTests):
    server_type = "bird_sql"
    plugins = [gym_sql.plugin]
    options = OPTIONS
    example_data = BIRD_EXAMPLES

    def test_verify_response_fields(self, gym_servers: RunningServers):
        text = "Here:\n```sql\nSELECT name FROM schools WHERE county = 'Marin' ORDER BY name\n```"
        body = verify(gym_servers.caller(), {**BIRD_TASK, "difficulty": "simple", "id": "7"}, text)
        assert body == {
            "reward": 1.0,
            "model_output": text,
            "extracted_sql": "SELECT name FROM schools WHERE county = 'Marin' ORDER BY name",
            "had_codeblock": True,
            "execution_match": True,
            "failure_reason": "none",
            "error": None,
            "question": BIRD_TASK["question"],
            "gt_sql": BIRD_TASK["gt_sql"],
            "db_id": "school",
            "difficulty": "simple",
            "id": 7,
        }

    def test_wrong_result_is_execution_error(self, gym_servers: RunningServers):
        body = verify(gym_servers.caller(), BIRD_TASK, "```sql\nSELECT name FROM schools\n```")
        assert (body["reward"], body["failure_reason"], body["error"]) == (0.0, "execution_error", None)

    def test_no_block_runs_the_filler_and_says_no_sql_extracted(self, gym_servers: RunningServers):
        body = verify(gym_servers.caller(), BIRD_TASK, "SELECT name FROM schools WHERE county = 'Marin'")
        assert (body["reward"], body["extracted_sql"], body["had_codeblock"]) == (0.0, "SELECT 1", False)
        assert body["failure_reason"] == "no_sql_extracted"
        # The quirk: when the gold result is a single 1, the filler matches it.
        one = {**BIRD_TASK, "gt_sql": "SELECT COUNT(*) FROM schools WHERE county = 'Marin' AND enrollment > 1600"}
        assert verify(gym_servers.caller(), one, "I don't know")["reward"] == 1.0

    def test_failing_gold_query(self, gym_servers: RunningServers):
        body = verify(gym_servers.caller(), {**BIRD_TASK, "gt_sql": "SELECT name FROM nowhere"}, RIGHT)
        assert (body["reward"], body["failure_reason"]) == (0.0, "gold_execution_error")
        assert "no such table" in body["error"]

    def test_unknown_database(self, gym_servers: RunningServers):
        for db_id in ("absent", "../school", "/etc/passwd"):
            body = verify(gym_servers.caller(), {**BIRD_TASK, "db_id": db_id}, RIGHT)
            assert (body["reward"], body["failure_reason"]) == (0.0, "gold_execution_error"), db_id

    def test_missing_required_field_is_a_422_naming_it(self, gym_servers: RunningServers):
        for field in ("gt_sql", "db_id", "question"):
            task = {k: v for k, v in BIRD_TASK.items() if k != field}
            reply = gym_servers.caller().post("/verify", {**task, "response": assistant_response(RIGHT)})
            assert reply.status == 422 and field in reply.text, (field, reply.status, reply.text)
        reply = gym_servers.caller().post(
            "/verify", {**BIRD_TASK, "id": "seven", "response": assistant_response(RIGHT)}
        )
        assert reply.status == 422 and "id" in reply.text

    def test_nulls_in_optional_fields_are_accepted(self, gym_servers: RunningServers):
        body = verify(gym_servers.caller(), {**BIRD_TASK, "difficulty": None, "id": None, "sql_context": None}, RIGHT)
        assert (body["reward"], body["difficulty"], body["id"]) == (1.0, None, None)

    def test_runaway_and_writing_queries_score_0_and_the_server_keeps_serving(self, gym_servers: RunningServers):
        caller = gym_servers.caller()
        expected = {
            WRITE: "refused (the query may only read)",
            BOMB: "timeout",
            ENDLESS: "timeout",
            ENDLESS_ROWS: "more than 1000 rows",
        }
        results: dict[str, dict[str, Any]] = {}

        def run(text: str) -> None:
            results[text] = verify(gym_servers.caller(), BIRD_TASK, text)

        threads = [threading.Thread(target=run, args=(text,)) for text in expected]
        for thread in threads:
            thread.start()
        # While those run, the server still answers, and grades a right answer.
        assert caller.get("/health").json()["status"] == "ok"
        assert verify(caller, BIRD_TASK, RIGHT)["reward"] == 1.0
        for thread in threads:
            thread.join()
        for text, reason in expected.items():
            body = results[text]
            assert (body["reward"], body["failure_reason"]) == (0.0, "execution_error"), body
            assert body["error"].startswith(reason), body
        assert verify(caller, BIRD_TASK, RIGHT)["reward"] == 1.0
        # Nothing was written: the table still holds every row.
        count = {**BIRD_TASK, "gt_sql": "SELECT COUNT(*) FROM schools"}
        assert verify(caller, count, "```sql\nSELECT 8\n```")["reward"] == 1.0

    def test_degenerate_and_long_answers_are_extracted_off_the_event_loop(self, gym_servers: RunningServers):
        caller = gym_servers.caller()
        for body in verify_while_serving(gym_servers, BIRD_TASK, DEGENERATE, RIGHT):
            assert (body["reward"], body["extracted_sql"], body["had_codeblock"]) == (0.0, "SELECT 1", False), body
            assert body["failure_reason"] == "no_sql_extracted"
        body = verify(caller, BIRD_TASK, LONG_RIGHT)
        assert (body["reward"], body["extracted_sql"]) == (1.0, BIRD_TASK["gt_sql"])


class TestSpider2Lite(ResourcesServerTests):
    server_type = "spider2_lite"
    plugins = [gym_sql.plugin]
    options = OPTIONS
    example_data = SPIDER2_EXAMPLES

    def test_verify_response_fields(self, gym_servers: RunningServers):
        text = "```sql\nSELECT player_id, player_name FROM player WHERE country = 'India'\n```"
        body = verify(gym_servers.caller(), {**SPIDER2_TASK, "instance_id": "local9"}, text)
        assert body == {
            "reward": 1.0,
            "model_output": text,
            "extracted_sql": "SELECT player_id, player_name FROM player WHERE country = 'India'",
            "execution_match": True,
            "failure_reason": "none",
            "error": None,
            "gold_sql": SPIDER2_TASK["gold_sql"],
            "db_id": "cricket",
            "question": SPIDER2_TASK["question"],
            "instance_id": "local9",
            "uuid": None,
        }

    def test_gold_sql_takes_priority_over_gold_result(self, gym_servers: RunningServers):
        task = {**SPIDER2_TASK, "gold_result": [[["nobody"]]]}
        assert (
            verify(gym_servers.caller(), task, "SELECT player_name FROM player WHERE country = 'India';")["reward"]
            == 1.0
        )
        task = {**SPIDER2_TASK, "gold_sql": "", "gold_result": [[["nobody"]]]}
        assert verify(gym_servers.caller(), task, "```sql\nSELECT 'nobody'\n```")["reward"] == 1.0

    def test_ignore_order_is_read_laxly(self, gym_servers: RunningServers):
        task = {**SPIDER2_TASK, "gold_sql": "SELECT player_name FROM player ORDER BY player_id"}
        reversed_order = "```sql\nSELECT player_name FROM player ORDER BY player_id DESC\n```"
        assert verify(gym_servers.caller(), {**task, "ignore_order": "true"}, reversed_order)["reward"] == 1.0
        assert verify(gym_servers.caller(), {**task, "ignore_order": "False"}, reversed_order)["reward"] == 0.0
        reply = gym_servers.caller().post(
            "/verify", {**task, "ignore_order": "sometimes", "response": assistant_response(reversed_order)}
        )
        assert reply.status == 422 and "ignore_order" in reply.text

    def test_no_sql_and_errors(self, gym_servers: RunningServers):
        body = verify(gym_servers.caller(), SPIDER2_TASK, "")
        assert (body["reward"], body["failure_reason"], body["extracted_sql"]) == (0.0, "no_sql_extracted", None)
        body = verify(gym_servers.caller(), {**SPIDER2_TASK, "gold_sql": "SELEC"}, "SELECT 1;")
        assert (body["reward"], body["failure_reason"]) == (0.0, "execution_error") and body["error"].startswith(
            "gold query"
        )

    def test_a_row_without_gold_is_a_422(self, gym_servers: RunningServers):
        task = {k: v for k, v in SPIDER2_TASK.items() if k != "gold_sql"}
        reply = gym_servers.caller().post("/verify", {**task, "response": assistant_response("SELECT 1;")})
        assert reply.status == 422 and "gold_sql" in reply.text and "gold_result" in reply.text

    def test_write_bomb_and_endless_recursion_score_0(self, gym_servers: RunningServers):
        caller = gym_servers.caller()
        for text, reason in (
            ("```sql\nDROP TABLE player\n```", "refused"),
            (
                "```sql\nSELECT COUNT(*) FROM batting a, batting b, batting c, batting d, batting e, batting f, batting g\n```",
                "timeout",
            ),
            (ENDLESS, "timeout"),
        ):
            body = verify(caller, SPIDER2_TASK, text)
            assert (body["reward"], body["failure_reason"]) == (0.0, "execution_error") and body["error"].startswith(
                reason
            ), body
        assert verify(caller, SPIDER2_TASK, "SELECT player_name FROM player WHERE country = 'India';")["reward"] == 1.0

    def test_degenerate_and_long_answers_are_extracted_off_the_event_loop(self, gym_servers: RunningServers):
        caller = gym_servers.caller()
        right = "SELECT player_name FROM player WHERE country = 'India';"
        bodies = verify_while_serving(gym_servers, SPIDER2_TASK, DEGENERATE, right)
        for body in bodies[:3]:
            assert (body["reward"], body["failure_reason"], body["extracted_sql"]) == (0.0, "no_sql_extracted", None)
            assert body["error"] == "no SQL found in the answer"
        # The raw fallback starts at prose "with ": not a query that runs.
        raw = bodies[3]
        assert (raw["extracted_sql"], raw["failure_reason"]) == (DEGENERATE[3].strip() + ";", "execution_error")
        body = verify(caller, SPIDER2_TASK, "Let me think. " * 1000 + f"```sql\n{right}\n```")
        assert (body["reward"], body["extracted_sql"]) == (1.0, right)


def test_db_dir_with_birds_layout(tmp_path):
    # <db_dir>/<db_id>/<db_id>.sqlite, as in BIRD's dev_databases.
    for path in build_example_databases(tmp_path / "built"):
        (tmp_path / "dbs" / path.stem).mkdir(parents=True)
        path.rename(tmp_path / "dbs" / path.stem / path.name)
    manager = PluginManager(load_entry_points=False)
    manager.register(gym_sql.plugin, name="gym_sql.plugin")
    config = {"bird_sql": {"plugin": "bird_sql", "db_dir": str(tmp_path / "dbs")}}
    with running_servers(config, plugins=manager) as running:
        caller = HTTPCaller(running.instances["bird_sql"].url)
        for row in read_rows(BIRD_EXAMPLES):
            assert verify(caller, row, row["conformance"]["response"])["reward"] == row["conformance"]["reward"]
