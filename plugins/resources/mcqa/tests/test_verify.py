"""Unit tests of mcqa's pure grading functions (gym_mcqa.verify) and its aggregate metrics, one
group per rule of the spec (§5)."""

from __future__ import annotations

import msgspec
import pytest

from gym_core.schemas import Response

from gym_mcqa.plugin import gym_aggregate_metrics, mcqa_metrics
from gym_mcqa.verify import (
    Grade,
    OutputRegexError,
    allowed_options,
    extract_answer_colon,
    extract_answer_colon_md,
    extract_lenient_boxed,
    extract_strict_boxed,
    extract_with_regexes,
    grade,
    last_boxed,
    map_foreign_letters,
    output_text,
    several_answers,
    unwrap_text,
)

OPTIONS = [{"A": "Karyotyping"}, {"B": "Polymerase Chain Reaction (PCR)"}, {"C": "Western blot"}, {"D": "ELISA"}]
PAIRS = allowed_options(OPTIONS)
LETTERS = [letter for letter, _ in PAIRS]


# --- OUTPUT_TEXT ------------------------------------------------------------------------------------


def test_output_text_concatenates_output_text_parts_without_separator():
    response = msgspec.convert(
        {
            "output": [
                {"type": "reasoning", "id": "r1", "summary": [{"type": "summary_text", "text": "\\boxed{A}"}]},
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "The answer "}]},
                {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
                {
                    "type": "message",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": "is \\boxed{"}, {"type": "refusal", "refusal": "no"}],
                },
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "B}"}]},
            ]
        },
        Response,
    )
    assert output_text(response) == "The answer is \\boxed{B}"


# --- options and gold -------------------------------------------------------------------------------


def test_allowed_letters_are_single_alphabetic_keys_with_text_uppercased():
    options = [{"a": "one"}, {"B": None}, {"CC": "two"}, {"1": "three"}, {"Б": "four"}, {"D": ""}]
    assert allowed_options(options) == [("A", "one"), ("Б", "four"), ("D", "")]
    assert allowed_options(None) == []


def test_gold_is_stripped_and_uppercased():
    assert grade("\\boxed{B}", OPTIONS, "  b \n").reward == 1.0


@pytest.mark.parametrize("options, gold", [(None, "B"), (OPTIONS, None), (OPTIONS, "  ")])
def test_without_options_or_gold_the_reward_is_zero(options, gold):
    assert grade("\\boxed{B}", options, gold).reward == 0.0


def test_empty_output_gives_no_answer():
    assert grade("  \n ", OPTIONS, "B") == grade("", OPTIONS, "B")
    result = grade(" ", OPTIONS, "B")
    assert (result.reward, result.extracted_answer, result.reason) == (0.0, None, "empty_response")


def test_wrong_and_unparseable_answers_have_their_reasons():
    assert grade("\\boxed{C}", OPTIONS, "B").reason == "wrong"
    unparsed = grade("I think B", OPTIONS, "B")
    assert (unparsed.reward, unparsed.extracted_answer, unparsed.reason) == (0.0, None, "no_answer")


# --- strict_single_letter_boxed ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, letter",
    [
        ("so \\boxed{B}", "B"),
        ("\\boxed{ [C] }", "C"),
        ("\\boxed{(B).}", "B"),
        ("\\boxed{\\text{D}}", "D"),
        ("\\boxed{\\text{ \\text{A} }}", "A"),
        ("\\boxed{C: Western blot}", "C"),
        ("\\boxed{ A) Karyotyping}", "A"),
        ("\\boxed{B - PCR}", "B"),
        ("\\boxed{A} then \\boxed{D}", "D"),  # the last box
        ("\\boxed{b}", None),  # lowercase is not accepted
        ("\\boxed{E}", None),  # not an option
        ("\\boxed{AB}", None),
        ("\\boxed{The answer is B}", None),
        ("\\boxed{B", None),
        ("\\boxed{B} and finally \\boxed{C", None),  # the last box never closes: earlier ones not tried
        ("\\boxed{{B}}", "B"),  # brace padding is non-letter padding
        ("no box: B", None),
    ],
)
def test_strict_boxed(text, letter):
    assert extract_strict_boxed(text, LETTERS) == letter


def test_last_boxed_counts_braces():
    assert last_boxed("\\boxed{\\frac{1}{2}} x") == "\\frac{1}{2}"
    assert last_boxed("\\boxed{a} \\boxed{b{c}") is None
    assert last_boxed("nothing") is None


def test_text_unwrapping_is_whole_string_like_the_reference():
    assert unwrap_text("  \\text{ B }  ") == "B"
    # Lazy group but full match: two \text{} spans read as one wrapper.
    assert unwrap_text("\\text{A} or \\text{B}") == "A} or \\text{B"
    assert unwrap_text("x \\text{B}") == "x \\text{B}"


# --- lenient_boxed ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, letter",
    [
        ("\\boxed{B}", "B"),  # strict first
        ("\\boxed{\\text{Western   Blot}}", "C"),
        ("\\boxed{I used karyotyping here}", "A"),  # option text is a substring of the box
        ("\\boxed{karyotyping or elisa}", None),  # two letters match
        ("\\boxed{nothing matches}", None),
        ("Western blot, no box", None),
    ],
)
def test_lenient_boxed(text, letter):
    assert extract_lenient_boxed(text, PAIRS) == letter


@pytest.mark.parametrize("mode", ["strict_single_letter_boxed", "lenient_boxed"])
@pytest.mark.parametrize(
    "text",
    [
        "\\boxed{A} \\boxed{C} \\boxed{D} \\boxed{B}",  # every option boxed, the right one last
        "\\boxed{B} \\boxed{A}",
        "\\boxed{A, B} then \\boxed{B}",  # a box listing two letters
    ],
)
def test_an_answer_boxing_several_options_has_none(text, mode):
    """gym redteam's hedges (boxed_many_last, answer_list) scored 1 under the reference's last box."""
    assert several_answers(text, OPTIONS, mode)
    assert grade(text, OPTIONS, "B", mode) == Grade(0.0, None, "several_answers")


def test_several_answers_reference_grades_the_last_box_and_one_answer_boxed_twice_is_one():
    assert grade("\\boxed{A} \\boxed{B}", OPTIONS, "B", several="reference").reward == 1.0
    assert grade("\\boxed{B}, that is \\boxed{(B)}", OPTIONS, "B").reward == 1.0
    # Lenient boxes naming two options by their text hedge too; naming one twice does not.
    assert grade("\\boxed{ELISA} \\boxed{Western blot}", OPTIONS, "C", "lenient_boxed").reason == "several_answers"
    assert grade("\\boxed{ELISA} \\boxed{D}", OPTIONS, "D", "lenient_boxed").reward == 1.0
    # Answer-colon modes are untouched (their own rules handle lists).
    assert not several_answers("\\boxed{A} \\boxed{B}", OPTIONS, "lenient_answer_colon")


def test_lenient_boxed_empty_option_text_matches_everything():
    # "" is a substring of any box: with another matching option the answer is ambiguous.
    pairs = allowed_options([{"A": "red"}, {"B": ""}])
    assert extract_lenient_boxed("\\boxed{red}", pairs) is None
    assert extract_lenient_boxed("\\boxed{blue}", pairs) == "B"


# --- lenient_answer_colon ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, letter",
    [
        ("Answer: B", "B"),
        ("ANSWER :  c", "C"),
        ("answer: \\text{D}", "D"),
        ("Answer: Western  BLOT", "C"),
        ("Answer: A\nFinal answer: D", "A"),  # the first match
        ("Answer: E", None),
        ("Answer: B because", None),
        ("Answer: the PCR one", None),
        ("The answer is B", None),
    ],
)
def test_answer_colon(text, letter):
    assert extract_answer_colon(text, PAIRS) == letter


# --- lenient_answer_colon_md ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, letter",
    [
        ("**Answer:** B", "B"),
        ("__Answer__: `C`.", "C"),
        ("Answer: A\n**Answer**: D", "D"),  # last first
        ("Answer: b", "B"),
        ("Answer: B) PCR", "B"),  # leading letter
        ("Answer: Option C is right", "C"),  # last standalone uppercase letter
        ("Answer: A or B", None),
        ("Answer: A/B", None),
        ("Answer: A, B", None),
        ("Answer: A and B", None),
        ("Answer: A B", None),
        ("Answer: C\nAnswer: A or B", "C"),  # an ambiguous last candidate falls back to an earlier one
        ("Answer: A or A", "A"),  # the same letter twice is not a choice between two
        ("Answer: Ｂ", "B"),  # full width
        ("Answer: ج", "C"),  # Arabic
        ("Answer: ড", "C"),  # Bengali
        ("Answer: E", None),
        ("Answer: 42", None),
        ("No answer line", None),
    ],
)
def test_answer_colon_md(text, letter):
    assert extract_answer_colon_md(text, LETTERS) == letter


def test_md_mode_is_only_used_when_asked():
    assert grade("**Answer:** B", OPTIONS, "B", "lenient_answer_colon_md").reward == 1.0
    assert grade("**Answer:** B", OPTIONS, "B", "strict_single_letter_boxed").reward == 0.0


# --- template_metadata.output_regex -----------------------------------------------------------------


def test_output_regex_takes_the_last_match_case_insensitively():
    assert extract_with_regexes("choice: a ... CHOICE: c", r"choice:\s*([a-d])", PAIRS) == "C"


def test_output_regex_accepts_a_letter_that_is_not_an_option():
    result = grade("Final: Z", OPTIONS, "B", output_regex=r"final:\s*(\w)")
    assert (result.reward, result.extracted_answer) == (0.0, "Z")


def test_output_regex_without_group_uses_the_whole_match():
    assert extract_with_regexes("pick B", r"\bB\b", PAIRS) == "B"


def test_output_regex_matches_option_text():
    assert extract_with_regexes("Final: western   blot", r"final:\s*(.+)", PAIRS) == "C"


def test_output_regex_maps_foreign_letters():
    assert map_foreign_letters("xب") == "x B"
    assert extract_with_regexes("Final: د", r"final:\s*(.+)", PAIRS) == "D"


def test_output_regexes_are_tried_in_order_until_one_predicts():
    patterns = ["(((", r"nomatch:(\w)", r"final:\s*(.+)", r"(B)"]  # invalid, no match, no letter, letter
    assert extract_with_regexes("Final: not an option. B", patterns, PAIRS) == "B"


def test_output_regex_comes_before_the_grading_mode():
    result = grade("\\boxed{A}. Really: D", OPTIONS, "D", output_regex=r"really:\s*([A-D])")
    assert result.extracted_answer == "D"


def test_output_regex_without_prediction_falls_back_to_the_mode():
    assert grade("\\boxed{B}", OPTIONS, "B", output_regex=[r"final:\s*(\w)"]).extracted_answer == "B"


def test_output_regex_with_two_groups_that_matches_is_a_row_error():
    with pytest.raises(OutputRegexError, match="output_regex"):
        extract_with_regexes("final: B", r"(final):\s*(\w)", PAIRS)
    # No match, no crash (as in the reference).
    assert extract_with_regexes("\\boxed{B}", r"(final):\s*(\w)", PAIRS) is None


# --- metrics ----------------------------------------------------------------------------------------


def rollout(task, index, reward, answer):
    return {"task_index": task, "rollout_index": index, "reward": reward, "extracted_answer": answer}


def test_metrics_follow_the_pass_at_k_helper():
    rows = [
        rollout(0, 0, 1.0, "B"), rollout(0, 1, 0.0, "C"), rollout(0, 2, 0.0, "C"), rollout(0, 3, 1.0, "B"),
        rollout(1, 0, 0.0, None), rollout(1, 1, 0.0, None), rollout(1, 2, 0.0, "A"), rollout(1, 3, 0.0, None),
    ]  # fmt: skip
    m = mcqa_metrics(rows)
    assert m["mcqa/pass@1/accuracy"] == pytest.approx(25.0)
    assert m["mcqa/pass@4/accuracy"] == pytest.approx(50.0)
    # task 0: 1 - C(2,2)/C(4,2) = 5/6; task 1: 0
    assert m["mcqa/pass@2/accuracy"] == pytest.approx(100 * (5 / 6) / 2)
    assert m["mcqa/pass@1[avg-of-2]/accuracy"] == pytest.approx(25.0)
    # no_answer: task 0 never, task 1 three times of four
    assert m["mcqa/pass@1[avg-of-4]/no_answer"] == pytest.approx(100 * 3 / 8)
    assert m["mcqa/pass@4/no_answer"] == pytest.approx(50.0)
    # majority of the first 4 on task 0: (B,1) and (C,0) tie -> 0.5; task 1: only (A,0) -> 0
    assert m["mcqa/majority@4/accuracy"] == pytest.approx(25.0)
    # first 1: task 0 votes B (right)
    assert m["mcqa/majority@1/accuracy"] == pytest.approx(50.0)
    # per-run accuracies 0.5, 0, 0, 0.5: sample std sqrt(0.25 / 3)
    assert m["mcqa/pass@1[avg-of-4]/accuracy/std_dev_across_runs"] == pytest.approx(100 * (0.25 / 3) ** 0.5)
    assert m["mcqa/pass@1[avg-of-4]/accuracy/std_err_across_runs"] == pytest.approx(100 * (0.25 / 3) ** 0.5 / 2)
    assert "mcqa/pass@3/accuracy" not in m  # k runs over powers of two and the largest


def test_metrics_with_one_rollout_per_task():
    m = gym_aggregate_metrics([rollout(0, 0, 1.0, "A"), rollout(1, 0, 0.0, None)])
    assert m["mcqa/pass@1/accuracy"] == 50.0
    assert m["mcqa/pass@1/no_answer"] == 50.0
    assert m["mcqa/pass@1[avg-of-1]/accuracy/std_dev_across_runs"] == 0.0
    assert gym_aggregate_metrics([]) is None
