"""Reward statistics over rollouts: the headline score, pass@k, expected max@k, majority@k, quantiles
and plain summaries.

Pure Python (``math``/``statistics``); used by ``gym profile``, ``gym report``, ``gym collect``'s live
panel (:data:`HEADLINE`, :func:`quantile`) and the trainer.

The headline score of a set of rollouts, overall and per environment, is :data:`HEADLINE`, the mean
reward: the sum of the rewards of the scored rollouts divided by their number (rollouts that failed
and got no reward, the ``.failures.jsonl`` rows, are not in it), on the rewards' own scale (0 to 1 for
every first-party environment). With the same number of rollouts per task and 0/1 rewards it equals
the overall ``pass@1``. Every latency percentile is :func:`quantile` (linear interpolation; p50 is the median).

Estimators (all exact, no sampling):

- :func:`pass_at_k` — the unbiased estimator of pass@k from ``n`` samples with ``c`` correct:
  ``1 - C(n-c, k) / C(n, k)``, the probability that a uniformly random ``k``-subset of the ``n``
  samples contains at least one correct one.
- :func:`expected_max_at_k` — the expected maximum reward of a uniformly random ``k``-subset of
  the ``n`` rewards; the generalisation of pass@k to non-binary rewards (equal to it on 0/1 rewards).
- :func:`majority_at_k` — the expected score of the majority-vote answer of a uniformly random
  ``k``-subset (definition in its docstring).
- :func:`quantile` — the quantile with linear interpolation between the two nearest ranks (numpy's
  default), so that p50 is the median; one definition for every percentile gym shows.
- :func:`summarize` — count, mean, min, max, median (:func:`quantile` 0.5) and *population* standard
  deviation.
- :func:`pass_at_k_family` — the environments spec's §1.4 metric family of an environment
  (``pass@k``, ``pass@1[avg-of-k]``, first-k ``majority@k``, spread across runs), for plugins'
  ``gym_aggregate_metrics``.

:func:`profile_rollouts` output (key names are stable)::

    {
      "overall": {
        "num_tasks": int,          # distinct task_index values
        "num_rollouts": int,       # rows
        "mean_reward": float,      # the headline score: the mean reward of the rows (None: no rows)
        "fields": {name: summary, ...},
        "pass@<k>": float, ...     # mean over tasks with num_rollouts >= k
        "majority@<k>": float, ... # only with answer_field (when some row has an answer), mean
                                   # over tasks with num_rollouts >= k; a task with no answer: 0
      },
      "tasks": {
        <task_index:int>: {        # ascending task_index
          "num_rollouts": int,
          "binary": bool,          # all rewards of the task are 0 or 1
          "fields": {name: summary, ...},
          "pass@<k>": float, ...   # only for k <= num_rollouts
          "majority@<k>": float, ...
        }, ...
      }
    }

where ``summary`` is :func:`summarize`'s dict (``count``, ``mean``, ``min``, ``max``, ``median``,
``std``) and ``fields`` has one entry per numeric top-level field (``int``/``float``, not
``bool``) seen in the rows: always ``reward``, plus e.g. ``num_tokens`` or ``latency_s``;
``task_index``, ``rollout_index`` and ``answer_field`` are not summarised. Overall field summaries
pool all rows (they are not means of per-task means). A task's ``pass@<k>`` is
:func:`pass_at_k` with ``c`` = number of rewards equal to 1 when the task is binary, else
:func:`expected_max_at_k` (the two agree on binary rewards). The ``k`` values are the requested
``ks`` (deduplicated, ascending). JSON encoders turn the integer task keys into strings.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from fractions import Fraction
from typing import Any

__all__ = [
    "HEADLINE",
    "quantile",
    "pass_at_k",
    "expected_max_at_k",
    "majority_at_k",
    "summarize",
    "profile_rollouts",
    "pass_at_k_family",
]


HEADLINE = "mean reward"
"""The name of the headline score everywhere gym shows one (see the module docstring)."""


def quantile(values: Iterable[float], q: float) -> float | None:
    """The ``q`` quantile of ``values`` (0 ≤ q ≤ 1), interpolated linearly between the values at the
    two ranks around ``q·(n-1)`` (numpy's default): q = 0.5 is the median (the mean of the two middle
    values of an even count), the same number as ``statistics.median`` and the spec's per-field median;
    None when there are none."""
    if not 0 <= q <= 1:
        raise ValueError(f"a quantile is in [0, 1], got {q}")
    ordered = sorted(float(v) for v in values)
    if not ordered:
        return None
    position = q * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def _check_k(n: int, k: int) -> None:
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive integer, got {n!r}")
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be a positive integer, got {k!r}")
    if k > n:
        raise ValueError(f"k={k} is larger than the number of samples n={n}")


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k estimate from ``n`` samples of which ``c`` are correct.

    ``1 - C(n-c, k) / C(n, k)``, computed as ``1 - prod_{i=n-c+1..n} (1 - k/i)`` so that no
    huge binomials are formed. Returns 1.0 when ``n - c < k`` (every ``k``-subset holds a correct
    sample). Raises ValueError unless ``1 <= k <= n`` and ``0 <= c <= n``.
    """
    _check_k(n, k)
    if isinstance(c, bool) or not isinstance(c, int) or not 0 <= c <= n:
        raise ValueError(f"c must be an integer in [0, n={n}], got {c!r}")
    if n - c < k:
        return 1.0
    miss = 1.0
    for i in range(n - c + 1, n + 1):
        miss *= 1.0 - k / i
    return 1.0 - miss


def expected_max_at_k(rewards: Sequence[float], k: int) -> float:
    """Expected maximum of ``k`` rewards drawn without replacement from ``rewards``.

    With the rewards sorted ascending as ``r_1 <= ... <= r_n``, the maximum of a uniformly random
    ``k``-subset is ``r_i`` (the subset's highest position being ``i``) with probability
    ``C(i-1, k-1) / C(n, k)``, so the expectation is ``sum_{i=k..n} r_i C(i-1, k-1) / C(n, k)``.
    The binomials are exact integers; ties need no special care. On 0/1 rewards this equals
    ``pass_at_k(n, sum(rewards), k)``. Raises ValueError unless ``1 <= k <= len(rewards)``.
    """
    values = sorted(float(r) for r in rewards)
    n = len(values)
    _check_k(n, k)
    total = math.comb(n, k)
    weight = 1  # C(i-1, k-1) for i = k
    acc = 0.0
    for i in range(k, n + 1):
        acc += values[i - 1] * (weight / total)
        weight = weight * i // (i - k + 1)  # C(i, k-1) from C(i-1, k-1)
    return acc


def majority_at_k(answers: Sequence[Hashable | None], correct: Sequence[bool | float], k: int) -> float:
    """Expected score of the majority-vote answer over a uniformly random ``k``-subset.

    Definition: draw ``k`` of the ``n`` samples without replacement, every subset equally likely.
    The vote is the answer (compared by equality, so normalise beforehand: ``"0.5"`` and
    ``"1/2"`` are different votes) that occurs most often among the drawn samples; ``None`` is an
    abstention and never wins. Ties go to the answer whose first occurrence in ``answers`` comes
    first. The draw scores ``float(correct[j])`` for the first index ``j`` at which the winning
    answer occurs in ``answers`` (answers are expected to be consistently right or wrong), and 0
    when every drawn sample abstained. With booleans the result is the probability that the
    majority vote is correct.

    Computed exactly for any ``n`` and ``k``: for each answer ``a`` and each count ``m`` of it in
    the draw, the number of draws in which it wins is
    ``C(size_a, m) * [x^(k-m)] prod_b P_b(x) * (1+x)^abstentions``, where ``P_b`` sums
    ``C(size_b, j) x^j`` over ``j < m`` for answers before ``a`` and ``j <= m`` for those after
    (``O(n^2 k)`` integer operations). Raises ValueError on length mismatch or unless
    ``1 <= k <= n``.
    """
    n = len(answers)
    if len(correct) != n:
        raise ValueError(f"answers and correct differ in length ({n} != {len(correct)})")
    _check_k(n, k)
    sizes: dict[Hashable, int] = {}
    score: dict[Hashable, float] = {}
    abstain = 0
    for ans, ok in zip(answers, correct):
        if ans is None:
            abstain += 1
            continue
        if ans not in sizes:
            sizes[ans] = 0
            score[ans] = float(ok)
        sizes[ans] += 1
    order = list(sizes)  # first-occurrence order = tie-break priority
    abstain_poly = [math.comb(abstain, j) for j in range(min(abstain, k) + 1)]

    total = Fraction(0)
    for gi, g in enumerate(order):
        if score[g] == 0.0:
            continue
        wins = 0
        for m in range(1, min(sizes[g], k) + 1):
            need = k - m
            poly = abstain_poly[: need + 1]
            for hi, h in enumerate(order):
                if hi == gi:
                    continue
                cap = min(sizes[h], m - 1 if hi < gi else m, need)
                poly = _poly_mul_trunc(poly, [math.comb(sizes[h], j) for j in range(cap + 1)], need)
            if need < len(poly):
                wins += math.comb(sizes[g], m) * poly[need]
        total += Fraction(wins) * Fraction(score[g])
    return float(total / math.comb(n, k))


def _poly_mul_trunc(a: list[int], b: list[int], deg: int) -> list[int]:
    """Product of two integer polynomials (coefficient lists), dropping degrees above ``deg``."""
    out = [0] * min(len(a) + len(b) - 1, deg + 1)
    for i, x in enumerate(a):
        if x == 0 or i > deg:
            continue
        for j, y in enumerate(b[: deg - i + 1]):
            out[i + j] += x * y
    return out


def summarize(values: Iterable[float]) -> dict[str, Any]:
    """``count``, ``mean``, ``min``, ``max``, ``median`` and ``std`` of ``values``.

    ``median`` is :func:`quantile` 0.5 (the mean of the two middle values of an even count); ``std``
    is the population standard deviation (divides by ``count``, so one value gives 0.0). With no
    values, ``count`` is 0 and the other entries are None.
    """
    vals = [float(v) for v in values]
    if not vals:
        return {"count": 0, "mean": None, "min": None, "max": None, "median": None, "std": None}
    return {
        "count": len(vals),
        "mean": statistics.fmean(vals),
        "min": min(vals),
        "max": max(vals),
        "median": quantile(vals, 0.5),
        "std": statistics.pstdev(vals),
    }


_SKIP_FIELDS = ("task_index", "rollout_index")


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _field_summaries(rows: Sequence[Mapping[str, Any]], skip: set[str]) -> dict[str, Any]:
    names: list[str] = ["reward"]
    for row in rows:
        for key, value in row.items():
            if key not in skip and key not in names and _is_number(value):
                names.append(key)
    return {name: summarize(row[name] for row in rows if _is_number(row.get(name))) for name in names}


def profile_rollouts(
    rows: Iterable[Mapping[str, Any]],
    ks: Iterable[int] = (1, 4, 16),
    answer_field: str | None = None,
) -> dict[str, Any]:
    """Per-task and overall statistics of rollout records; the layout is in the module docstring.

    Each row needs ``task_index`` (int) and a numeric ``reward``; ``rollout_index`` and any other
    fields are optional. With ``answer_field``, when some row has an answer there, ``majority@<k>``
    is :func:`majority_at_k` over that field's values (``None``/missing = abstention; other values
    compared as given) scored by the rows' rewards, for every task with at least k rollouts: a task
    whose rollouts gave no answer scores 0, as it does in pass@k (the denominators are the same).
    """
    rows = list(rows)
    k_values = sorted({int(k) for k in ks})
    if any(k < 1 for k in k_values):
        raise ValueError(f"every k must be >= 1, got {list(ks)!r}")

    by_task: dict[int, list[Mapping[str, Any]]] = {}
    for i, row in enumerate(rows):
        if "task_index" not in row:
            raise ValueError(f"row {i} has no task_index")
        if not _is_number(row.get("reward")):
            raise ValueError(f"row {i} has no numeric reward: {row.get('reward')!r}")
        by_task.setdefault(row["task_index"], []).append(row)

    skip: set[str] = set(_SKIP_FIELDS)
    if answer_field is not None:
        skip.add(answer_field)

    with_answers = answer_field is not None and any(r.get(answer_field) is not None for r in rows)
    tasks: dict[int, dict[str, Any]] = {}
    pass_per_k: dict[int, list[float]] = {k: [] for k in k_values}
    maj_per_k: dict[int, list[float]] = {k: [] for k in k_values}
    for task_index in sorted(by_task):
        task_rows = by_task[task_index]
        # Rollout order (when given) fixes majority@k's tie-break; sort is stable otherwise.
        task_rows = sorted(task_rows, key=lambda r: _order_key(r.get("rollout_index")))
        rewards = [float(r["reward"]) for r in task_rows]
        n = len(rewards)
        binary = all(r in (0.0, 1.0) for r in rewards)
        block: dict[str, Any] = {
            "num_rollouts": n,
            "binary": binary,
            "fields": _field_summaries(task_rows, skip),
        }
        for k in k_values:
            if k > n:
                continue
            if binary:
                value = pass_at_k(n, sum(1 for r in rewards if r == 1.0), k)
            else:
                value = expected_max_at_k(rewards, k)
            block[f"pass@{k}"] = value
            pass_per_k[k].append(value)
        if with_answers and answer_field is not None:
            answers = [_hashable(r.get(answer_field)) for r in task_rows]
            for k in k_values:
                if k > n:
                    continue
                value = majority_at_k(answers, rewards, k)
                block[f"majority@{k}"] = value
                maj_per_k[k].append(value)
        tasks[task_index] = block

    fields = _field_summaries(rows, skip)
    overall: dict[str, Any] = {
        "num_tasks": len(tasks),
        "num_rollouts": len(rows),
        "mean_reward": fields["reward"]["mean"],  # the headline (HEADLINE): over every row
        "fields": fields,
    }
    for k in k_values:
        if pass_per_k[k]:
            overall[f"pass@{k}"] = statistics.fmean(pass_per_k[k])
    for k in k_values:
        if maj_per_k[k]:
            overall[f"majority@{k}"] = statistics.fmean(maj_per_k[k])
    return {"overall": overall, "tasks": tasks}


def _order_key(value: Any) -> tuple[int, Any]:
    return (0, value) if _is_number(value) else (1, 0)


def _hashable(value: Any) -> Hashable | None:
    if value is None or isinstance(value, Hashable):
        return value
    return repr(value)


# --- the spec's pass@k family (environments §1.4) ---------------------------------------------------


def _powers_of_two_to(max_k: int) -> list[int]:
    """1, 2, 4, ... up to ``max_k``, and ``max_k`` itself."""
    ks = [1 << i for i in range(max_k.bit_length()) if 1 << i <= max_k]
    return ks if ks[-1] == max_k else [*ks, max_k]


def _first_k_majority(answers: Sequence[Any], scores: Sequence[float], k: int) -> float:
    """Among the first ``k`` rollouts with an answer, the score of the most frequent ``(answer,
    score)`` group (tied groups averaged); 0 when none answered. Deterministic on rollout order,
    unlike :func:`majority_at_k` (an expectation over random subsets): the spec's rule."""
    groups = Counter((_hashable(a), s) for a, s in list(zip(answers, scores))[:k] if a is not None)
    if not groups:
        return 0.0
    top = max(groups.values())
    return statistics.fmean(score for (_, score), count in groups.items() if count == top)


def pass_at_k_family(
    rollouts: Sequence[Mapping[str, Any]],
    prefix: str,
    *,
    answer_field: str,
    scores: Mapping[str, Callable[[Mapping[str, Any]], float]],
    majority_score: str,
) -> dict[str, float]:
    """An environment's pass@k family (the environments spec's §1.4), ×100, names prefixed ``prefix``.

    ``scores`` maps score names to per-rollout values (``{"accuracy": lambda r: r["reward"]}``);
    ``no_answer`` (1 when ``answer_field`` is null) is always added. Rollouts are grouped by
    ``task_index`` and ordered by ``rollout_index``; ``k`` runs over 1, 2, 4, ... up to the smallest
    number of rollouts of a task (K). For each k and score: ``pass@k/<score>`` (:func:`pass_at_k`
    over all of a task's rollouts for 0/1 scores, else the max of the first k) and
    ``pass@1[avg-of-k]/<score>`` (the mean of the first k); ``majority@k/<majority_score>`` (first-k
    majority vote on ``answer_field``); for K, ``pass@1[avg-of-K]/<score>/std_dev_across_runs`` and
    ``.../std_err_across_runs`` (the sample std of the per-rollout-index means, and std/√K).
    """
    by_task: dict[Any, list[Mapping[str, Any]]] = {}
    for row in rollouts:
        by_task.setdefault(row.get("task_index"), []).append(row)
    if not by_task:
        return {}
    names = [*scores, "no_answer"]
    tasks = []
    for rows in by_task.values():
        rows = sorted(rows, key=lambda r: index if isinstance(index := r.get("rollout_index"), int) else 0)
        answers = [r.get(answer_field) for r in rows]
        task: dict[str, list[Any]] = {name: [float(fn(r)) for r in rows] for name, fn in scores.items()}
        task["no_answer"] = [1.0 if a is None else 0.0 for a in answers]
        task["answers"] = answers
        tasks.append(task)
    max_k = min(len(t["answers"]) for t in tasks)
    metrics: dict[str, float] = {}
    for k in _powers_of_two_to(max_k):
        for name in names:
            passes = []
            for t in tasks:
                values = t[name]
                if all(v in (0.0, 1.0) for v in values):
                    passes.append(pass_at_k(len(values), int(sum(values)), k))
                else:
                    passes.append(max(values[:k]))
            metrics[f"{prefix}pass@{k}/{name}"] = 100 * statistics.fmean(passes)
            metrics[f"{prefix}pass@1[avg-of-{k}]/{name}"] = 100 * statistics.fmean(
                statistics.fmean(t[name][:k]) for t in tasks
            )
        metrics[f"{prefix}majority@{k}/{majority_score}"] = 100 * statistics.fmean(
            _first_k_majority(t["answers"], t[majority_score], k) for t in tasks
        )
    for name in names:
        runs = [statistics.fmean(t[name][j] for t in tasks) for j in range(max_k)]
        std = statistics.stdev(runs) if len(runs) > 1 else 0.0
        metrics[f"{prefix}pass@1[avg-of-{max_k}]/{name}/std_dev_across_runs"] = 100 * std
        metrics[f"{prefix}pass@1[avg-of-{max_k}]/{name}/std_err_across_runs"] = 100 * std / math.sqrt(len(runs))
    return metrics
