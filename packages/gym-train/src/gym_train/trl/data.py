"""Training rows for TRL from gym tasks, and weighted mixtures of environments.

A row of the adapter's datasets has the columns TRL's GRPOTrainer reads and one gym reads:

- ``prompt``: the task's input as chat messages (``[{"role": ..., "content": ...}]``), TRL's
  conversational format: the instructions and system messages first, then the conversation;
- ``gym_task``: the gym task row itself, as JSON text (rows of different environments have
  different fields; as text they share one column type). TRL passes it to reward functions, which
  send it to the environment.

``gym export prompts`` writes files of these rows (with ``tools``, ``environment``, ``agent`` and
``task_index`` beside them; the adapter reads ``agent`` and ``environment`` as hints of which
instance plays a row whose task names none); :func:`read_prompt_rows` reads them, and plain gym
task files (rows with ``responses_create_params``) too. :class:`TaskMixture` draws rows from
several environments' tasks in fixed proportions, deterministically under a seed.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gym_core.errors import GymError

from gym_cli.export import task_conversation

__all__ = [
    "AGENT_COLUMN",
    "ENVIRONMENT_COLUMN",
    "PROMPT_COLUMN",
    "TASK_COLUMN",
    "DatasetError",
    "MixtureSource",
    "TaskMixture",
    "prompt_key",
    "prompt_messages",
    "prompt_row",
    "read_prompt_rows",
    "task_of",
    "to_dataset",
]

PROMPT_COLUMN = "prompt"
TASK_COLUMN = "gym_task"
# Columns of `gym export prompts` rows: the agent that ran the task's rollouts, the environment that verified them.
AGENT_COLUMN = "agent"
ENVIRONMENT_COLUMN = "environment"


class DatasetError(GymError):
    """Rows that cannot be trained on; the message names each row (its index) and what is wrong."""

    def __init__(self, problems: Sequence[str], what: str = "the training rows"):
        self.problems = list(problems)
        shown = self.problems[:20] + ([f"... and {len(self.problems) - 20} more"] if len(self.problems) > 20 else [])
        super().__init__(
            f"{what}: {len(self.problems)} problem{'s' * (len(self.problems) != 1)}, "
            "nothing was trained:\n" + "\n".join(f"  {p}" for p in shown)
        )


def prompt_messages(task: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The chat messages of a task's prompt (instructions first), as ``gym export`` writes them
    (:func:`gym_cli.export.task_conversation`). ``ValueError`` naming the field when the task's
    ``responses_create_params`` is not a Responses request."""
    return task_conversation(task).prompt


def prompt_row(task: Mapping[str, Any]) -> dict[str, Any]:
    """A training row of one gym task: ``prompt`` (its chat messages) and ``gym_task`` (the row as JSON)."""
    return {PROMPT_COLUMN: prompt_messages(task), TASK_COLUMN: json.dumps(task, ensure_ascii=False)}


def task_of(row: Mapping[str, Any]) -> dict[str, Any]:
    """The gym task of a training row (its ``gym_task``, JSON text or an object). ``ValueError``
    saying what is wrong when it is not a task."""
    value = row.get(TASK_COLUMN)
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{TASK_COLUMN} is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ValueError(f"{TASK_COLUMN} must be a task row (a JSON object), got {type(value).__name__}")
    if not isinstance(value.get("responses_create_params"), dict):
        raise ValueError(f"{TASK_COLUMN} has no responses_create_params object (the model's input)")
    return value


def _without_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


def prompt_key(prompt: Any) -> str:
    """A prompt as canonical JSON: equal for the same messages, whatever keys a dataset added as null
    (Arrow gives every message the union of the keys of all messages)."""
    return json.dumps(_without_nulls(prompt), sort_keys=True, ensure_ascii=False)


def read_prompt_rows(path: str | Path, limit: int | None = None) -> list[dict[str, Any]]:
    """The training rows of a JSONL file: ``gym export prompts`` rows (with ``gym_task``) as they are,
    gym task rows (with ``responses_create_params``) made into rows by :func:`prompt_row`. Raises
    :class:`DatasetError` naming each line that is neither."""
    rows, problems = [], []
    path = Path(path)
    if not path.is_file():
        raise DatasetError([f"{path}: no such file"])
    with path.open(encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            if limit is not None and len(rows) >= limit:
                break
            try:
                value = json.loads(line)
            except json.JSONDecodeError as exc:
                problems.append(f"{path}:{number}: not JSON: {exc}")
                continue
            if isinstance(value, dict) and TASK_COLUMN in value:
                rows.append(
                    value if PROMPT_COLUMN in value else {**value, PROMPT_COLUMN: prompt_messages(task_of(value))}
                )
            elif isinstance(value, dict) and isinstance(value.get("responses_create_params"), dict):
                try:
                    rows.append(prompt_row(value))
                except Exception as exc:  # a malformed input: say where
                    problems.append(f"{path}:{number}: responses_create_params cannot be read: {exc}")
            else:
                problems.append(
                    f"{path}:{number}: neither a training row (gym_task) nor a gym task (responses_create_params)"
                )
    if problems:
        raise DatasetError(problems, str(path))
    return rows


def to_dataset(rows: Iterable[Mapping[str, Any]]) -> Any:
    """A Hugging Face ``datasets.Dataset`` of training rows (TRL's ``train_dataset``)."""
    from datasets import Dataset

    return Dataset.from_list([dict(r) for r in rows])


@dataclass
class MixtureSource:
    """One environment of a mixture: its rows (a file of tasks or training rows, or the rows
    themselves), its weight, and optionally the agent (``agent_ref``) or resources server that
    plays its rows when they do not say."""

    name: str
    rows: str | Path | Sequence[Mapping[str, Any]]
    weight: float
    agent: str | None = None
    resources_server: str | None = None

    def load(self) -> list[dict[str, Any]]:
        rows = read_prompt_rows(self.rows) if isinstance(self.rows, (str, Path)) else [dict(r) for r in self.rows]
        if not rows:
            raise DatasetError([f"mixture source {self.name!r} has no rows"])
        out = []
        for row in rows:
            task = task_of(row)
            if self.agent is not None and "agent_ref" not in task:
                task["agent_ref"] = {"name": self.agent}
            if self.resources_server is not None and "resources_server" not in task:
                task["resources_server"] = self.resources_server
            out.append({**row, TASK_COLUMN: json.dumps(task, ensure_ascii=False), "gym_source": self.name})
        return out


class TaskMixture:
    """Rows drawn from several environments in fixed proportions (e.g. 50 % math, 30 %
    instruction_following, 20 % counter), deterministic under ``seed``.

    :meth:`rows` gives ``n`` rows: each source's count is its share of ``n`` (largest remainders, so
    the counts add up to ``n`` and differ from ``weight * n`` by less than one), its rows taken in
    a seeded random order (repeated when it has fewer), the whole list shuffled with the seed. Each
    row keeps its task's ``agent_ref`` (set from the source's ``agent`` when the task names none) and
    gains ``gym_source``, the source's name."""

    def __init__(self, sources: Sequence[MixtureSource], *, seed: int = 0):
        if not sources:
            raise ValueError("a mixture needs at least one source")
        names = [s.name for s in sources]
        if len(set(names)) != len(names):
            raise ValueError(f"mixture source names must differ: {names}")
        bad = [
            s.name
            for s in sources
            if not (isinstance(s.weight, (int, float)) and s.weight > 0 and math.isfinite(s.weight))
        ]
        if bad:
            raise ValueError(f"mixture weights must be positive numbers: {', '.join(bad)}")
        self.sources = list(sources)
        self.seed = seed
        total = sum(s.weight for s in sources)
        self.shares = {s.name: s.weight / total for s in sources}

    def counts(self, n: int) -> dict[str, int]:
        """How many of ``n`` rows each source gives (largest remainders)."""
        exact = {name: share * n for name, share in self.shares.items()}
        counts = {name: math.floor(value) for name, value in exact.items()}
        left = n - sum(counts.values())
        for name in sorted(exact, key=lambda k: (-(exact[k] - counts[k]), list(exact).index(k)))[:left]:
            counts[name] += 1
        return counts

    def rows(self, n: int) -> list[dict[str, Any]]:
        rng = random.Random(self.seed)
        counts = self.counts(n)
        drawn: list[dict[str, Any]] = []
        for source in self.sources:
            rows = source.load()
            order: list[int] = []
            while len(order) < counts[source.name]:
                block = list(range(len(rows)))
                rng.shuffle(block)
                order += block
            drawn += [rows[i] for i in order[: counts[source.name]]]
        rng.shuffle(drawn)
        return drawn

    def dataset(self, n: int) -> Any:
        """:meth:`rows` as a ``datasets.Dataset``."""
        return to_dataset(self.rows(n))
