"""The library grading mode (the environments spec's §18 library stage), as pure functions and in a
worker pool: gold preparation, whole-text extraction, the extracted_answer rule, failures as (0, null)."""

from __future__ import annotations

import asyncio
import threading

import pytest

from gym_math.library import LibraryResult, alibrary_grade, library_grade, prepare_gold, warm_up
from gym_math.verify import make_verifier_pool


@pytest.fixture(scope="module")
def pool():
    p = make_verifier_pool(size=2, warm_up=warm_up)
    p.start_blocking()
    yield p
    p.close()


# ---------------------------------------------------------------- gold preparation


@pytest.mark.parametrize(
    ("expected", "gold"),
    [
        ("12", "\\boxed{12}"),
        ("  12 \n", "\\boxed{12}"),
        ("$\\frac{1}{2}$", "\\boxed{\\frac{1}{2}}"),
        ("\\(x^2\\)", "\\boxed{x^2}"),
        ("\\($5$\\)", "\\boxed{5}"),  # \( \) first, then $ $
        ("\\( $5$ \\)", "\\boxed{$5$}"),  # no strip between the two: " $5$ " is not wrapped in $
        ("$ 5 $", "\\boxed{5}"),
        ("$", "\\boxed{$}"),  # a lone $ is not a wrapper (length 1)
        ("$$5$$", "\\boxed{$5$}"),  # one $ pair only
        ("$5$ and $6$", "\\boxed{5$ and $6}"),  # wrapped in $...$ as far as the rule goes
        ("$\\(5\\)$", "\\boxed{\\(5\\)}"),  # $ is removed after \( \): the inner pair stays
    ],
)
def test_prepare_gold(expected, gold):
    assert prepare_gold(expected) == gold


# ---------------------------------------------------------------- grading


@pytest.mark.parametrize(
    ("text", "expected", "extracted"),
    [
        ("7 + 5 = 12. The answer is \\boxed{12}.", "12", "12"),
        ("Half: \\boxed{\\frac{1}{2}}", "0.5", "1/2"),
        ("\\boxed{\\frac{1}{2}}", "$\\frac{1}{2}$", "1/2"),
        ("\\boxed{\\frac{1}{2}}", "\\(\\frac{1}{2}\\)", "1/2"),
        ("\\boxed{1,000}", "1000", "1000"),
        ("\\boxed{(x+1)^2}", "x^2+2x+1", "(x + 1)**2"),
        ("\\boxed{\\{1,2\\}}", "\\{2,1\\}", "{1, 2}"),
        ("\\boxed{x=3}", "3", "Eq(x, 3)"),
        ("\\boxed{0.333333}", "\\frac{1}{3}", "0.333333000000000"),  # precision 6
        ("\\boxed{\\pi}", "3.14159265", "pi"),
        ("\\boxed{12 \\text{ cm}}", "12", "12"),
        ("\\boxed{50\\%}", "0.5", "50*(1/100)"),  # math-verify 0.8.0: a percentage is a hundredth
        # The whole text is searched, not only a box: an unboxed final answer counts.
        ("7 + 5 = 12.", "12", "12"),
        ("The final answer is 12", "12", "12"),
        ("So the answer is $12$. Check: 3*4=12.", "12", "12"),
        # Words become products of symbols: an anagram of the gold is "equal".
        ("\\boxed{sey}", "yes", "E*s*y"),
    ],
)
def test_correct(text, expected, extracted):
    assert library_grade(text, expected) == LibraryResult(1.0, extracted, "correct")


@pytest.mark.parametrize(
    ("text", "expected", "extracted"),
    [
        ("The answer is \\boxed{13}.", "12", "13"),
        ("\\boxed{(2,1)}", "(1,2)", "(2, 1)"),
        ("\\boxed{0.33}", "\\frac{1}{3}", "0.330000000000000"),
        ("\\boxed{3.14}", "\\pi", "3.14000000000000"),
        ("\\boxed{50\\%}", "50", "50*(1/100)"),
        ("\\boxed{(0,1]}", "[0,1)", "Interval.Lopen(0, 1)"),
        # Two boxes are extracted together, as one set: wrong for either of them.
        ("\\boxed{1} then \\boxed{2}", "2", "{1, 2}"),
        ("\\boxed{12} no wait \\boxed{11}", "12", "{11, 12}"),
        # A gold the library reads as text cannot equal a number.
        ("\\boxed{12}", "\\text{twelve}", "12"),
    ],
)
def test_wrong(text, expected, extracted):
    assert library_grade(text, expected) == LibraryResult(0.0, extracted, "wrong")


@pytest.mark.parametrize("text", ["", "I don't know.", "\\boxed{12", "Let me think about it."])
def test_nothing_extracted_is_zero_with_null_answer(text):
    assert library_grade(text, "12") == LibraryResult(0.0, None, "no_answer")


@pytest.mark.parametrize("expected", ["", "   ", "$", "\\(\\)"])
def test_an_unextractable_gold_scores_zero_whatever_the_model_wrote(expected):
    assert library_grade("\\boxed{12}", expected) == LibraryResult(0.0, None, "unparseable_expected_answer")


def test_extracted_answer_is_the_first_prediction_equal_to_the_gold():
    # Expression extraction finds both numbers; the one equal to the gold is reported, wherever it is.
    assert library_grade("I think it is 12 or maybe 13", "13") == LibraryResult(1.0, "13", "correct")


def test_grading_works_off_the_main_thread_only_through_a_worker():
    # The library's own timeouts use signal.alarm: in a thread they fail, which the reference (and
    # this function) scores as a library error, (0, null). The server always grades in a worker.
    results = []
    thread = threading.Thread(target=lambda: results.append(library_grade("\\boxed{12}", "12")))
    thread.start()
    thread.join(30)
    assert results == [LibraryResult(0.0, None, "error")]


# ---------------------------------------------------------------- in a worker pool


async def test_alibrary_grade_in_workers(pool):
    results = await asyncio.gather(*(alibrary_grade(f"so \\boxed{{{i}.0}}", str(i), pool=pool) for i in range(6)))
    assert [r.reward for r in results] == [1.0] * 6
    assert (await alibrary_grade("nothing", "3", pool=pool)) == LibraryResult(0.0, None, "no_answer")


async def test_a_pathological_answer_is_killed_as_timeout_without_blocking_the_loop(pool):
    before = set(pool.pids)
    grading = asyncio.ensure_future(alibrary_grade("\\boxed{(10^{10})!}", "5", pool=pool, timeout_s=0.5))
    ticks = 0
    while ticks < 5 and not grading.done():
        await asyncio.sleep(0.005)
        ticks += 1
    assert ticks == 5 and not grading.done()  # the loop kept turning while a worker was stuck
    assert await grading == LibraryResult(0.0, None, "timeout")
    assert len(before - set(pool.pids)) == 1  # that worker was replaced
    assert (await alibrary_grade("\\boxed{5}", "5", pool=pool)).reward == 1.0


async def test_the_librarys_own_timeout_is_reason_timeout_not_wrong(pool):
    # Comparing these two takes sympy longer than the library's own 5 s comparison timeout (its
    # signal.alarm, in the worker's main thread): the library logs the timeout and scores the answer
    # as not verified, which is a timeout, not a wrong answer. The pool's hard limit is well above it.
    result = await alibrary_grade("\\boxed{(x+y+z+1)^{30}}", "(x+y+z+2)^{30}", pool=pool, timeout_s=60)
    assert (result.reward, result.reason) == (0.0, "timeout")
    # The watch is reset per call: the next answer that is simply wrong is wrong.
    assert (await alibrary_grade("\\boxed{6}", "5", pool=pool)).reason == "wrong"
