"""The grading rules of §4 of the environment spec, one by one, on the pure functions (no server)."""

from __future__ import annotations

import pytest

from gym_string_match.grading import (
    EXTRACTION_MODES,
    Grade,
    boxed_answers,
    delete_units,
    extract_answer,
    extract_boxed,
    extract_final_answer,
    extract_full_response,
    extract_last_line,
    float_form,
    grade,
    lenient_match,
    map_unicode_math,
    normalize_list,
    preprocess,
    remove_thousands_separators,
    replace_us_states,
    several_answers,
    soft_numeric_score,
    strip_latex,
)

# ---------------------------------------------------------------- extraction: boxed


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (r"so \boxed{42}.", "42"),
        (r"\boxed{1} then \boxed{2}", "2"),  # the last box
        (r"\boxed{\frac{1}{2}}", r"\frac{1}{2}"),  # nested braces
        (r"\boxed{  7 }", "7"),  # stripped
        (r"\boxed{3} and then \boxed{4", "3"),  # the last box never closes: the one before it
        (r"\boxed{\text{Paris}}", "Paris"),  # \text{} wrapper removed
        (r"\boxed{\text{ \text{ Paris } }}", "Paris"),  # ...repeatedly, stripping each time
        (r"\boxed{\text{a} + \text{b}}", r"a} + \text{b"),  # quirk: a full match of \text\{\s*(.*?)\s*\}
        (r"\boxed{\}}", "\\"),  # quirk: braces are counted without escapes
        (r"\boxed{x + \boxed{3}}", "3"),  # the last opener is the inner box, and it closes
        ("\\boxed{a\nb}", "a\nb"),
    ],
)
def test_boxed_extraction(text, expected):
    assert extract_boxed(text) == expected


@pytest.mark.parametrize("text", ["no box here", r"\boxed{42", r"\boxed{}", r"\boxed{ \text{ } }", r"\boxed 42", ""])
def test_boxed_extraction_finds_nothing(text):
    assert extract_boxed(text) is None


# ---------------------------------------------------------------- extraction: final_answer


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Final answer: 42", "42"),
        ("final ANSWER : 42", "42"),  # any case, spaces before the colon
        ("Final\n answer: 42", "42"),  # \s+ between the words
        ("answer：42", "42"),  # full-width colon
        ("Answer: 1\nsome more\nAnswer: 2\nthe end", "2"),  # the last match, to the end of its line
        ("Answer:\n  42\n", "42"),  # \s* crosses the line break
        ("Answer: 42.", "42"),  # trailing full stop cut
        ("Answer: 3.14...  ", "3.14"),  # and every trailing full stop
        ("Answer: 3.14", "3.14"),  # an inner full stop stays
        ("Final answer: The answer: 42", "The answer: 42"),  # one match takes the whole line
        ("My answer is \\boxed{7}", "7"),  # no "answer:": the boxed answer
        ("The Answer: \\boxed{7}", "\\boxed{7}"),  # a match wins over the box
    ],
)
def test_final_answer_extraction(text, expected):
    assert extract_final_answer(text) == expected


@pytest.mark.parametrize("text", ["The answer is 42", "Answer: ...", ""])
def test_final_answer_extraction_finds_nothing(text):
    assert extract_final_answer(text) is None


# ---------------------------------------------------------------- extraction: last_line, full_response


def test_last_line_is_the_last_non_blank_line_stripped():
    assert extract_last_line("First\n  Second line  \n\n   \n") == "Second line"
    assert extract_last_line("only") == "only"
    assert extract_last_line("\n  \n") is None


def test_full_response_is_the_stripped_text_or_none():
    assert extract_full_response("  a\nb  ") == "a\nb"
    assert extract_full_response(" \n ") is None


def test_extract_answer_dispatches_by_mode_and_rejects_unknown_modes():
    text = "Answer: 1\n\\boxed{2}\nthree"
    assert [extract_answer(text, mode) for mode in EXTRACTION_MODES] == ["2", "1", "three", text]
    assert extract_answer(text) == "1"  # final_answer by default
    with pytest.raises(ValueError, match="unknown extraction mode"):
        extract_answer(text, "first_line")


# ---------------------------------------------------------------- normalisation stages


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("ＰＡＲＩＳ", "paris"),  # NFKC, then lowercase
        ('"Paris"', "paris"),  # one pair of quotes
        ("''x''", "'x'"),  # only one pair
        ("'Paris\"", "'paris\""),  # quotes must match
        ('"', '"'),  # at least 2 characters
        ("Hello?!.", "hello"),
        ("...", "..."),  # not emptied
        ("x²", "x2"),  # NFKC already turns superscripts into digits
    ],
)
def test_preprocess(raw, expected):
    assert preprocess(raw) == expected


def test_float_form():
    assert float_form("80") == "80.0"
    assert float_form("$1e3$") == "1000.0"
    assert float_form("50\\%") == "50.0"
    assert float_form("\\$ 7 ") == "7.0"
    assert float_form("1_000") == "1000.0"  # Python's float() reads underscores
    assert float_form("seven") == "seven"


def test_remove_thousands_separators_is_a_single_pass():
    assert remove_thousands_separators("1,234") == "1234"
    assert remove_thousands_separators("1,234,567") == "1234,567"
    assert remove_thousands_separators("50\\%") == "50%"


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("\\text{paris}", "paris"),
        ("\\mathbf{\\text{ab}} + \\emph{c}", "ab + c"),
        ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
        ("\\textbf{a{b}c}", "a{b}c"),  # brace-balanced
        ("\\(x\\) and \\[y\\] and $z$", "x and y and z"),
        ("\\text{open", "\\text{open"),  # never closed: kept
        ("  a \n\t b  ", "a b"),
        ("\\textsc{x}", "\\textsc{x}"),  # not in the list
    ],
)
def test_strip_latex(raw, expected):
    assert strip_latex(raw) == expected


def test_normalize_list():
    assert normalize_list("red; green, blue") == "red green blue"
    assert normalize_list("the candid camera shots here") == "the c id camera shots here"  # inside words too
    assert normalize_list("apples, oranges and pears") == "apples, oranges and pears"  # < 0.9 × length: kept


def test_replace_us_states():
    assert replace_us_states("texas") == "tx"
    assert replace_us_states("west virginia") == "wv"  # not "west va"
    assert replace_us_states("arkansas") == "ar"  # not "arks"
    assert replace_us_states("district of columbia") == "dc"
    assert replace_us_states("oregon") == "or"  # the code survives the removal of "or"


def test_map_unicode_math():
    assert map_unicode_math("90°") == "90^\\circ"
    assert map_unicode_math("√2·π") == "\\sqrt2\\cdot\\pi"
    assert map_unicode_math("x²−1") == "x^2-1"
    assert map_unicode_math("1＋2＝3") == "1+2=3"  # full-width operators


def test_delete_units():
    assert delete_units("90^{\\circ}") == "90"
    assert delete_units("90^\\circ and 5\\circ and 7°") == "90 and 5 and 7"
    assert delete_units("5 cm² 6 mm 7 km 8 kg") == "5  6  7  8 "
    assert delete_units("mom") == "o"  # quirk: every bare m goes


def test_soft_numeric_score():
    assert soft_numeric_score("80 km", "80") == 1.0
    assert soft_numeric_score("101", "100") == pytest.approx(0.99**2)
    assert soft_numeric_score("£1,000", "1000") == 1.0
    assert soft_numeric_score("5 meters", "5") == 0.0  # "5 eters" is no number
    assert soft_numeric_score("50\\%", "50") == 0.0  # % goes first, leaving "50\"
    assert soft_numeric_score("-100", "100") == 0.0  # clamped at 0
    assert soft_numeric_score("0", "0") == 1.0  # |g| floored at 1e-9
    assert soft_numeric_score("nan", "nan") == 0.0
    assert soft_numeric_score("inf", "inf") == 0.0
    assert soft_numeric_score("1e999", "5") == 0.0


# ---------------------------------------------------------------- lenient grading


@pytest.mark.parametrize(
    ("predicted", "expected", "verdict"),
    [
        ("Paris", "paris", (1.0, "exact")),
        ("'Paris.'", "PARIS", (1.0, "exact")),
        ("5.0", "5", (1.0, "float")),
        ("$5", "5", (1.0, "float")),
        ("1,234", "1234", (1.0, "thousands")),
        ("1,234.5", "1234.5", (1.0, "thousands")),
        ("\\text{Paris}", "paris", (1.0, "latex")),
        ("$x + 1$", "x+1", (0.0, None)),  # spaces inside are kept, and x is no number
        ("red; yellow, blue", "red yellow blue", (1.0, "list")),
        ("Texas", "TX", (1.0, "us_states")),
        ("West Virginia", "wv", (1.0, "us_states")),
        ("80 km", "80", (0.98, "soft_numeric")),  # an exact number that needs units dropped: 0.98
        ("1,234,567", "1234567", (0.98, "soft_numeric")),  # the single-pass separator removal misses it
        ("3.1416", "3.14159", (0.98, "soft_numeric")),
        ("101", "100", (0.98, "soft_numeric")),  # (1 - 0.01)² = 0.9801 > 0.98
        ("101.1", "100", (0.0, None)),  # (1 - 0.011)² < 0.98
        ("5 m", "5", (0.98, "soft_numeric")),
        ("5 meters", "5", (0.0, None)),  # quirk: the bare m goes, "eters" stays
        ("5 m²", "5", (0.0, None)),  # NFKC made ² a 2: "5 2"
        ("90°", "90", (0.98, "soft_numeric")),
        ("\\text{5 km}", "5", (1.0, "final")),  # LaTeX and units removed: equal
        ("\\text{80.5 km}", "80", (0.98, "final_soft_numeric")),
        ("apples, oranges and pears", "apples oranges pears", (0.0, None)),  # the 0.9 length rule
        ("London", "Paris", (0.0, None)),
    ],
)
def test_lenient_match(predicted, expected, verdict):
    assert lenient_match(predicted, expected) == verdict


# ---------------------------------------------------------------- one verdict


def test_grade_lenient_by_default():
    assert grade("Final answer: PARIS.", "Paris") == Grade(1.0, "PARIS", "match", "exact")
    assert grade("Answer: 80 km", "80") == Grade(0.98, "80 km", "near_match", "soft_numeric")
    assert grade("Answer: Rome", "Paris") == Grade(0.0, "Rome", "mismatch")


def test_grade_case_sensitive_compares_stripped_strings_only():
    assert grade("Answer: PARIS", "Paris", case_sensitive=True) == Grade(0.0, "PARIS", "mismatch")
    assert grade("Answer: Paris", " Paris ", case_sensitive=True) == Grade(1.0, "Paris", "match", "case_sensitive")
    assert grade("Answer: 5.0", "5", case_sensitive=True).reward == 0.0  # no numeric leniency


def test_grade_scores_zero_without_an_answer_or_a_reference():
    assert grade("I do not know", "Paris", "boxed") == Grade(0.0, None, "no_answer")
    assert grade("   ", "Paris", "full_response") == Grade(0.0, None, "no_answer")
    assert grade("Paris", "", "full_response") == Grade(0.0, "Paris", "empty_expected_answer")
    assert grade("Paris", "", "full_response", case_sensitive=True).reward == 0.0


# --- hedges: several different boxed answers ---------------------------------------------------


@pytest.mark.parametrize(
    ("text", "mode"),
    [
        ("\\boxed{0} \\boxed{1} \\boxed{yes} \\boxed{Paris}", "boxed"),  # gym redteam's boxed_many_last
        ("\\boxed{Paris} \\boxed{London}", "boxed"),
        ("It is \\boxed{Paris}, or \\boxed{\\text{Lyon}}", "final_answer"),  # no answer: line, so boxes decide
    ],
)
def test_an_answer_boxing_different_candidates_scores_0(text, mode):
    assert several_answers(text, mode)
    assert grade(text, "Paris", mode) == Grade(0.0, None, "several_answers")
    # The reference's reading: the last box alone.
    assert grade("\\boxed{0} \\boxed{Paris}", "Paris", "boxed", several="reference").reward == 1.0


def test_one_answer_boxed_twice_or_nested_is_one_answer_and_other_modes_are_untouched():
    assert grade("\\boxed{Paris}, so \\boxed{\\text{paris}}.", "Paris", "boxed").reward == 1.0
    assert grade("\\boxed{\\boxed{84}}", "84", "boxed").reward == 1.0
    assert not several_answers("\\boxed{1} \\boxed{2}\nFinal answer: 2", "final_answer")
    assert not several_answers("\\boxed{1} \\boxed{2}", "last_line")
    assert boxed_answers("\\boxed{a} x \\boxed{\\text{b}} \\boxed{c") == ["a", "\\text{b}"]
