"""The pure functions: answer extraction, scoring with the library's scorers (default and custom),
task weights, row generation, and the aggregate metrics."""

from __future__ import annotations

import pytest

from gym_reasoning_gym.plugin import gym_aggregate_metrics, reasoning_gym_metrics
from gym_reasoning_gym.scoring import (
    Score,
    extract_answer,
    generate_rows,
    parse_task_weights,
    score,
    several_answers,
)

# --- extraction -------------------------------------------------------------------------------------


def test_the_last_answer_tag_wins_and_is_stripped():
    assert extract_answer("<answer>1</answer> then <answer>  2 \n</answer>") == "2"


def test_answer_tags_match_across_lines():
    assert extract_answer("<answer>\nline one\nline two\n</answer>") == "line one\nline two"


def test_an_answer_tag_comes_before_a_box():
    assert extract_answer("\\boxed{7} <answer>8</answer>") == "8"


def test_without_tags_the_first_box_counts():
    assert extract_answer("\\boxed{ 3 } and \\boxed{4}") == "3"


def test_nested_braces_are_not_supported_in_boxes():
    # [^}]+ stops at the first closing brace.
    assert extract_answer("\\boxed{\\frac{1}{2}}") == "\\frac{1"


def test_an_empty_box_does_not_match_and_the_whole_text_is_the_answer():
    assert extract_answer("  \\boxed{} so 5 ") == "\\boxed{} so 5"


def test_an_unclosed_tag_falls_back_to_the_whole_text():
    assert extract_answer(" <answer>5 ") == "<answer>5"


def test_an_empty_text_gives_an_empty_answer():
    assert extract_answer("") == ""
    assert extract_answer("<answer></answer>") == ""


# --- scoring --------------------------------------------------------------------------------------

QUESTION = "What is 2 + 3?"


def test_default_scorer_exact_match_is_one():
    result = score("basic_arithmetic", "<answer>5</answer>", QUESTION, "5", {"source_dataset": "basic_arithmetic"})
    assert (result.score, result.extracted_answer, result.reason) == (1.0, "5", "scored")


def test_default_scorer_gives_length_ratio_when_the_oracle_is_a_substring():
    result = score("basic_arithmetic", "it is 5", QUESTION, "5", {"source_dataset": "basic_arithmetic"})
    assert result.score == pytest.approx(1 / 7)


def test_default_scorer_gives_zero_otherwise():
    assert score("basic_arithmetic", "<answer>6</answer>", QUESTION, "5", {}).score == 0.0
    assert score("basic_arithmetic", "", QUESTION, "5", {}).score == 0.0


def test_a_custom_scorer_is_used():
    (row,) = generate_rows({"knights_knaves": 1}, 1, seed=4)
    text = f"<answer>{row['answer']}</answer>"
    right = score("knights_knaves", text, row["question"], row["answer"], row["metadata"])
    assert right.score == 1.0
    # knights_knaves's own scorer parses the statement, the default one would give 0 here.
    reordered = ", and ".join(reversed(row["answer"].rstrip(".").split(", and "))) + "."
    again = score("knights_knaves", f"<answer>{reordered}</answer>", row["question"], row["answer"], row["metadata"])
    assert again.score == 1.0
    assert reordered != row["answer"]


def test_a_scorer_that_raises_gives_zero_with_reason_error():
    # The default scorer on a row whose oracle is null: `None in "5"` raises a TypeError.
    result = score("basic_arithmetic", "<answer>5</answer>", "q", None, {"source_dataset": "basic_arithmetic"})
    assert (result.score, result.extracted_answer, result.reason) == (0.0, "5", "error")


def test_an_unknown_task_scores_zero_with_reason_error():
    result = score("no_such_task", "<answer>1</answer>", "q", "1", {"source_dataset": "no_such_task"})
    assert (result.score, result.extracted_answer, result.reason) == (0.0, "1", "error")


# --- generation ---------------------------------------------------------------------------------------


def test_task_weights_parse():
    assert parse_task_weights(["a", "b=2.5"]) == {"a": 1.0, "b": 2.5}
    for bad in (["a=x"], ["a=0"], ["=2"], ["a", "a=2"]):
        with pytest.raises(ValueError):
            parse_task_weights(bad)


def test_generation_is_deterministic_in_the_seed_and_follows_the_row_format():
    weights = {"basic_arithmetic": 3, "leg_counting": 1}
    rows = generate_rows(weights, 12, seed=7)
    assert rows == generate_rows(weights, 12, seed=7)
    assert rows != generate_rows(weights, 12, seed=8)
    assert {row["metadata"]["source_dataset"] for row in rows} <= set(weights)
    for row in rows:
        system, user = row["responses_create_params"]["input"]
        assert system["role"] == "system" and "<answer>" in system["content"]
        assert user == {"role": "user", "content": row["question"]}
        assert isinstance(row["answer"], str)
    # The same task never repeats a question within a file.
    questions = [row["question"] for row in rows if row["metadata"]["source_dataset"] == "basic_arithmetic"]
    assert len(set(questions)) == len(questions)


def test_generation_without_a_system_prompt():
    (row,) = generate_rows({"gcd": 1}, 1, seed=0, system_prompt=None)
    assert row["responses_create_params"]["input"] == [{"role": "user", "content": row["question"]}]


def test_generation_rejects_unknown_and_excluded_tasks():
    for name in ("no_such_task", "composite"):
        with pytest.raises(ValueError, match=name):
            generate_rows({name: 1}, 1, seed=0)


# --- metrics ------------------------------------------------------------------------------------------


def test_metrics_per_task_and_failure_rates():
    rows = [
        {"task_name": "gcd", "reward": 1.0, "reason": "scored"},
        {"task_name": "gcd", "reward": 0.5, "reason": "scored"},
        {"task_name": "sudoku", "reward": 0.0, "reason": "timeout"},
        {"task_name": "sudoku", "reward": 0.0, "reason": "error"},
    ]
    m = reasoning_gym_metrics(rows)
    assert m["reasoning_gym/gcd/mean_reward"] == 0.75
    assert m["reasoning_gym/gcd/rollouts"] == 2.0
    assert m["reasoning_gym/sudoku/mean_reward"] == 0.0
    assert m["reasoning_gym/timeout_rate"] == 0.25
    assert m["reasoning_gym/error_rate"] == 0.25
    assert gym_aggregate_metrics([]) is None


# --- hedges: several different answers ------------------------------------------------------------

LEGS = {"source_dataset": "leg_counting", "animals": {"giraffe": 13, "chicken": 3, "jellyfish": 11, "scorpion": 10}}


def test_an_answer_boxing_several_guesses_is_not_scored():
    # gym redteam's boxed_many_first: the right answer first, wrong ones after; the reference scores 1.
    hedge = "\\boxed{ 138 } \\boxed{139} \\boxed{137} \\boxed{140} \\boxed{0}"
    assert several_answers(hedge)
    assert score("leg_counting", hedge, "legs?", "138", LEGS) == Score(0.0, None, "several_answers")
    assert score("leg_counting", hedge, "legs?", "138", LEGS, several="reference").score == 1.0
    tags = "<answer>139</answer> or <answer>138</answer>"
    assert score("leg_counting", tags, "legs?", "138", LEGS).reason == "several_answers"


def test_one_answer_given_twice_is_scored_and_tags_outrank_boxes():
    assert score("leg_counting", "\\boxed{138} so \\boxed{ 138 }", "legs?", "138", LEGS).score == 1.0
    assert not several_answers("\\boxed{1} \\boxed{2} <answer>138</answer>")  # the tag decides
