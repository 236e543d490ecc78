from __future__ import annotations

import itertools
import json
import math
import random
import statistics

import pytest

from gym_core.metrics import (
    expected_max_at_k,
    majority_at_k,
    pass_at_k,
    profile_rollouts,
    summarize,
)

# ---------------------------------------------------------------- brute-force references


def brute_expected_max(rewards, k):
    subsets = list(itertools.combinations(rewards, k))
    return sum(max(s) for s in subsets) / len(subsets)


def brute_majority(answers, correct, k):
    order = []
    for a in answers:
        if a is not None and a not in order:
            order.append(a)
    first = {a: answers.index(a) for a in order}
    total = 0.0
    subsets = list(itertools.combinations(range(len(answers)), k))
    for subset in subsets:
        counts = {}
        for i in subset:
            if answers[i] is not None:
                counts[answers[i]] = counts.get(answers[i], 0) + 1
        if not counts:
            continue
        best = max(counts.values())
        winner = min((a for a, c in counts.items() if c == best), key=order.index)
        total += float(correct[first[winner]])
    return total / len(subsets)


# ---------------------------------------------------------------- pass@k


@pytest.mark.parametrize(
    ("n", "c", "k", "expected"),
    [
        (4, 1, 2, 0.5),  # 1 - C(3,2)/C(4,2) = 1 - 3/6
        (5, 0, 1, 0.0),
        (5, 0, 3, 0.0),
        (5, 5, 5, 1.0),
        (4, 1, 1, 0.25),
        (10, 3, 1, 0.3),
        (5, 2, 4, 1.0),  # n - c = 3 < k: every 4-subset has a correct sample
        (6, 2, 3, 0.8),  # 1 - C(4,3)/C(6,3) = 1 - 4/20
    ],
)
def test_pass_at_k_values(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


def test_pass_at_k_matches_binomial_formula():
    for n in range(1, 12):
        for c in range(n + 1):
            for k in range(1, n + 1):
                exact = 1 - math.comb(n - c, k) / math.comb(n, k)
                assert pass_at_k(n, c, k) == pytest.approx(exact, abs=1e-12)


def test_pass_at_k_large_n_is_stable():
    value = pass_at_k(10_000, 1, 5_000)
    assert value == pytest.approx(0.5, abs=1e-9)
    assert 0.0 <= pass_at_k(2_000, 3, 1_000) <= 1.0


@pytest.mark.parametrize(
    ("n", "c", "k"),
    [(3, 1, 4), (3, 1, 0), (3, 1, -1), (0, 0, 1), (3, 4, 1), (3, -1, 1), (3.0, 1, 1), (3, True, 1)],
)
def test_pass_at_k_bad_arguments(n, c, k):
    with pytest.raises(ValueError):
        pass_at_k(n, c, k)


# ---------------------------------------------------------------- expected max@k


def test_expected_max_equals_pass_at_k_on_binary():
    rng = random.Random(1)
    for _ in range(50):
        n = rng.randint(1, 12)
        rewards = [float(rng.random() < 0.4) for _ in range(n)]
        for k in range(1, n + 1):
            assert expected_max_at_k(rewards, k) == pytest.approx(pass_at_k(n, int(sum(rewards)), k), abs=1e-12)


def test_expected_max_hand_computed():
    # Subsets of size 2 of [0.2, 0.5, 0.9]: max 0.5, 0.9, 0.9 -> 2.3 / 3
    assert expected_max_at_k([0.9, 0.2, 0.5], 2) == pytest.approx(2.3 / 3)
    assert expected_max_at_k([0.9, 0.2, 0.5], 1) == pytest.approx((0.9 + 0.2 + 0.5) / 3)
    assert expected_max_at_k([0.9, 0.2, 0.5], 3) == pytest.approx(0.9)


def test_expected_max_brute_force_non_binary():
    rng = random.Random(7)
    for _ in range(30):
        n = rng.randint(1, 9)
        rewards = [rng.choice([0.0, 0.25, 0.5, 0.5, 1.0, -0.3, 2.0]) for _ in range(n)]
        for k in range(1, n + 1):
            assert expected_max_at_k(rewards, k) == pytest.approx(brute_expected_max(rewards, k))


def test_expected_max_large_n():
    rewards = [i / 1000 for i in range(2000)]
    assert expected_max_at_k(rewards, 2000) == pytest.approx(1.999)
    assert expected_max_at_k(rewards, 1) == pytest.approx(statistics.fmean(rewards))


def test_expected_max_bad_k():
    with pytest.raises(ValueError):
        expected_max_at_k([1.0, 0.0], 3)
    with pytest.raises(ValueError):
        expected_max_at_k([], 1)


# ---------------------------------------------------------------- majority@k


def test_majority_hand_computed():
    # "a" (correct) twice, "b" (wrong) once. k=1: P(draw an "a") = 2/3.
    assert majority_at_k(["a", "a", "b"], [True, True, False], 1) == pytest.approx(2 / 3)
    # k=2: {a,a} -> a; {a,b} twice -> tie, "a" occurs first -> a. Always correct.
    assert majority_at_k(["a", "a", "b"], [True, True, False], 2) == pytest.approx(1.0)
    # Tie-break favours first occurrence: "b" first here, so the two {a,b} draws give "b".
    assert majority_at_k(["b", "a", "a"], [False, True, True], 2) == pytest.approx(1 / 3)
    # All abstain -> 0.
    assert majority_at_k([None, None], [False, False], 2) == 0.0


def test_majority_k_equals_n_is_plain_majority():
    answers = ["4", "5", "4", None, "5", "4"]
    correct = [True, False, True, False, False, True]
    assert majority_at_k(answers, correct, len(answers)) == 1.0


def test_majority_brute_force():
    rng = random.Random(3)
    for _ in range(60):
        n = rng.randint(1, 9)
        pool = ["x", "y", "z", None]
        answers = [rng.choice(pool) for _ in range(n)]
        truth = rng.choice(["x", "y", "z"])
        correct = [a == truth for a in answers]
        for k in range(1, n + 1):
            assert majority_at_k(answers, correct, k) == pytest.approx(brute_majority(answers, correct, k), abs=1e-12)


def test_majority_large_n_is_fast_and_sane():
    answers = ["right"] * 60 + ["wrong"] * 40
    correct = [True] * 60 + [False] * 40
    value = majority_at_k(answers, correct, 51)
    assert 0.9 < value <= 1.0
    assert majority_at_k(answers, correct, 1) == pytest.approx(0.6)


def test_majority_bad_arguments():
    with pytest.raises(ValueError):
        majority_at_k(["a"], [True, False], 1)
    with pytest.raises(ValueError):
        majority_at_k(["a"], [True], 2)


# ---------------------------------------------------------------- summarize


def test_summarize():
    s = summarize([1.0, 2.0, 3.0, 4.0])
    assert s == {
        "count": 4,
        "mean": 2.5,
        "min": 1.0,
        "max": 4.0,
        "median": 2.5,  # the spec's median: the mean of the two middle values
        "std": pytest.approx(math.sqrt(1.25)),  # population std
    }
    assert summarize([5])["std"] == 0.0
    assert summarize([]) == {
        "count": 0,
        "mean": None,
        "min": None,
        "max": None,
        "median": None,
        "std": None,
    }


# ---------------------------------------------------------------- profile_rollouts


def _rows():
    rows = []
    # task 0: binary rewards, 4 rollouts, 1 correct
    for i, (r, ans) in enumerate([(0.0, "11"), (1.0, "12"), (0.0, "11"), (0.0, None)]):
        rows.append(
            {
                "task_index": 0,
                "rollout_index": i,
                "reward": r,
                "num_tokens": 10 * (i + 1),
                "answer": ans,
                "ok": r == 1.0,
                "note": "x",
            }
        )
    # task 1: non-binary rewards, 3 rollouts
    for i, r in enumerate([0.5, 0.2, 0.9]):
        rows.append({"task_index": 1, "rollout_index": i, "reward": r, "num_tokens": 5, "answer": "a"})
    return rows


def test_profile_rollouts_structure_and_values():
    result = profile_rollouts(_rows(), ks=(1, 2, 4), answer_field="answer")
    assert set(result) == {"overall", "tasks"}
    t0, t1 = result["tasks"][0], result["tasks"][1]
    assert list(result["tasks"]) == [0, 1]

    assert t0["num_rollouts"] == 4 and t0["binary"] is True
    assert set(t0["fields"]) == {"reward", "num_tokens"}  # not bools, strings, indices, answer
    assert t0["fields"]["reward"]["mean"] == 0.25
    assert t0["fields"]["num_tokens"] == summarize([10, 20, 30, 40])
    assert t0["pass@1"] == pytest.approx(0.25)
    assert t0["pass@2"] == pytest.approx(0.5)
    assert t0["pass@4"] == pytest.approx(1.0)
    assert t0["majority@1"] == pytest.approx(brute_majority(["11", "12", "11", None], [0, 1, 0, 0], 1))
    assert t0["majority@4"] == 0.0  # "11" wins 2-1

    assert t1["num_rollouts"] == 3 and t1["binary"] is False
    assert t1["pass@1"] == pytest.approx((0.5 + 0.2 + 0.9) / 3)
    assert t1["pass@2"] == pytest.approx(brute_expected_max([0.5, 0.2, 0.9], 2))
    assert "pass@4" not in t1 and "majority@4" not in t1
    assert t1["majority@2"] == pytest.approx(0.5)  # one answer "a", scored by its first reward

    overall = result["overall"]
    assert overall["num_tasks"] == 2 and overall["num_rollouts"] == 7
    assert overall["fields"]["reward"] == summarize([0, 1, 0, 0, 0.5, 0.2, 0.9])
    assert overall["pass@1"] == pytest.approx((t0["pass@1"] + t1["pass@1"]) / 2)
    assert overall["pass@2"] == pytest.approx((t0["pass@2"] + t1["pass@2"]) / 2)
    assert overall["pass@4"] == pytest.approx(t0["pass@4"])  # only task 0 has n >= 4
    assert overall["majority@4"] == t0["majority@4"]
    json.dumps(result)  # JSON-serialisable


def test_profile_rollouts_without_answer_field_and_defaults():
    result = profile_rollouts(_rows())
    assert not any(key.startswith("majority@") for key in result["overall"])
    assert "pass@16" not in result["overall"]
    assert set(result["tasks"][0]) == {"num_rollouts", "binary", "fields", "pass@1", "pass@4"}


def test_profile_rollouts_missing_answer_field_skips_majority():
    result = profile_rollouts(_rows(), ks=(1,), answer_field="nonexistent")
    assert "majority@1" not in result["tasks"][0]
    assert "majority@1" not in result["overall"]


def test_profile_rollouts_errors():
    with pytest.raises(ValueError):
        profile_rollouts([{"rollout_index": 0, "reward": 1.0}])
    with pytest.raises(ValueError):
        profile_rollouts([{"task_index": 0, "rollout_index": 0}])
    with pytest.raises(ValueError):
        profile_rollouts([{"task_index": 0, "reward": 1.0}], ks=(0,))


def test_profile_rollouts_empty():
    result = profile_rollouts([])
    assert result["overall"]["num_tasks"] == 0
    assert result["overall"]["fields"]["reward"]["count"] == 0
    assert result["tasks"] == {}


def test_pass_at_k_family_of_two_tasks():
    from gym_core.metrics import pass_at_k_family

    rows = [  # task 0: right, wrong (answers "a", "b"); task 1: no answer, right ("c")
        {"task_index": 0, "rollout_index": 0, "reward": 1.0, "answer": "a"},
        {"task_index": 0, "rollout_index": 1, "reward": 0.0, "answer": "b"},
        {"task_index": 1, "rollout_index": 1, "reward": 1.0, "answer": ["c"]},  # unhashable answers vote too
        {"task_index": 1, "rollout_index": 0, "reward": 0.0, "answer": None},
    ]
    got = pass_at_k_family(
        rows, "env/", answer_field="answer", scores={"accuracy": lambda r: r["reward"]}, majority_score="accuracy"
    )
    assert got["env/pass@1/accuracy"] == 50.0 and got["env/pass@2/accuracy"] == 100.0
    assert got["env/pass@1[avg-of-1]/accuracy"] == 50.0  # first rollouts: 1.0 and 0.0
    assert got["env/pass@1[avg-of-1]/no_answer"] == 50.0 and got["env/pass@2/no_answer"] == 50.0
    assert got["env/majority@1/accuracy"] == 50.0  # task 1's first rollout has no answer: 0
    assert got["env/majority@2/accuracy"] == 75.0  # task 0: a tie of (a, 1) and (b, 0) → 0.5; task 1: 1
    assert got["env/pass@1[avg-of-2]/accuracy/std_dev_across_runs"] == 0.0  # both runs average 0.5
    assert pass_at_k_family([], "env/", answer_field="answer", scores={}, majority_score="no_answer") == {}


def test_quantile_interpolates_so_that_p50_is_the_median():
    import statistics

    from gym_core.metrics import quantile

    assert quantile([4.0, 1.0, 3.0, 2.0], 0.5) == 2.5 == statistics.median([4.0, 1.0, 3.0, 2.0])
    assert quantile([1.0, 2.0, 3.0], 0.5) == 2.0
    assert quantile([1.0, 2.0, 3.0, 4.0], 0.0) == 1.0 and quantile([1.0, 2.0, 3.0, 4.0], 1.0) == 4.0
    assert quantile(range(1, 101), 0.99) == pytest.approx(99.01)  # numpy.quantile's default
    assert quantile([7.0], 0.99) == 7.0
    assert quantile([], 0.5) is None
    with pytest.raises(ValueError):
        quantile([1.0], 1.5)


def test_majority_counts_every_task_a_task_without_answers_scores_zero():
    rows = [
        {"task_index": 0, "rollout_index": 0, "reward": 1.0, "answer": "A"},
        {"task_index": 1, "rollout_index": 0, "reward": 0.0, "answer": None},  # no answer extracted
    ]
    overall = profile_rollouts(rows, ks=(1,), answer_field="answer")["overall"]
    assert overall["majority@1"] == overall["pass@1"] == overall["mean_reward"] == 0.5
