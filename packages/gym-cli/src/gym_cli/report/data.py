"""What a report shows, computed from rollouts files: one :class:`Run` per file, with its profile
(:func:`gym_cli.reward_profile.build_profile`: pass@k, majority@k, groups, turns and tokens), its
failures by reason, a confidence interval of its mean reward, and per task the first failing
rollout's final answer. Pure Python plus numpy (for the bootstrap); no plotting here."""

from __future__ import annotations

import hashlib
import json
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
    "MAX_VIEWER_ROLLOUTS",
    "PAIRED_METHOD",
    "TASK_FIELDS",
    "Run",
    "default_ks",
    "failures_path",
    "read_failures",
    "final_answer",
    "prompt_text",
    "reward_ci",
    "task_identity",
    "paired_difference",
    "compare_runs",
    "transcript",
    "load_runs",
]

CI_LEVEL = 0.95
CI_METHOD = "percentile bootstrap over tasks (10,000 resamples, seed 0)"
_BOOTSTRAP_RESAMPLES = 10_000
PAIRED_METHOD = "paired percentile bootstrap over the tasks in both runs (10,000 resamples, seed 0)"
# Rollout text is untrusted and can be huge: what the report keeps of an answer, a prompt or any one
# text of a transcript (the rest replaced by a marker saying how much was cut).
MAX_TEXT = 4000
# The rollout viewer embeds at most this many rollouts of each run (the first in the file; the page says so).
MAX_VIEWER_ROLLOUTS = 2000
# What identifies a task: its environment and what the model is given, the ``responses_create_params``
# fields below. Sampling parameters (model, temperature...), its metadata and what a rollout adds are not.
TASK_FIELDS = ("input", "instructions", "tools")


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
    # task_index → the task's identity (task_identity; a second task of the same identity gets "#2"...)
    identity: dict[Any, str] = field(default_factory=dict)
    # the rollouts as the viewer shows them (transcript), at most MAX_VIEWER_ROLLOUTS, then the failures
    rollouts: list[dict[str, Any]] = field(default_factory=list)
    total_rollouts: int = 0  # rows in the file, whether or not the viewer embeds them all

    @property
    def task_of(self) -> dict[str, Any]:
        """task identity → task_index."""
        return {identity: task for task, identity in self.identity.items()}

    def task_means(self) -> dict[str, float]:
        """task identity → the mean reward of its rollouts."""
        sums: dict[str, list[float]] = {}
        for row in self.rows:
            sums.setdefault(self.identity[row["task_index"]], []).append(float(row["reward"]))
        return {identity: sum(rewards) / len(rewards) for identity, rewards in sums.items()}

    def environment_of(self) -> dict[str, str]:
        """task identity → the environment its rows name (``environment``, else ``resources_server``)."""
        return {self.identity[row["task_index"]]: _environment(row) for row in self.rows}

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


def _environment(row: dict[str, Any]) -> str:
    return str(row.get("environment") or row.get("resources_server") or "(no environment)")


def task_identity(row: dict[str, Any]) -> str:
    """A stable id of the task a rollout row ran: a hash of its environment and of the model input
    its ``responses_create_params`` holds (:data:`TASK_FIELDS`), so that two runs of the same tasks
    pair them whatever their order or dataset. A row with no model input is known by its task_index."""
    params = row.get("responses_create_params")
    if not isinstance(params, dict) or not any(k in params for k in TASK_FIELDS):
        return f"index-{row['task_index']}"
    content = {"environment": _environment(row), **{k: params.get(k) for k in TASK_FIELDS}}
    text = json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.blake2b(text.encode(), digest_size=6).hexdigest()


def _identities(rows: list[dict[str, Any]]) -> dict[Any, str]:
    """task_index → identity; tasks of one file with the same identity (the same prompt twice) stay
    apart, numbered in task_index order (``#2``, ``#3``...), so they pair in that order."""
    first: dict[Any, str] = {}
    for row in rows:
        first.setdefault(row["task_index"], task_identity(row))
    seen: Counter[str] = Counter()
    out = {}
    for task in sorted(first, key=_task_order):
        seen[first[task]] += 1
        out[task] = first[task] if seen[first[task]] == 1 else f"{first[task]}#{seen[first[task]]}"
    return out


def _task_order(task: Any) -> tuple[int, Any, str]:
    return (0, task, "") if isinstance(task, int) and not isinstance(task, bool) else (1, 0, str(task))


def paired_difference(pairs: list[tuple[float, float]]) -> dict[str, Any]:
    """``pairs`` are (baseline, other) per-task mean rewards of the same tasks: the mean difference
    (other minus baseline), its :data:`CI_LEVEL` interval (:data:`PAIRED_METHOD`; None with fewer
    than 2 tasks) and whether it is significant (the interval excludes 0)."""
    import numpy as np

    diffs = np.array([b - a for a, b in pairs], dtype=float)
    if len(diffs) == 0:
        return {"tasks": 0, "delta": None, "ci": None, "significant": False}
    delta = float(diffs.mean())
    if len(diffs) < 2:
        return {"tasks": 1, "delta": delta, "ci": None, "significant": False}
    picks = np.random.default_rng(0).integers(0, len(diffs), size=(_BOOTSTRAP_RESAMPLES, len(diffs)))
    tail = (1 - CI_LEVEL) / 2 * 100
    low, high = (float(x) for x in np.percentile(diffs[picks].mean(axis=1), [tail, 100 - tail]))
    return {"tasks": len(diffs), "delta": delta, "ci": (low, high), "significant": low > 0 or high < 0}


def compare_runs(base: Run, other: Run) -> list[dict[str, Any]]:
    """``other`` against ``base``, per environment and then over all of them (environment None):
    the :func:`paired_difference` over the tasks (by identity) in both, and how many tasks only one has."""
    base_means, other_means = base.task_means(), other.task_means()
    envs = {**other.environment_of(), **base.environment_of()}
    out = []
    for env in [*sorted(set(envs.values())), None]:
        ids = {i for i, e in envs.items() if env is None or e == env}
        both = sorted(ids & base_means.keys() & other_means.keys())
        result = paired_difference([(base_means[i], other_means[i]) for i in both])
        result.update(
            environment=env,
            only_base=len(ids & base_means.keys() - other_means.keys()),
            only_other=len(ids & other_means.keys() - base_means.keys()),
        )
        out.append(result)
    return out


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return _clip(content)
    if isinstance(content, list):
        parts = [str(p.get("text", p.get("refusal", ""))) if isinstance(p, dict) else str(p) for p in content]
        return _clip("".join(parts))
    return "" if content is None else _clip(json.dumps(content, ensure_ascii=False, default=str))


def _items(given: Any) -> list[dict[str, Any]]:
    """Responses-API input or output items as the viewer shows them: ``kind`` (message, call, output,
    reasoning or other), and ``role``, ``name`` or ``text``."""
    if isinstance(given, str):
        return [{"kind": "message", "role": "user", "text": _clip(given)}]
    out: list[dict[str, Any]] = []
    for item in given if isinstance(given, list) else []:
        if not isinstance(item, dict):
            out.append({"kind": "other", "text": _clip(json.dumps(item, ensure_ascii=False, default=str))})
            continue
        kind = item.get("type", "message")
        if kind == "message":
            out.append({"kind": "message", "role": str(item.get("role", "?")), "text": _text_of(item.get("content"))})
        elif kind == "function_call":
            out.append({"kind": "call", "name": str(item.get("name")), "text": _text_of(item.get("arguments", ""))})
        elif kind == "function_call_output":
            out.append({"kind": "output", "text": _text_of(item.get("output"))})
        elif kind == "reasoning":
            summary = item.get("summary") or item.get("content")
            out.append({"kind": "reasoning", "text": _text_of(summary)})
        else:
            out.append(
                {"kind": "other", "role": str(kind), "text": _clip(json.dumps(item, ensure_ascii=False, default=str))}
            )
    return out


# Row fields the viewer does not list among a rollout's fields (the transcript shows them, or they are bulk).
_NOT_FIELDS = {"response", "responses_create_params", "usage_per_turn"}


def transcript(row: dict[str, Any], identity: str) -> dict[str, Any]:
    """One rollout as the viewer shows it: task, rollout, reward, the verifier's reason, every other
    field (as clipped text) and the transcript: instructions, the model input, then the response's output."""
    given = row.get("responses_create_params")
    params: dict[str, Any] = given if isinstance(given, dict) else {}
    items: list[dict[str, Any]] = []
    if params.get("instructions"):
        items.append({"kind": "message", "role": "instructions", "text": _text_of(params["instructions"])})
    items += _items(params.get("input"))
    response = row.get("response")
    items += _items(response.get("output") if isinstance(response, dict) else None)
    fields = {
        str(k): _clip(v if isinstance(v, str) else json.dumps(v, ensure_ascii=False, default=str))
        for k, v in row.items()
        if k not in _NOT_FIELDS
    }
    reward = row.get("reward")
    return {
        "task": identity,
        "task_index": str(row.get("task_index")),
        "rollout": row.get("rollout_index"),
        "reward": float(reward) if isinstance(reward, (int, float)) and not isinstance(reward, bool) else None,
        "reason": None if row.get("reason") is None else _clip(str(row["reason"])),
        "fields": fields,
        "items": items,
    }


def _viewer_rollouts(path: Path, identity: dict[Any, str], failures: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The first :data:`MAX_VIEWER_ROLLOUTS` rows of the file as transcripts, then the failures (no
    reward; their reason is the failure's typed reason)."""
    out = []
    for _, row, _problem in iter_jsonl(path):  # read_rollouts read it whole: every line decodes
        if len(out) >= MAX_VIEWER_ROLLOUTS:
            break
        out.append(transcript(row, identity[row["task_index"]]))
    out.sort(key=lambda r: (_task_order(_as_index(r["task_index"])), _order({"rollout_index": r["rollout"]})))
    for failure in failures[:MAX_VIEWER_ROLLOUTS]:
        task = failure.get("task_index")
        shown = transcript(
            {k: v for k, v in failure.items() if k != "reward"}, identity.get(task) or task_identity(failure)
        )
        shown["failed"] = True
        out.append(shown)
    return out


def _as_index(text: str) -> Any:
    return int(text) if text.lstrip("-").isdigit() else text


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
        failures = read_failures(failures_path(path))
        identity = _identities(rows)
        runs.append(
            Run(
                label,
                path,
                rows,
                profile,
                failures,
                reward_ci(rows),
                _first_failing(path, rows),
                identity,
                _viewer_rollouts(path, identity, failures),
                len(rows),
            )
        )
    return runs, sorted(set(ks))
