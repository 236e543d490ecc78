"""The grading rules of arc_agi as pure functions: the text graded, extraction (the reference's
quirks included), exact match, and the worker pool behind long texts."""

from __future__ import annotations

import asyncio

import pytest

from gym_core.schemas import decode_response
from gym_core.workers import WorkerPoolClosed

from gym_arc_agi.verify import (
    INLINE_MAX_CHARS,
    Verdict,
    agrade,
    assistant_text,
    extract_grid,
    grade,
    grid_candidates,
    make_grader_pool,
    parse_grid,
    several_grids,
)

# --- the graded text (ASSISTANT_TEXT_NL) ---------------------------------------------------------


def message(*parts, role="assistant"):
    return {"type": "message", "role": role, "content": list(parts)}


def text(value):
    return {"type": "output_text", "text": value, "annotations": []}


def test_assistant_text_joins_every_assistant_text_part_with_newlines_and_strips():
    response = decode_response(
        {
            "output": [
                {"type": "reasoning", "summary": [{"type": "summary_text", "text": "\\boxed{[[9]]}"}]},
                message(text("  [[1,"), text("")),
                {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c", "output": "[[7]]"},
                message(text("2]]  ")),
                message(text("[[8]]"), role="user"),
            ]
        }
    )
    # The empty part still contributes its separator, as in the reference.
    assert assistant_text(response) == "[[1,\n\n2]]"
    assert extract_grid(assistant_text(response)) == [[1, 2]]


def test_refusals_are_not_graded():
    response = decode_response({"output": [message({"type": "refusal", "refusal": "\\boxed{[[1]]}"}, text("no grid"))]})
    assert assistant_text(response) == "no grid"


def test_a_plain_string_content_counts():
    response = decode_response({"output": [{"type": "message", "role": "assistant", "content": "\\boxed{[[3]]}"}]})
    assert assistant_text(response) == "\\boxed{[[3]]}"


# --- candidates ---------------------------------------------------------------------------------


def test_boxed_candidates_come_first_and_in_document_order():
    assert grid_candidates("[[5]] \\boxed{[[1]]} then \\boxed{[[2], [3]]}") == ["[[1]]", "[[2], [3]]"]


def test_bare_candidates_only_when_nothing_is_boxed():
    assert grid_candidates("first [[1, 2]] and then [[3]].") == ["[[1, 2]]", "[[3]]"]
    assert grid_candidates("\\boxed{42} [[1]]") == ["[[1]]"]


def test_boxed_spans_lines():
    assert grid_candidates("\\boxed{[[1, 2],\n [3, 4]]}") == ["[[1, 2],\n [3, 4]]"]


@pytest.mark.parametrize(
    "boxed, bare",
    [
        ("\\boxed{ [[1]]}", ["[[1]]"]),
        ("\\boxed{[[1]] }", ["[[1]]"]),
        ("\\boxed{[[-1]]}", []),
        ("\\boxed{[[1.5]]}", []),
        ("\\boxed{[[a]]}", []),
    ],
)
def test_a_box_holding_anything_but_the_grid_is_not_a_boxed_candidate(boxed, bare):
    # With no boxed match the bare pattern is used instead; with another boxed grid, only that one counts.
    assert grid_candidates(boxed) == bare
    assert grid_candidates(boxed + " \\boxed{[[4]]}") == ["[[4]]"]


def test_bare_pattern_is_greedy_over_digits_whitespace_commas_and_brackets():
    assert grid_candidates("[[1]]\n[[2]]") == ["[[1]]\n[[2]]"]
    assert grid_candidates("[[1]], [[2]] end") == ["[[1]], [[2]]"]
    assert grid_candidates("[[1]] or [[2]]") == ["[[1]]", "[[2]]"]


# --- parsing ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "candidate, grid",
    [
        ("[[1, 2], [3, 4]]", [[1, 2], [3, 4]]),
        ("[ [0] ,\n [9] ]", [[0], [9]]),
        ("[[1, 2], [3]]", [[1, 2], [3]]),  # ragged rows are accepted
        ("[[1], []]", [[1], []]),  # only the first row must be non-empty
        ("[[1 2]]", [[12]]),  # whitespace is deleted before parsing
        ("[[123456789012345678901234567890]]", [[123456789012345678901234567890]]),
    ],
)
def test_parse_grid_accepts(candidate, grid):
    assert parse_grid(candidate) == grid


@pytest.mark.parametrize(
    "candidate",
    [
        "[[]]",  # empty first row
        "[[ ]]",
        "[[], [1]]",
        "[[1, [2]]]",  # a cell that is a list
        "[[[1]]]",
        "[1, [2]]",  # a row that is not a list
        "[[01]]",  # JSON has no leading zeros
        "[[1,]]",  # nor trailing commas
        "[[1]][[2]]",
        "[[1]],[[2]]",
        "[[" + "1" * 5000 + "]]",  # past Python's int-from-string limit
        "[" * 100_000 + "]" * 100_000,  # deeper than the JSON parser recurses
    ],
)
def test_parse_grid_refuses(candidate):
    assert parse_grid(candidate) is None


# --- extraction: the first candidate that parses wins ----------------------------------------------


def test_first_valid_boxed_grid_wins():
    assert extract_grid("\\boxed{[[1]]} or rather \\boxed{[[2]]}") == [[1]]


def test_an_invalid_boxed_grid_is_skipped_for_the_next_boxed_one():
    assert extract_grid("\\boxed{[[01]]} \\boxed{[[2]]}") == [[2]]
    assert extract_grid("\\boxed{[[ ]]} [[5]] \\boxed{[[2, 3]]}") == [[2, 3]]


def test_invalid_boxed_grids_do_not_fall_back_to_bare_ones():
    assert extract_grid("[[5]] and \\boxed{[[1, [2]]]}") is None


def test_bare_grid_when_nothing_is_boxed():
    assert extract_grid("The output is\n[[0, 1],\n [1, 0]]\nbecause...") == [[0, 1], [1, 0]]
    assert extract_grid("[[01]] or [[1]]") == [[1]]


def test_grids_separated_only_by_whitespace_or_commas_merge_and_then_nothing_parses():
    assert extract_grid("[[1, 2]]\n[[3, 4]]") is None
    assert extract_grid("[[1, 2]], [[3, 4]]") is None


@pytest.mark.parametrize("answer", ["", "no grid here", "[1, 2, 3]", "[[-1, 2]]", "[['a']]", "\\boxed{3}", "[[ ]]"])
def test_no_grid(answer):
    assert extract_grid(answer) is None


def test_unicode_digits_match_the_pattern_but_do_not_parse():
    assert grid_candidates("[[\u0663]]") == ["[[\u0663]]"]
    assert extract_grid("[[\u0663]]") is None


# --- grading --------------------------------------------------------------------------------------


def test_grade_exact_match():
    assert grade("\\boxed{[[1, 2], [3, 4]]}", [[1, 2], [3, 4]]) == Verdict(1.0, [[1, 2], [3, 4]], "correct")


@pytest.mark.parametrize(
    "predicted",
    [
        "[[1, 2], [3, 5]]",
        "[[1, 2]]",
        "[[1, 2], [3, 4], [5, 6]]",
        "[[2, 1], [4, 3]]",
        "[[1, 2, 0], [3, 4, 0]]",
        "[[1, 2], [3]]",
    ],
)
def test_grade_any_difference_is_wrong(predicted):
    verdict = grade(f"\\boxed{{{predicted}}}", [[1, 2], [3, 4]])
    assert (verdict.reward, verdict.reason, verdict.extraction_successful) == (0.0, "wrong", True)


def test_grade_without_a_grid():
    verdict = grade("I give up", [[1]])
    assert verdict == Verdict(0.0, None, "no_grid") and not verdict.extraction_successful


def test_grade_with_an_empty_expected_output_never_rewards():
    assert grade("\\boxed{[[1]]}", []) == Verdict(0.0, [[1]], "no_expected_output")


# --- the worker pool ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pool():
    with make_grader_pool(1, memory_limit_mb=1024) as pool:
        yield pool


async def test_agrade_long_text_in_a_worker_gives_the_same_verdict(pool):
    long = "Let me think. " * (INLINE_MAX_CHARS // 10) + "\\boxed{[[7, 7]]}"
    assert len(long) > INLINE_MAX_CHARS
    assert await agrade(long, [[7, 7]], pool=pool, timeout_s=5.0) == Verdict(1.0, [[7, 7]], "correct")
    assert await agrade("\\boxed{[[7]]}", [[7, 7]], pool=pool, timeout_s=5.0) == Verdict(0.0, [[7]], "wrong")


async def test_pathological_text_times_out_and_the_pool_goes_on(pool):
    # The bare pattern backtracks quadratically on a long run of brackets: minutes of CPU here.
    verdict, ticks = await _with_ticks(agrade("[" * 300_000, [[1]], pool=pool, timeout_s=0.3))
    assert verdict == Verdict(0.0, None, "timeout")
    assert ticks >= 2, "the event loop was blocked while grading"
    long = " " * INLINE_MAX_CHARS + "[[1]]"
    assert await agrade(long, [[1]], pool=pool, timeout_s=5.0) == Verdict(1.0, [[1]], "correct")


async def _with_ticks(coroutine):
    ticks = 0
    task = asyncio.ensure_future(coroutine)
    while not task.done():
        await asyncio.sleep(0.05)
        ticks += 1
    return task.result(), ticks


async def test_agrade_on_a_closed_pool_raises():
    closed = make_grader_pool(1, memory_limit_mb=None)
    closed.close()
    with pytest.raises(WorkerPoolClosed):
        await agrade(" " * INLINE_MAX_CHARS + "[[1]]", [[1]], pool=closed, timeout_s=1.0)
    # Short texts never need the pool.
    assert await agrade("[[1]]", [[1]], pool=closed, timeout_s=1.0) == Verdict(1.0, [[1]], "correct")


# --- hedges: several different boxed grids ----------------------------------------------------------


def test_boxed_grids_that_differ_are_a_hedge_with_no_grid_whichever_comes_first():
    expected = [[0, 0, 3], [0, 5, 0]]
    # gym redteam's boxed_many_first: the right grid first, then wrong ones of the same shape.
    hedge = "\\boxed{[[0, 0, 3], [0, 5, 0]]} \\boxed{[[1, 1, 4], [1, 6, 1]]} \\boxed{[[2, 2, 5], [2, 7, 2]]}"
    assert several_grids(hedge)
    assert grade(hedge, expected) == Verdict(0.0, None, "several_answers")
    assert grade("\\boxed{[[9]]} then \\boxed{[[0, 0, 3], [0, 5, 0]]}", expected).reason == "several_answers"
    # The reference's reading: the first boxed grid.
    assert grade(hedge, expected, "reference") == Verdict(1.0, expected, "correct")


def test_one_grid_boxed_twice_or_beside_bare_grids_is_one_answer():
    expected = [[1, 2]]
    assert grade("\\boxed{[[1, 2]]} so \\boxed{[[1,2]]}", expected).reward == 1.0
    assert grade("From [[3, 4]] we get \\boxed{[[1, 2]]}", expected).reward == 1.0
    assert not several_grids("\\boxed{[[1, 2]]} and \\boxed{[[1, [2]]]}")  # one of them does not parse
