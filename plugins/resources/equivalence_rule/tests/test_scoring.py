"""The pure scoring functions: the text graded, normalisation, the three rules, difflib's quirks."""

from __future__ import annotations

import re
from difflib import SequenceMatcher

import pytest

from gym_core.schemas import decode_response

from gym_equivalence_rule.scoring import (
    GRADING_RULES,
    normalize,
    output_text,
    score,
    sequence_ratio,
    weighted_sequence_ratio,
)
from gym_equivalence_rule.server import reason_for


def message(*parts: dict, role: str = "assistant") -> dict:
    return {"type": "message", "role": role, "status": "completed", "content": list(parts)}


def text(value: str) -> dict:
    return {"type": "output_text", "text": value, "annotations": []}


# ---------------------------------------------------------------- output_text


def test_output_text_concatenates_every_output_text_part_without_separator():
    response = decode_response({"output": [message(text("Xq7L"), text("m2Pa9Z")), message(text(" Raise a glass"))]})
    assert output_text(response) == "Xq7Lm2Pa9Z Raise a glass"


def test_output_text_ignores_reasoning_function_calls_their_outputs_and_refusals():
    response = decode_response(
        {
            "output": [
                {"type": "reasoning", "summary": [{"type": "summary_text", "text": "thinking"}]},
                {"type": "function_call", "call_id": "c1", "name": "lookup", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c1", "output": "tool says hi"},
                message({"type": "refusal", "refusal": "I cannot"}, text("answer")),
            ]
        }
    )
    assert output_text(response) == "answer"


def test_output_text_of_a_response_without_messages_is_empty():
    only_reasoning = decode_response({"output": [{"type": "reasoning", "summary": []}]})
    assert output_text(only_reasoning) == ""
    assert output_text(decode_response({"output": []})) == ""


def test_output_text_counts_a_plain_string_assistant_content():
    response = decode_response({"output": [{"type": "message", "role": "assistant", "content": "plain"}]})
    assert output_text(response) == "plain"


# ---------------------------------------------------------------- normalize


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("  Hello World  ", "hello world"),
        ("A\tB\n\nC", "a b c"),
        ("a \u00a0\u2003 b", "a b"),  # no-break and em spaces are whitespace too
        ("\n\n", ""),
        ("", ""),
        ("MiXeD CaSe", "mixed case"),
    ],
)
def test_normalize(raw, expected):
    assert normalize(raw) == expected


@pytest.mark.parametrize("raw", ["  a\x1cb\x1f c\u2028d\r\n", "\u3000Ünïcödé\u0085TEXT\x0b", "ΣΑΣ  x", "İstanbul  "])
def test_normalize_is_strip_then_lower_then_collapse(raw):
    assert normalize(raw) == re.sub(r"\s+", " ", raw.strip().lower())


# ---------------------------------------------------------------- sequence_ratio


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ("abcd", "bcde", 0.75),  # 2·3 / 8
        ("", "", 1.0),
        ("", "abc", 0.0),
        ("abc", "", 0.0),
        ("abc", "abc", 1.0),
        ("abc", "xyz", 0.0),
    ],
)
def test_sequence_ratio_values(a, b, expected):
    assert sequence_ratio(a, b) == expected


def test_sequence_ratio_keeps_difflibs_autojunk_on_long_answers():
    # Quirk reproduced: in an answer of 200 characters or more, a character that makes up over 1%
    # of it never starts a match. One extra leading character then hides the whole answer.
    assert sequence_ratio("x" + "a" * 300, "a" * 300) == 0.0
    assert SequenceMatcher(None, "x" + "a" * 300, "a" * 300, autojunk=False).ratio() > 0.99
    assert sequence_ratio("x" + "a" * 199, "a" * 199) == pytest.approx(2 * 199 / 399)  # below 200: no autojunk
    # A match that starts at the strings' beginning still extends over popular characters.
    assert sequence_ratio("a" * 300, "a" * 300) == 1.0
    # Autojunk looks at the answer (the second string) only.
    assert sequence_ratio("x" + "a" * 300, "a" * 150) == pytest.approx(2 * 150 / 451)


def test_autojunk_hides_a_long_answer_after_a_preamble():
    answer = "the answer is long " * 12  # 228 characters, every one of them popular
    assert sequence_ratio("hello " + answer, answer) == 0.0
    assert sequence_ratio(answer, answer) == 1.0


def test_sequence_ratio_is_difflibs_ratio():
    a = "the shimmering depths hold a toast to every sailor"
    b = "to the shimmering depths, a toast for every sailor!"
    assert sequence_ratio(a, b) == SequenceMatcher(None, a, b).ratio()
    # Not symmetric: the answer is the second argument, the one autojunk looks at.
    assert sequence_ratio("x" + "a" * 300, "a" * 150) > 0.66
    assert sequence_ratio("a" * 150, "x" + "a" * 300) == 0.0


# ---------------------------------------------------------------- weighted_sequence_ratio


def test_weighted_ratio_adds_the_prefix_bonus():
    # Full ratio 2·10/23; the response's first 10 characters equal the answer's: bonus 0.15.
    assert weighted_sequence_ratio("abcdefghijxyz", "abcdefghij") == pytest.approx(0.85 * 20 / 23 + 0.15)


def test_weighted_ratio_compares_the_prefix_with_the_same_length_of_response():
    answer = "k3vbn8wq1eiron wheels hum"
    right_start = "k3vbn8wq1e iron wheels hum"
    wrong_start = "zzzzzzzzzziron wheels hum"
    assert weighted_sequence_ratio(right_start, answer) == pytest.approx(
        0.85 * SequenceMatcher(None, right_start, answer).ratio() + 0.15
    )
    assert weighted_sequence_ratio(wrong_start, answer) == pytest.approx(
        0.85 * SequenceMatcher(None, wrong_start, answer).ratio()
    )


def test_weighted_ratio_of_a_short_answer_uses_all_of_it_as_prefix():
    # p = "abc" (shorter than 10): response[:3] = "abx" against "abc".
    assert weighted_sequence_ratio("abxdef", "abc") == pytest.approx(0.85 * (2 * 2 / 9) + 0.15 * (2 * 2 / 6))


def test_weighted_ratio_edge_cases():
    assert weighted_sequence_ratio("", "") == 1.0
    assert weighted_sequence_ratio("anything", "") == pytest.approx(0.15)  # "" vs "" prefixes: ratio 1.0
    assert weighted_sequence_ratio("", "answer") == 0.0
    same = "raise a glass to the tide, which always comes back."
    assert weighted_sequence_ratio(same, same) == 1.0


def test_weighted_ratio_stays_within_0_and_1():
    samples = ["", "a", "ab" * 7, "xyz", "hello world", "k3vbn8wq1e raise a glass", "a" * 250]
    for a in samples:
        for b in samples:
            assert 0.0 <= weighted_sequence_ratio(a, b) <= 1.0


# ---------------------------------------------------------------- score


def test_grading_rules():
    assert GRADING_RULES == ("exact", "seq_match", "weighted_seq_match")


def test_exact_normalises_both_sides():
    assert score("exact", "  The Quick\n brown FOX. ", "the quick brown fox.") == 1.0
    assert score("exact", "the quick brown fox", "the quick brown fox.") == 0.0
    assert score("exact", "", "") == 1.0
    assert score("exact", "", "x") == 0.0


def test_seq_match_scores_the_normalised_strings():
    assert score("seq_match", "ABCD", " bcde\n") == 0.75
    assert score("seq_match", "Hello   World", "hello world") == 1.0


def test_weighted_seq_match_scores_the_normalised_strings():
    assert score("weighted_seq_match", "ABCDEFGHIJ  XYZ", "abcdefghij") == pytest.approx(0.85 * 20 / 24 + 0.15)
    assert score("weighted_seq_match", "Hello   World", "hello world") == 1.0


def test_normalised_long_answer_keeps_the_autojunk_quirk():
    assert score("seq_match", "X" + "A" * 300, "a" * 300) == 0.0
    assert score("weighted_seq_match", "X" + "A" * 300, "a" * 300) == pytest.approx(0.15 * 2 * 9 / 20)
    assert score("seq_match", "A" * 300, "a" * 300) == 1.0


def test_unknown_rule_is_an_error():
    with pytest.raises(ValueError, match="fuzzy"):
        score("fuzzy", "a", "a")  # type: ignore[arg-type]


# ---------------------------------------------------------------- reason_for


@pytest.mark.parametrize(
    ("value", "response", "answer", "reason"),
    [
        (1.0, "a", "a", "match"),
        (1.0, "", "", "match"),
        (0.5, "ab", "ac", "partial"),
        (0.0, "x", "y", "no_match"),
        (0.0, "", "y", "empty_response"),
        (0.0, " \n ", "y", "empty_response"),
        (0.15, "x", "", "partial"),
    ],
)
def test_reason_for(value, response, answer, reason):
    assert reason_for(value, response, answer) == reason
