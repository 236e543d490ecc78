from __future__ import annotations

import asyncio
import threading
import time

import pytest

from gym_math.verify import (
    VerifierPool,
    VerifyResult,
    answers_equivalent,
    averify_answer,
    extract_boxed_answer,
    get_default_pool,
    shutdown_default_pool,
    verify_answer,
)

PATHOLOGICAL = [r"9^{9^{9^{9}}}", r"(10^{10})!"]


@pytest.fixture(scope="module")
def pool():
    p = VerifierPool(size=2)
    p.wait_ready()
    yield p
    p.close()


# ---------------------------------------------------------------- extraction


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (r"The answer is \boxed{12}.", "12"),
        (r"so \boxed{\frac{1}{2}}", r"\frac{1}{2}"),
        (r"\boxed{\frac{\sqrt{3}}{2}} done", r"\frac{\sqrt{3}}{2}"),
        (r"first \boxed{1} then \boxed{2} finally \boxed{3}", "3"),
        (r"\fbox{42}", "42"),
        (r"\boxed{1} and \fbox{7}", "7"),
        (r"\boxed {  5 }", "5"),
        (r"\boxed{\{1, 2\}}", r"\{1, 2\}"),
        (r"\boxed{\}}", r"\}"),
        (r"\boxed{\boxed{3}}", "3"),
        (r"\boxed{x + \boxed{3}}", r"x + \boxed{3}"),
        ("} stray } \\boxed{8} }", "8"),
        ("\\boxed{a\nb}", "a\nb"),
        (r"\boxed{}", ""),
    ],
)
def test_extract_boxed_answer(text, expected):
    assert extract_boxed_answer(text) == expected


@pytest.mark.parametrize(
    "text",
    ["", "no box here", "12", r"\boxed{12", r"\boxed{\frac{1}{2}", r"\boxed 12", r"\boxed{1\}"],
)
def test_extract_boxed_answer_none(text):
    assert extract_boxed_answer(text) is None


def test_extract_unclosed_last_box_falls_back_to_last_complete_one():
    assert extract_boxed_answer(r"\boxed{1} ... truncated \boxed{\frac{2}{") == "1"


def test_extract_long_text_is_fast():
    text = ("x { y } " * 50_000) + r"\boxed{9}"
    start = time.perf_counter()
    assert extract_boxed_answer(text) == "9"
    assert time.perf_counter() - start < 1.0


# ---------------------------------------------------------------- equivalence


@pytest.mark.parametrize(
    ("predicted", "expected"),
    [
        ("1/2", "0.5"),
        ("0.5", "1/2"),
        (r"\frac{1}{2}", "0.5"),
        (r"\frac{1}{2}", "1/2"),
        (r"\dfrac{1}{2}", "1/2"),
        (r"\frac12", "0.5"),
        ("3", "3.0"),
        ("3.0", "3"),
        ("12", "12"),
        (" 12 ", "12"),
        ("12.", "12"),
        ("$12$", "12"),
        ("$$12$$", "12"),
        (r"\(12\)", "12"),
        ("1,000", "1000"),
        ("-3", "-3.0"),
        ("x+1", "1+x"),
        ("x^2+2x+1", "(x+1)^2"),
        (r"2\sqrt{2}", r"\sqrt{8}"),
        (r"\{1,2\}", r"\{2,1\}"),
        ("(1,2)", "(1, 2)"),
        ("x=3", "3"),
        ("Paris", "paris"),
        (r"\text{Paris}", "Paris"),
        ("New  York", "new york"),
        ("A", "a"),
    ],
)
def test_equivalent(predicted, expected):
    assert answers_equivalent(predicted, expected)


@pytest.mark.parametrize(
    ("predicted", "expected"),
    [
        ("13", "12"),
        ("0.51", "0.5"),
        ("1/3", "1/2"),
        ("x+2", "x+1"),
        (r"\{1,3\}", r"\{1,2\}"),
        ("(2,1)", "(1,2)"),
        ("sey", "yes"),
        ("London", "Paris"),
        ("A", "B"),
        ("", "12"),
        ("12", ""),
    ],
)
def test_not_equivalent(predicted, expected):
    assert not answers_equivalent(predicted, expected)


def test_answers_equivalent_works_off_the_main_thread():
    # math_verify's own timeouts use signal.alarm, which raises outside the main thread.
    results = []
    thread = threading.Thread(target=lambda: results.append(answers_equivalent("x+1", "1+x")))
    thread.start()
    thread.join(30)
    assert results == [True]


# ---------------------------------------------------------------- verify_answer


def test_verify_correct(pool):
    r = verify_answer(r"7 + 5 = 12, so the answer is $\boxed{12}$.", "12", pool=pool)
    assert r == VerifyResult(1.0, "12", "correct")
    r = verify_answer(r"Half: \boxed{\frac{1}{2}}", "0.5", pool=pool)
    assert r == VerifyResult(1.0, r"\frac{1}{2}", "correct")


def test_verify_wrong(pool):
    r = verify_answer(r"\boxed{13}", "12", pool=pool)
    assert r == VerifyResult(0.0, "13", "wrong")
    r = verify_answer(r"\boxed{12} no wait \boxed{11}", "12", pool=pool)
    assert r == VerifyResult(0.0, "11", "wrong")


def test_verify_no_box(pool):
    r = verify_answer("The answer is 12.", "12", pool=pool)
    assert r == VerifyResult(0.0, None, "no_boxed_answer")


@pytest.mark.parametrize("expr", PATHOLOGICAL)
def test_verify_timeout_is_bounded(pool, expr):
    timeout_s = 1.0
    start = time.monotonic()
    r = verify_answer(rf"\boxed{{{expr}}}", "5", timeout_s=timeout_s, pool=pool)
    elapsed = time.monotonic() - start
    assert r.reason == "timeout"
    assert r.reward == 0.0
    assert r.extracted_answer == expr
    assert elapsed < timeout_s + 0.75
    # The killed worker was replaced: the pool keeps answering, quickly.
    start = time.monotonic()
    assert verify_answer(r"\boxed{0.5}", "1/2", pool=pool).reason == "correct"
    assert time.monotonic() - start < 2.0


def test_verify_from_worker_threads(pool):
    results: list[VerifyResult] = []
    lock = threading.Lock()

    def work(i: int) -> None:
        r = verify_answer(rf"\boxed{{{i}/2}}", str(i / 2), pool=pool)
        with lock:
            results.append(r)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(1, 7)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(results) == 6
    assert all(r.reason == "correct" for r in results)


def test_warm_overhead_is_small(pool):
    # A simple answer that needs the worker (not decidable by string comparison alone).
    for _ in range(20):
        verify_answer(r"\boxed{3.0}", "3", pool=pool)
    n = 200
    start = time.perf_counter()
    for _ in range(n):
        assert verify_answer(r"\boxed{3.0}", "3", pool=pool).reward == 1.0
    per_call = (time.perf_counter() - start) / n
    assert per_call < 0.005


def test_default_pool():
    try:
        assert verify_answer(r"\boxed{0.25}", "1/4").reason == "correct"
        assert get_default_pool() is get_default_pool()
    finally:
        shutdown_default_pool()


def test_closed_pool_rejects_calls():
    p = VerifierPool(size=1)
    p.close()
    with pytest.raises(RuntimeError):
        p.check("1", "1", 1.0)


# ---------------------------------------------------------------- averify_answer


async def test_averify_correct(pool):
    r = await averify_answer(r"\boxed{\frac{3}{4}}", "0.75", pool=pool)
    assert r == VerifyResult(1.0, r"\frac{3}{4}", "correct")
    r = await averify_answer("nothing boxed", "0.75", pool=pool)
    assert r.reason == "no_boxed_answer"


async def test_averify_does_not_block_event_loop(pool):
    ticks = 0
    stop = asyncio.Event()

    async def ticker() -> None:
        nonlocal ticks
        while not stop.is_set():
            await asyncio.sleep(0.01)
            ticks += 1

    task = asyncio.create_task(ticker())
    timeout_s = 1.0
    start = time.monotonic()
    r = await averify_answer(r"\boxed{9^{9^{9^{9}}}}", "5", timeout_s=timeout_s, pool=pool)
    elapsed = time.monotonic() - start
    stop.set()
    await task
    assert r.reason == "timeout"
    assert elapsed < timeout_s + 0.75
    # ~100 ticks of 10 ms fit in the timeout; demand a good fraction of them.
    assert ticks >= 40


async def test_averify_concurrent(pool):
    results = await asyncio.gather(
        *(averify_answer(rf"\boxed{{{i}.0}}", str(i), pool=pool) for i in range(8))
    )
    assert [r.reason for r in results] == ["correct"] * 8
