"""Scoring an answer with the `reasoning-gym` library's own scorers, and generating its tasks
(spec §10).

Public API (pure functions; the library is imported inside them, so importing this module is cheap):

- :func:`extract_answer` — the answer in a model's text: the last ``<answer>…</answer>``, else
  the first ``\\boxed{…}`` (no nested braces), else the whole text, stripped;
- :func:`several_answers` — whether a text's answers differ (a hedge, not scored);
- :func:`score` — extract and score in one call (:class:`Score`: score, extracted answer, reason);
  module level and picklable, so the server runs it in a :class:`gym_core.workers.WorkerPool`;
- :func:`warm_scorers` — build every task's scorer once (the pool's initializer);
- :func:`task_names` — the tasks the library registers that generate rows with their default
  config (``EXCLUDED_TASKS`` are left out);
- :func:`generate_rows` — ``n`` rows of one task or a weighted mix, deterministic in ``seed``,
  in the row format of §10;
- :func:`oracle_conformance` — a generated row's ``conformance`` field (its oracle answer and the
  reward the server gives it), for gym's conformance kit and ``python -m benchmarks``.

Reasons: ``"scored"`` (the task's scorer answered), ``"error"`` (it raised: score 0, as in the
reference); the server adds ``"timeout"``.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "DEFAULT_SYSTEM_PROMPT",
    "EXCLUDED_TASKS",
    "Score",
    "TUPLE_GRID_TASKS",
    "extract_answer",
    "generate_rows",
    "oracle_conformance",
    "parse_task_weights",
    "score",
    "several_answers",
    "task_names",
    "warm_scorers",
]

# `composite` is the library's mixer of other tasks, not a task: its default config (no tasks)
# cannot be instantiated, so it neither generates rows nor scores them (a row naming it scores 0).
EXCLUDED_TASKS = {"composite": "a mixer of other tasks; its default config has none and fails to build"}

# What the library suggests as a system prompt (its SYSTEM_PROMPTS["default"]), kept verbatim in
# spirit: think, then put the answer in <answer> tags, which is what the extraction looks for first.
DEFAULT_SYSTEM_PROMPT = (
    "Given a problem, your task is to answer the question by thinking step-by-step in a clear and "
    "specific manner.\nOnce you have thought about the reasoning process, provide the answer in the "
    "following format:\n<answer>answer here</answer>\nDo not explain your reasoning inside the answer "
    "tags, provide only the final answer. When an example is provided, you should strictly follow the "
    "format of the output/answer in that example."
)

_ANSWER_TAG = re.compile(r"<answer>\s?(.*?)\s?</answer>", re.DOTALL)
_BOXED = re.compile(r"\\boxed\{([^}]+)\}")


@dataclass(frozen=True)
class Score:
    score: float
    extracted_answer: str | None
    reason: str


def extract_answer(text: str) -> str:
    """The last ``<answer>\\s?(.*?)\\s?</answer>`` match (DOTALL), else the first
    ``\\boxed\\{([^}]+)\\}``, else the whole text; stripped in every case (may be ``""``)."""
    tagged = _ANSWER_TAG.findall(text)
    if tagged:
        return tagged[-1].strip()
    boxed = _BOXED.search(text)
    if boxed:
        return boxed.group(1).strip()
    return text.strip()


def several_answers(text: str) -> bool:
    """Whether ``text`` hedges: the answers that extraction reads from (its ``<answer>`` tags, or
    when it has none its ``\\boxed{}`` contents) say two different things once stripped."""
    answers = _ANSWER_TAG.findall(text) or _BOXED.findall(text)
    return len({answer.strip() for answer in answers}) > 1


_scorers: dict[str, Callable[..., Any]] = {}


def _scorer(task: str) -> Callable[..., Any]:
    """The task's ``score_answer``, on an instance built with the task's default config."""
    if task not in _scorers:
        _library()
        from reasoning_gym.factory import get_score_answer_fn

        _scorers[task] = get_score_answer_fn(task)
    return _scorers[task]


def warm_scorers() -> None:
    """Build every task's scorer (about a second); run once in the worker pool's zygote, so that
    each worker starts with all of them."""
    _library()
    from reasoning_gym.factory import DATASETS

    for task in DATASETS:
        try:
            _scorer(task)
        except Exception:  # noqa: BLE001 - such a task scores 0 when asked (see score)
            pass


# Tasks whose scorer compares the parsed grid, a tuple of tuples, with ``metadata["output"]``: a
# tuple when the library made the row, a list of lists once the row went through JSON, so that a
# right answer scores 0.05 on rows read from a file (as in the reference) unless restored.
TUPLE_GRID_TASKS = frozenset({"arc_agi", "rearc"})


def _with_tuple_grid(metadata: dict[str, Any]) -> dict[str, Any]:
    grid = metadata.get("output")
    if isinstance(grid, list) and all(isinstance(row, list) for row in grid):
        return {**metadata, "output": tuple(tuple(row) for row in grid)}
    return metadata


def score(
    task: str,
    text: str,
    question: str,
    answer: str | None,
    metadata: Mapping[str, Any],
    restore_tuple_grids: bool = False,
    several: str = "reject",
) -> Score:
    """Extract the answer from ``text`` and score it with ``task``'s own scorer on the entry
    ``{question, answer, metadata}``. Any exception of the library (an unknown task, a scorer that
    raises on this answer) gives 0.0 with reason ``"error"``, as in the reference.
    ``restore_tuple_grids`` turns ``metadata.output`` back into a tuple of tuples for
    :data:`TUPLE_GRID_TASKS`, so that a right grid scores 1.0 rather than the reference's 0.05.
    With ``several="reject"`` (the default) a text whose answers differ (:func:`several_answers`) is
    not scored: 0.0, reason ``"several_answers"``; ``"reference"`` scores the one extraction picks."""
    if several == "reject" and several_answers(text):
        return Score(0.0, None, "several_answers")
    extracted = extract_answer(text)
    metadata = dict(metadata)
    if restore_tuple_grids and task in TUPLE_GRID_TASKS:
        metadata = _with_tuple_grid(metadata)
    entry = {"question": question, "answer": answer, "metadata": metadata}
    try:
        value = float(_scorer(task)(answer=extracted, entry=entry))
    except Exception:  # noqa: BLE001 - the spec: any scoring exception gives 0.0
        return Score(0.0, extracted, "error")
    return Score(value, extracted, "scored")


def task_names() -> list[str]:
    """Every task the library registers, sorted, less :data:`EXCLUDED_TASKS`."""
    _library()
    from reasoning_gym.factory import DATASETS

    return sorted(name for name in DATASETS if name not in EXCLUDED_TASKS)


def parse_task_weights(specs: Sequence[str]) -> dict[str, float]:
    """``["a", "b=2"]`` → ``{"a": 1.0, "b": 2.0}``. Raises ``ValueError`` naming a bad spec."""
    weights: dict[str, float] = {}
    for spec in specs:
        name, sep, weight = spec.partition("=")
        name = name.strip()
        try:
            value = float(weight) if sep else 1.0
        except ValueError:
            raise ValueError(f"{spec!r}: the weight after '=' must be a number") from None
        if not name or value <= 0:
            raise ValueError(f"{spec!r}: expected TASK or TASK=WEIGHT with a positive weight")
        if name in weights:
            raise ValueError(f"{name!r} is given twice")
        weights[name] = value
    return weights


def _library() -> Any:
    """``reasoning_gym``, imported without the SyntaxWarnings one of its dependencies (cellpylib)
    prints when its files are first compiled."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SyntaxWarning)
        import reasoning_gym
    return reasoning_gym


def generate_rows(
    weights: Mapping[str, float], n: int, seed: int, system_prompt: str | None = DEFAULT_SYSTEM_PROMPT
) -> list[dict[str, Any]]:
    """``n`` rows drawn from the tasks of ``weights`` in proportion to their weights (each row's
    task chosen with ``random.Random(seed)``), each task's rows generated by the library with its
    default config and a seed derived from ``seed`` and the task's name: the same arguments always
    give the same rows. A row: ``responses_create_params.input`` (the system prompt, if any, then
    the question as the user message), ``question``, ``answer`` (may be null for tasks without a
    single oracle answer) and ``metadata`` (with ``source_dataset``, the task), as plain JSON
    (tuples become lists): exactly what the server will read back from a JSONL file. Raises
    ``ValueError`` for an unknown or excluded task."""
    reasoning_gym = _library()
    known = set(task_names())
    unknown = [name for name in weights if name not in known]
    if unknown:
        raise ValueError(f"unknown task(s) {', '.join(unknown)}: see `gym reasoning-gym tasks`")
    if n < 0:
        raise ValueError("n must be at least 0")
    rng = random.Random(seed)
    names = list(weights)
    chosen = rng.choices(names, weights=[weights[name] for name in names], k=n) if len(names) > 1 else names * n
    datasets = {}
    for name in set(chosen):
        task_seed = random.Random(f"{seed}:{name}").randrange(2**31)
        datasets[name] = reasoning_gym.create_dataset(name, seed=task_seed, size=chosen.count(name))
    next_index = dict.fromkeys(datasets, 0)
    rows = []
    for name in chosen:
        entry = datasets[name][next_index[name]]
        next_index[name] += 1
        messages = [{"role": "system", "content": system_prompt}] if system_prompt else []
        messages.append({"role": "user", "content": entry["question"]})
        row = {
            "responses_create_params": {"input": messages},
            "question": entry["question"],
            "answer": entry["answer"],
            "metadata": entry["metadata"],
        }
        rows.append(json.loads(json.dumps(row)))
    return rows


def oracle_conformance(row: Mapping[str, Any], restore_tuple_grids: bool = False) -> dict[str, Any] | None:
    """The ``conformance`` field of a generated ``row`` (ignored by the server; read by gym's
    conformance kit and ``python -m benchmarks``): its oracle ``answer`` in ``<answer>`` tags and
    the reward a server with this ``restore_tuple_grids`` gives that response (1.0, but 0.05 for a
    right grid of :data:`TUPLE_GRID_TASKS` by default: the reference's quirk). None for a row
    without an oracle answer (graph colouring, logic...), whose right answer takes a solver."""
    if row["answer"] is None:
        return None
    response = f"<answer>{row['answer']}</answer>"
    task = row["metadata"]["source_dataset"]
    result = score(task, response, row["question"], row["answer"], row["metadata"], restore_tuple_grids)
    return {"response": response, "reward": result.score}
