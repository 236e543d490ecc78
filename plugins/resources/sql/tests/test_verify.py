"""Unit tests of the pure parts: extraction (§11 and §12 rules), comparison, the read-only and
bounded query runner, the example databases and the aggregate metrics."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from gym_sql.compare import bird_results_match, normalize_value, spider2_columns, spider2_results_match, vectors_match
from gym_sql.examples import EXAMPLE_DATABASES, build_example_databases
from gym_sql.execute import QueryError, execute_bird, execute_spider2, run_query
from gym_sql.extract import BIRD_FILLER_SQL, extract_bird_sql, extract_spider2_sql
from gym_sql.plugin import bird_sql_metrics


@pytest.fixture(scope="module")
def db_dir(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("dbs")
    build_example_databases(directory)
    return directory


# --- bird extraction -----------------------------------------------------------------------------


def test_bird_takes_the_last_sql_block():
    text = "```sql\nSELECT 1\n```\nbetter:\n```sql\nSELECT name\nFROM   schools\n```"
    assert extract_bird_sql(text) == ("SELECT name FROM schools", True)


def test_bird_without_a_block_uses_the_filler():
    assert extract_bird_sql("SELECT name FROM schools") == (BIRD_FILLER_SQL, False)
    assert extract_bird_sql("") == (BIRD_FILLER_SQL, False)


def test_bird_fence_tag_is_case_sensitive_and_needs_a_letter():
    assert extract_bird_sql("```SQL\nSELECT 2\n```") == (BIRD_FILLER_SQL, False)
    # A block without a letter does not match on its own: the match runs on to the next fence.
    assert extract_bird_sql("```sql 1 ```")[1] is False


def test_bird_line_comment_deletes_to_the_end_of_the_block():
    sql, _ = extract_bird_sql("```sql\nSELECT a -- the a\nFROM t\n```")
    assert sql == "SELECT a"


def test_bird_block_comments_are_removed():
    assert extract_bird_sql("```sql\nSELECT /* all */ *\nFROM t\n```")[0] == "SELECT * FROM t"


def test_bird_leading_bold_is_removed_only_at_the_very_start():
    assert extract_bird_sql("```sql**Query** SELECT 1 **x** FROM t```")[0] == "FROM t"
    # After collapsing, a block starting on a new line starts with a space: the title stays.
    assert extract_bird_sql("```sql\n**Query**\nSELECT 1\n```")[0] == "**Query** SELECT 1"


def test_bird_result_may_be_empty():
    assert extract_bird_sql("```sql\n-- nothing but a comment\n```") == ("", True)


# --- spider2 extraction --------------------------------------------------------------------------


def test_spider2_last_sql_block_any_case():
    assert extract_spider2_sql("```sql\nSELECT 1\n```\n```SQL\n  SELECT 2;  \n```") == "SELECT 2;"


def test_spider2_generic_block_must_start_like_a_statement():
    text = "```\nSELECT a FROM t\n```\n```\nplain text\n```"
    assert extract_spider2_sql(text) == "SELECT a FROM t"
    assert extract_spider2_sql("```\nEXPLAIN SELECT 1\n```") == "SELECT 1\n```;"  # raw fallback


def test_spider2_raw_fallback_to_the_last_semicolon():
    assert extract_spider2_sql("Use select a from t;; then done; ok") == "select a from t;; then done;"
    assert extract_spider2_sql("Answer: SELECT a FROM t") == "SELECT a FROM t;"


def test_spider2_raw_fallback_hits_prose():
    assert extract_spider2_sql("Start with the players") == "with the players;"


def test_spider2_nothing_found():
    assert extract_spider2_sql("") is None
    assert extract_spider2_sql("I do not know.") is None


# --- comparison ----------------------------------------------------------------------------------


def test_bird_set_equality_ignores_order_and_duplicates():
    assert bird_results_match([(1, "a"), (2, "b")], [(2, "b"), (1, "a"), (1, "a")])
    assert not bird_results_match([(1, "a")], [(1, "b")])
    assert not bird_results_match([(1,)], [(1, 0)])
    assert bird_results_match([], [])


def test_bird_unhashable_rows_compare_by_repr():
    assert bird_results_match([([1],)], [([1],)])
    assert not bird_results_match([([1],)], [([2],)])


def test_normalize_value():
    assert normalize_value("12") == 12 and isinstance(normalize_value("12"), int)
    assert normalize_value("1.5") == 1.5
    assert normalize_value("abc") == "abc"
    assert normalize_value(None) == 0
    assert normalize_value("nan") == 0
    assert normalize_value(float("nan")) == 0


def test_vectors_match_tolerance_and_order():
    assert vectors_match([1.0, 2.0], [1.009, 2.0], ignore_order=False)
    assert not vectors_match([1.0], [1.02], ignore_order=False)
    assert vectors_match([True, 2], [1, 2], ignore_order=False)  # bools count as ints
    assert not vectors_match([1, 2], [2, 1], ignore_order=False)
    assert vectors_match([1, 2], [2, 1], ignore_order=True)
    assert not vectors_match([1, 2], [1, 2, 3], ignore_order=True)
    assert not vectors_match(["1"], [1], ignore_order=False)  # unnormalised: strict equality


def test_vectors_sort_by_string_form():
    # "19.999" sorts before "2" but "2" before "20": the pairs misalign (a quirk of the reference).
    assert not vectors_match([2, 19.999], [2, 20], ignore_order=True)
    assert vectors_match([2, 19.999], [2, 20], ignore_order=False)


def test_spider2_empty_results():
    assert spider2_results_match([], [])
    assert not spider2_results_match([(1,)], [])
    assert not spider2_results_match([], [(1,)])


def test_spider2_gold_columns_found_among_predicted_columns():
    gold = [("a", 1), ("b", 2)]
    assert spider2_results_match(gold, [(2, "extra", "b"), (1, "x", "a")])
    assert not spider2_results_match(gold, [("a", 1), ("b", 3)])


def test_spider2_condition_cols():
    gold = [("a", 1), ("b", 2)]
    predicted = [("a", 5), ("b", 6)]
    assert spider2_results_match(gold, predicted, condition_cols=[0])
    assert not spider2_results_match(gold, predicted, condition_cols=[1])
    # Indices past the gold width are dropped; none left means every column.
    assert not spider2_results_match(gold, predicted, condition_cols=[7])


def test_spider2_values_are_normalised():
    assert spider2_results_match([("3",), ("4.5",), (None,)], [(3,), (4.5,), (0,)])


def test_spider2_columns_forms():
    assert spider2_columns(None, 0) == []
    assert spider2_columns([], 3) == []
    assert spider2_columns([0, 2], 5) == [0, 2]
    assert spider2_columns([[0], [1, 2]], 1) == [1, 2]
    assert spider2_columns([[0]], 1) == []


# --- execution -----------------------------------------------------------------------------------


def test_example_databases_are_deterministic(tmp_path):
    first = build_example_databases(tmp_path / "a")
    second = build_example_databases(tmp_path / "b")
    assert [p.name for p in first] == [f"{name}.sqlite" for name in EXAMPLE_DATABASES]
    for a, b in zip(first, second):
        dump = lambda p: list(sqlite3.connect(p).iterdump())  # noqa: E731
        assert dump(a) == dump(b)


def test_run_query_reads(db_dir):
    rows = run_query(str(db_dir / "school.sqlite"), "SELECT COUNT(*) FROM schools", timeout_s=5, max_rows=10)
    assert rows == [(8,)]


@pytest.mark.parametrize(
    "sql",
    [
        "DELETE FROM schools",
        "INSERT INTO schools VALUES (9, 'x', 'y', 1, 1)",
        "UPDATE schools SET name = 'x'",
        "DROP TABLE schools",
        "CREATE TABLE t (x)",
        "CREATE TEMP TABLE t (x)",
        "ATTACH DATABASE ':memory:' AS other",
        "SELECT load_extension('libx')",
        "PRAGMA query_only = OFF",
        "PRAGMA journal_mode = DELETE",
        "BEGIN",
        "VACUUM",
    ],
)
def test_run_query_refuses_anything_but_reading(db_dir, sql):
    path = db_dir / "school.sqlite"
    with pytest.raises(QueryError, match="refused|not authorized"):
        run_query(str(path), sql, timeout_s=5, max_rows=10)
    assert run_query(str(path), "SELECT COUNT(*) FROM schools", timeout_s=5, max_rows=10) == [(8,)]


def test_run_query_allows_reading_pragmas(db_dir):
    rows = run_query(str(db_dir / "school.sqlite"), "PRAGMA table_info(schools)", timeout_s=5, max_rows=100)
    assert [r[1] for r in rows] == ["id", "name", "county", "enrollment", "free_meals"]


def test_run_query_one_statement_only(db_dir):
    with pytest.raises(QueryError, match="one statement"):
        run_query(str(db_dir / "school.sqlite"), "SELECT 1; DROP TABLE schools", timeout_s=5, max_rows=10)


def test_run_query_time_limit(db_dir):
    bomb = "SELECT COUNT(*) FROM numbers a, numbers b, numbers c, numbers d"
    with pytest.raises(QueryError, match="timeout"):
        run_query(str(db_dir / "school.sqlite"), bomb, timeout_s=0.2, max_rows=10)


def test_run_query_row_limit(db_dir):
    endless = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT x FROM c"
    with pytest.raises(QueryError, match="more than 1000 rows"):
        run_query(str(db_dir / "school.sqlite"), endless, timeout_s=5, max_rows=1000)


def test_run_query_missing_database(db_dir):
    with pytest.raises(QueryError, match="no database"):
        run_query(str(db_dir / "absent.sqlite"), "SELECT 1", timeout_s=5, max_rows=10)
    assert not (db_dir / "absent.sqlite").exists()  # read-only: nothing created


def test_execute_bird_outcomes(db_dir):
    path = str(db_dir / "school.sqlite")
    gold = "SELECT name FROM schools WHERE county = 'Marin'"
    assert execute_bird(path, gold, "SELECT name FROM schools WHERE county = 'Marin' ORDER BY 1 DESC", 5, 100).match
    assert execute_bird(path, "SELEC", "SELECT 1", 5, 100).gold_error
    outcome = execute_bird(path, gold, "SELECT nme FROM schools", 5, 100)
    assert (outcome.match, outcome.gold_error) == (False, None) and "no such column" in outcome.predicted_error
    # An empty query runs and yields no rows.
    assert execute_bird(path, "SELECT name FROM schools WHERE 0", "", 5, 100).match


def test_execute_bird_drops_undecodable_bytes(db_dir):
    path = str(db_dir / "school.sqlite")
    assert execute_bird(path, "SELECT CAST(x'61ff62' AS TEXT)", "SELECT 'ab'", 5, 100).match


def test_execute_spider2_gold_sql_and_gold_result(db_dir):
    path = str(db_dir / "cricket.sqlite")
    gold = "SELECT player_name FROM player WHERE country = 'India'"
    pred = "SELECT player_id, player_name FROM player WHERE country = 'India'"
    assert execute_spider2(path, gold, None, pred, None, True, 5, 100).match
    assert execute_spider2(path, None, [[["nobody"]], [["A Sharma"], ["F Kumar"]]], pred, [], True, 5, 100).match
    assert execute_spider2(path, "SELEC", None, pred, None, True, 5, 100).gold_error
    ragged = execute_spider2(path, None, [[["A Sharma", 1], ["F Kumar"]]], pred, None, True, 5, 100)
    assert not ragged.match and "cannot compare" in ragged.predicted_error


# --- metrics -------------------------------------------------------------------------------------


def test_bird_metrics_pass_at_k_and_difficulty_subsets():
    rows = [
        {"task_index": 0, "rollout_index": 0, "reward": 1.0, "extracted_sql": "a", "difficulty": "simple"},
        {"task_index": 0, "rollout_index": 1, "reward": 0.0, "extracted_sql": "b", "difficulty": "simple"},
        {"task_index": 1, "rollout_index": 0, "reward": 0.0, "extracted_sql": "c", "difficulty": "challenging"},
        {"task_index": 1, "rollout_index": 1, "reward": 0.0, "extracted_sql": "c", "difficulty": "challenging"},
    ]
    metrics = bird_sql_metrics(rows)
    assert metrics["bird_sql/pass@1/accuracy"] == 25.0
    assert metrics["bird_sql/pass@2/accuracy"] == 50.0
    assert metrics["bird_sql/pass@1[avg-of-2]/accuracy"] == 25.0
    assert metrics["bird_sql/majority@2/accuracy"] == 25.0  # task 0: tie of a(1) and b(0) → 0.5
    assert metrics["bird_sql/simple/pass@2/accuracy"] == 100.0
    assert metrics["bird_sql/challenging/pass@2/accuracy"] == 0.0
    assert metrics["bird_sql/pass@2/no_answer"] == 0.0
    assert bird_sql_metrics([]) == {}
