from __future__ import annotations

import asyncio
import os
import threading

import pytest

from gym_core.workers import WorkerPoolClosed

from gym_math.verify import (
    VerifyResult,
    answers_equivalent,
    averify_answer,
    extract_boxed_answer,
    get_default_pool,
    make_verifier_pool,
    shutdown_default_pool,
    verify_answer,
)

PATHOLOGICAL = [r"9^{9^{9^{9}}}", r"(10^{10})!"]


@pytest.fixture(scope="module")
def pool():
    p = make_verifier_pool(size=2)
    p.start_blocking()
    yield p
    p.close()


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True  # no /proc: the process exists


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


def test_extract_long_and_deeply_nested_text():
    # Model output can be long and brace-heavy; extraction is one pass without recursion, so
    # neither length nor nesting depth can make it fail.
    assert extract_boxed_answer(("x { y } " * 50_000) + r"\boxed{9}") == "9"
    assert extract_boxed_answer("{" * 100_000 + r"\boxed{9}" + "}" * 100_000) == "9"
    assert extract_boxed_answer(r"\boxed{" * 10_000 + "7" + "}" * 10_000) == "7"
    assert extract_boxed_answer(r"\boxed{ " * 10_000 + r"x + \boxed{3}" + " }" * 10_000) == r"x + \boxed{3}"


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
def test_pathological_expression_is_killed_and_reported_as_timeout(pool, expr):
    before = set(pool.pids)
    r = verify_answer(rf"\boxed{{{expr}}}", "5", timeout_s=0.5, pool=pool)
    assert r == VerifyResult(0.0, expr, "timeout")
    # The worker that ran it was killed and a fresh one took its place.
    killed = before - set(pool.pids)
    assert len(killed) == 1
    assert not alive(killed.pop())
    assert len(pool.pids) == 2
    # The pool keeps answering.
    assert verify_answer(r"\boxed{0.5}", "1/2", pool=pool).reason == "correct"


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


def test_warm_workers_serve_many_calls(pool):
    # A simple answer that needs a worker (not decidable by string comparison alone). The same
    # warm workers answer every call: none is forked per call, none dies.
    assert verify_answer(r"\boxed{3.0}", "3", pool=pool).reward == 1.0
    workers = pool.pids
    for _ in range(200):
        assert verify_answer(r"\boxed{3.0}", "3", pool=pool).reward == 1.0
    assert pool.pids == workers


def test_default_pool():
    try:
        assert verify_answer(r"\boxed{0.25}", "1/4").reason == "correct"
        assert get_default_pool() is get_default_pool()
    finally:
        shutdown_default_pool()


def test_closed_pool_rejects_calls():
    p = make_verifier_pool(size=1)
    p.close()
    with pytest.raises(WorkerPoolClosed):
        verify_answer(r"\boxed{0.5}", "1/2", pool=p)


# ---------------------------------------------------------------- averify_answer


async def test_averify_correct(pool):
    r = await averify_answer(r"\boxed{\frac{3}{4}}", "0.75", pool=pool)
    assert r == VerifyResult(1.0, r"\frac{3}{4}", "correct")
    r = await averify_answer("nothing boxed", "0.75", pool=pool)
    assert r.reason == "no_boxed_answer"


async def test_averify_does_not_block_event_loop(pool):
    verification = asyncio.ensure_future(averify_answer(r"\boxed{9^{9^{9^{9}}}}", "5", timeout_s=1.0, pool=pool))
    ticks = 0
    while ticks < 5 and not verification.done():
        await asyncio.sleep(0.005)
        ticks += 1
    # The loop kept turning while a worker was stuck on the expression.
    assert ticks == 5 and not verification.done()
    assert (await verification).reason == "timeout"


async def test_averify_concurrent(pool):
    results = await asyncio.gather(*(averify_answer(rf"\boxed{{{i}.0}}", str(i), pool=pool) for i in range(8)))
    assert [r.reason for r in results] == ["correct"] * 8
