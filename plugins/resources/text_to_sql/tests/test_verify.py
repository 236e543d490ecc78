"""Unit tests of text_to_sql's pure parts: dialects, the judge's prompt and verdict, where the SQL is
found, the config's checks, and the aggregate metrics."""

from __future__ import annotations

import msgspec
import pytest

from gym_sql.extract import extract_spider2_sql
from gym_text_to_sql.config import DEFAULT_JUDGE_SYSTEM_MESSAGE, TextToSqlConfig
from gym_text_to_sql.plugin import text_to_sql_metrics
from gym_text_to_sql.verify import (
    INLINE_MAX_CHARS,
    extract_sql,
    extraction_is_cheap,
    judge_prompt,
    normalise_dialect,
    verdict_label,
)


@pytest.mark.parametrize(
    "given, expected",
    [
        ("mysql", "mysql"),
        ("MySQL", "mysql"),
        ("  mysql\n", "mysql"),
        ("postgresql", "postgresql"),
        ("PostgreSQL", "postgresql"),
        ("postgres", "postgresql"),
        (" PG ", "postgresql"),
        ("pg", "postgresql"),
        ("sqlite", "sqlite"),
        ("SQLite3", "sqlite"),
        ("sqlite3", "sqlite"),
    ],
)
def test_dialects_are_stripped_lowercased_and_de_aliased(given, expected):
    assert normalise_dialect(given) == expected


@pytest.mark.parametrize("given", ["oracle", "", "   ", "postgre", "pgsql", "sqlite 3", "my sql", "mssql"])
def test_an_unknown_dialect_names_the_field_and_the_allowed_values(given):
    with pytest.raises(ValueError) as error:
        normalise_dialect(given)
    message = str(error.value)
    assert message.startswith("sql_dialect must be one of mysql, postgresql, sqlite")
    assert "postgres (postgresql)" in message and "sqlite3 (sqlite)" in message and repr(given) in message


def test_the_prompt_holds_the_sections_in_order():
    prompt = judge_prompt("mysql", "CREATE TABLE t (a INT);", "How many rows?", "SELECT COUNT(*) FROM t", "SELECT 1")
    assert prompt == (
        "<|SQL Dialect|>\nmysql\n\n"
        "<|Database Schema and Sample Data|>\nCREATE TABLE t (a INT);\n\n"
        "<|Natural Language Question|>\nHow many rows?\n\n"
        "<|Start of SQL Query A|>\nSELECT COUNT(*) FROM t\n<|End of SQL Query A|>\n\n"
        "<|Start of SQL Query B|>\nSELECT 1\n<|End of SQL Query B|>"
    )


def test_the_prompt_keeps_braces_and_markers_of_the_row_as_they_are():
    # Not str.format: braces in the schema or a query are plain text.
    prompt = judge_prompt("postgresql", "CREATE TABLE j (d JSONB DEFAULT '{}');", "{question}", "SELECT '{a}'", "B")
    assert "DEFAULT '{}'" in prompt and "\n{question}\n" in prompt and "SELECT '{a}'" in prompt


@pytest.mark.parametrize(
    ("text", "guarded", "reference"),
    [
        ("[[A=B]]", "[[A=B]]", "[[A=B]]"),
        ("They match. [[A=B]]", "[[A=B]]", "[[A=B]]"),
        ("[[A!=B]]", "[[A!=B]]", "[[A!=B]]"),
        # Guarded: the last label (a judge quoting a forged one rules after it); reference: the first.
        ("First [[A=B]], then on reflection [[A!=B]]", "[[A!=B]]", "[[A=B]]"),
        ("[[A!=B]] ... though one might say [[A=B]]", "[[A=B]]", "[[A!=B]]"),
        ("The queries are equivalent.", None, None),  # no label: not equal
        ("", None, None),
        ("[[a=b]]", None, None),  # labels are case-sensitive
        ("[[A = B]]", None, None),
    ],
)
def test_the_label_of_each_verdict_mode(text, guarded, reference):
    assert verdict_label(text, "[[A=B]]", "[[A!=B]]") == guarded
    assert verdict_label(text, "[[A=B]]", "[[A!=B]]", "reference") == reference


def test_labels_that_contain_each_other_are_matched_where_they_start():
    # INCORRECT holds CORRECT, but its own occurrence starts first.
    assert verdict_label("INCORRECT", "CORRECT", "INCORRECT") == "INCORRECT"
    assert verdict_label("INCORRECT", "CORRECT", "INCORRECT", "reference") == "INCORRECT"
    assert verdict_label("CORRECT, not INCORRECT", "CORRECT", "INCORRECT") == "INCORRECT"
    assert verdict_label("CORRECT, not INCORRECT", "CORRECT", "INCORRECT", "reference") == "CORRECT"


def test_extraction_is_the_sql_plugins_spider2_rule():
    assert extract_sql is extract_spider2_sql


@pytest.mark.parametrize(
    "text, sql",
    [
        # The last ```sql block (tag in any case), stripped.
        ("```sql\nSELECT 1\n```\nbetter:\n```SQL\n  SELECT 2;  \n```", "SELECT 2;"),
        # Else the last generic block that starts like a statement.
        ("```\nSELECT a FROM t\n```\n```\nnot sql\n```", "SELECT a FROM t"),
        ("```python\nprint(1)\n```", None),
        # Else raw text from the first keyword (even in prose: "with ") to the last ';', one ';' kept.
        ("Try SELECT a FROM t;; it works", "SELECT a FROM t;"),
        ("Start with the table: SELECT a FROM t;", "with the table: SELECT a FROM t;"),
        ("select a from t", "select a from t;"),
        ("No query here.", None),
        ("", None),
        ("```sql\n\n```", ""),  # an empty block: the server reports no_sql_extracted
    ],
)
def test_where_the_sql_is_found(text, sql):
    assert extract_sql(text) == sql


def test_only_texts_without_fences_of_bounded_length_are_searched_inline():
    assert extraction_is_cheap("SELECT 1;")
    assert extraction_is_cheap("```sql\n" + " " * 4000)  # linear since gym_sql's fix: no worker needed
    assert not extraction_is_cheap("a" * (INLINE_MAX_CHARS + 1))
    assert extraction_is_cheap("a" * INLINE_MAX_CHARS)


def test_the_config_defaults_and_checks():
    config = msgspec.convert({"judge_model_server": "judge"}, TextToSqlConfig)
    assert (config.judge_equal_label, config.judge_not_equal_label) == ("[[A=B]]", "[[A!=B]]")
    assert (config.check_twice_swap, config.reward_if_swap_fails, config.judge_endpoint_max_concurrency) == (
        True,
        0.0,
        64,
    )
    assert config.judge_system_message == DEFAULT_JUDGE_SYSTEM_MESSAGE
    assert DEFAULT_JUDGE_SYSTEM_MESSAGE.rstrip().endswith("[[A!=B]] if they are not.")
    with pytest.raises(msgspec.ValidationError, match="judge_model_server"):
        msgspec.convert({}, TextToSqlConfig)
    with pytest.raises(msgspec.ValidationError, match="must differ"):
        msgspec.convert(
            {"judge_model_server": "j", "judge_equal_label": "X", "judge_not_equal_label": "X"}, TextToSqlConfig
        )
    with pytest.raises(msgspec.ValidationError, match="reward_if_swap_fails"):
        msgspec.convert({"judge_model_server": "j", "reward_if_swap_fails": -2.0}, TextToSqlConfig)


def _row(reward, reason, dialect="mysql", evaluations=2, sql="SELECT 1", passed=None):
    return {
        "task_index": 0, "rollout_index": 0, "reward": reward, "failure_reason": reason, "sql_dialect": dialect,
        "judge_evaluations": [{}] * evaluations, "extracted_sql": sql,
        "judge_passed": reason == "none" if passed is None else passed,
    }  # fmt: skip


def test_metrics_count_verdicts_per_reason_and_dialect():
    rows = [
        _row(1.0, "none"),
        _row(0.0, "judge_evaluation_failed", evaluations=1),
        _row(-1.0, "judge_evaluation_failed", dialect="postgresql"),  # the swap failed
        _row(0.0, "no_sql_extracted", dialect="sqlite", evaluations=0, sql=None),
    ]
    assert text_to_sql_metrics(rows) == {
        "text_to_sql/judge_passed": 0.25,
        "text_to_sql/sql_extracted": 0.75,
        "text_to_sql/swap_failed": 0.25,
        "text_to_sql/failure_reason/judge_evaluation_failed": 0.5,
        "text_to_sql/failure_reason/no_sql_extracted": 0.25,
        "text_to_sql/failure_reason/none": 0.25,
        "text_to_sql/mysql/mean_reward": 0.5,
        "text_to_sql/mysql/rollouts": 2.0,
        "text_to_sql/postgresql/mean_reward": -1.0,
        "text_to_sql/postgresql/rollouts": 1.0,
        "text_to_sql/sqlite/mean_reward": 0.0,
        "text_to_sql/sqlite/rollouts": 1.0,
    }


def test_metrics_of_nothing_are_nothing():
    assert text_to_sql_metrics([]) == {}
    from gym_text_to_sql.plugin import gym_aggregate_metrics

    assert gym_aggregate_metrics([]) is None
