"""What a report shows, computed from rollouts files: one :class:`Run` per file, with its profile
(:func:`gym_cli.reward_profile.build_profile`: pass@k, majority@k, groups, turns and tokens), its
failures by reason, a confidence interval of its mean reward, and per task the first failing
rollout's final answer. Pure Python plus numpy (for the bootstrap); no plotting here."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gym_core.rows import LATENCY_FIELD  # the field a latency plot reads (a row without it is left out)

from gym_cli.reward_profile import build_profile
from gym_cli.rollouts import InputError, iter_jsonl, read_rollouts

__all__ = [
    "LATENCY_FIELD",
    "CI_LEVEL",
    "CI_METHOD",
    "MAX_TEXT",
    "Run",
    "default_ks",
    "failures_path",
    "read_failures",
    "final_answer",
    "prompt_text",
    "reward_ci",
    "load_runs",
]

CI_LEVEL = 0.95
CI_METHOD = "percentile bootstrap over tasks (10,000 resamples, seed 0)"
_BOOTSTRAP_RESAMPLES = 10_000
# Rollout text is untrusted and can be huge: what the report keeps of an answer or a prompt.
MAX_TEXT = 4000


@dataclass
class Run:
    """One rollouts file as the report shows it."""

    label: str
    path: Path
    rows: list[dict[str, Any]]  # without ``response`` (gym_cli.rollouts.read_rollouts)
    profile: dict[str, Any]
    failures: list[dict[str, Any]]  # rows of the failures file beside the rollouts, if any
    ci: tuple[float, float]  # CI_LEVEL interval of the mean reward (CI_METHOD)
    # task_index → the first failing rollout (lowest rollout_index with reward < 1): its fields and answer
    first_failing: dict[int, dict[str, Any]] = field(default_factory=dict)

    @property
    def failure_reasons(self) -> dict[str, int]:
        """Failed rollouts by typed reason, most frequent first."""
        return dict(Counter(str(f.get("reason", "?")) for f in self.failures).most_common())


def default_ks(max_repeats: int) -> list[int]:
    """pass@k's k: 1, 2, 4, ... up to ``max_repeats``, and ``max_repeats`` itself."""
    ks = [1 << i for i in range(max_repeats.bit_length()) if 1 << i <= max_repeats]
    return ks if ks[-1] == max_repeats else [*ks, max_repeats]


def failures_path(rollouts: Path) -> Path:
    """Where ``gym collect`` writes the failures of a rollouts file by default."""
    return rollouts.with_name(rollouts.stem + ".failures.jsonl")


def read_failures(path: Path) -> list[dict[str, Any]]:
    """The rows of a failures file (none when it does not exist); :class:`InputError` naming the
    file and line of the first row that is not a failure record."""
    if not path.is_file():
        return []
    failures = []
    for number, row, problem in iter_jsonl(path):
        if problem:
            raise InputError(problem)
        if not isinstance(row, dict) or "task_index" not in row or "reason" not in row:
            raise InputError(f"{path}:{number}: not a failure row (needs task_index and reason)")
        failures.append(row)
    return failures


def _clip(text: str) -> str:
    return text if len(text) <= MAX_TEXT else text[:MAX_TEXT] + f"… ({len(text) - MAX_TEXT} more characters)"


def final_answer(response: Any) -> str | None:
    """The text of a rollout's last message in its Responses-API ``response``, or, when it ended on
    tool calls, those calls as ``name(arguments)``; None when the response has neither."""
    output = response.get("output") if isinstance(response, dict) else None
    if not isinstance(output, list):
        return None
    for item in reversed(output):
        if not isinstance(item, dict):
            continue
        if item.get("type", "message") == "message" and item.get("role", "assistant") == "assistant":
            content = item.get("content")
            if isinstance(content, str):
                return _clip(content)
            if isinstance(content, list):
                return _clip("".join(str(part.get("text", "")) for part in content if isinstance(part, dict)))
    calls = [
        f"{item.get('name')}({item.get('arguments', '')})"
        for item in output
        if isinstance(item, dict) and item.get("type") == "function_call"
    ]
    return _clip("\n".join(calls)) if calls else None


def prompt_text(row: dict[str, Any]) -> str:
    """The last user message of the task's model input (``responses_create_params.input``), as text."""
    params = row.get("responses_create_params")
    given = params.get("input") if isinstance(params, dict) else None
    if isinstance(given, str):
        return _clip(given)
    for item in reversed(given if isinstance(given, list) else []):
        if isinstance(item, dict) and item.get("role") == "user":
            content = item.get("content")
            if isinstance(content, list):
                content = " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
            return _clip(str(content))
    return ""


def reward_ci(rows: list[dict[str, Any]]) -> tuple[float, float]:
    """The :data:`CI_LEVEL` interval of the mean reward of ``rows``: a percentile bootstrap that
    resamples whole tasks, since the rollouts of one task are correlated. Deterministic (fixed seed)."""
    import numpy as np

    by_task: dict[Any, list[float]] = {}
    for row in rows:
        by_task.setdefault(row["task_index"], []).append(float(row["reward"]))
    sums = np.array([sum(r) for r in by_task.values()])
    counts = np.array([len(r) for r in by_task.values()])
    if len(sums) == 1:  # one task: nothing to resample, the interval is the mean itself
        mean = float(sums[0] / counts[0])
        return mean, mean
    picks = np.random.default_rng(0).integers(0, len(sums), size=(_BOOTSTRAP_RESAMPLES, len(sums)))
    means = sums[picks].sum(axis=1) / counts[picks].sum(axis=1)
    tail = (1 - CI_LEVEL) / 2 * 100
    low, high = np.percentile(means, [tail, 100 - tail])
    return float(low), float(high)


def _order(row: dict[str, Any]) -> int:
    index = row.get("rollout_index")
    return index if isinstance(index, int) and not isinstance(index, bool) else 1 << 62  # unnumbered rows last


def _first_failing(path: Path, rows: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """Per task, the rollout with the lowest rollout_index whose reward is below 1, with its final
    answer read from the file's ``response`` (a second pass: read_rollouts drops responses)."""
    wanted: dict[Any, dict[str, Any]] = {}
    for row in rows:
        task = row["task_index"]
        if float(row["reward"]) < 1.0 and (task not in wanted or _order(row) < _order(wanted[task])):
            wanted[task] = row
    found: dict[int, dict[str, Any]] = {}
    for _, row, _problem in iter_jsonl(path):  # read_rollouts read it whole: every line decodes
        task = row["task_index"]
        if task in wanted and task not in found and _order(row) == _order(wanted[task]) and float(row["reward"]) < 1.0:
            found[task] = {
                "rollout_index": row.get("rollout_index"),
                "reward": float(row["reward"]),
                "answer": final_answer(row.get("response")),
                # What verifiers commonly record beside the reward, when present.
                **{
                    k: _clip(str(row[k]))
                    for k in ("extracted_answer", "expected_answer", "reason")
                    if row.get(k) is not None
                },
            }
    return found


def _labels(paths: list[Path], labels: tuple[str, ...]) -> list[str]:
    if labels:
        if len(labels) != len(paths):
            raise InputError(f"{len(labels)} --label for {len(paths)} rollouts files: give one per file, in order")
        return list(labels)
    names = [p.stem for p in paths]
    # Two files of the same name in different folders: their folder tells them apart.
    return [f"{p.parent.name}/{p.stem}" if names.count(p.stem) > 1 else p.stem for p in paths]


def load_runs(
    paths: list[Path], labels: tuple[str, ...] = (), ks: tuple[int, ...] = (), by: str = "environment"
) -> tuple[list[Run], list[int]]:
    """Read each rollouts file (and the failures file beside it) into a :class:`Run`, and the k of
    pass@k used for all of them (``ks``, else :func:`default_ks` of the most rollouts of a task).
    Raises :class:`InputError` naming the file and line of bad input."""
    names = _labels(paths, labels)
    if len(set(names)) != len(names):
        raise InputError(f"two runs have the same label ({', '.join(names)}): give each its own with --label")
    read = [(path, read_rollouts(path)) for path in paths]
    if not ks:
        repeats = max(max(Counter(row["task_index"] for row in rows).values()) for _, rows in read)
        ks = tuple(default_ks(repeats))
    runs = []
    for label, (path, rows) in zip(names, read):
        try:
            profile = build_profile(rows, ks, by=by)
        except (ValueError, TypeError) as exc:  # e.g. a task_index that is not comparable with the others
            raise InputError(f"{path}: cannot profile its rows ({exc})") from None
        runs.append(
            Run(
                label,
                path,
                rows,
                profile,
                read_failures(failures_path(path)),
                reward_ci(rows),
                _first_failing(path, rows),
            )
        )
    return runs, sorted(set(ks))
