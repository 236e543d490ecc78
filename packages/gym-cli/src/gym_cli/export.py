"""Rollouts → training datasets in TRL's formats (``gym export sft|dpo|prompts``).

A rollout row (:mod:`gym_core.rows`) holds the task as sent (``responses_create_params``: its
``instructions``, ``input`` and ``tools``), the trajectory (``response.output``) and its ``reward``.
:func:`rollout_conversation` turns one into chat messages in the shape chat templates render
(transformers' ``apply_chat_template``, which TRL's trainers call), through
:func:`gym_core.convert.create_params_to_chat`:

- ``instructions`` → a leading ``system`` message; a ``developer`` message → ``system`` (templates
  know no ``developer`` role);
- a message item → ``{"role", "content"}`` (text parts joined);
- consecutive ``function_call`` items → one assistant message with ``"content": ""`` and
  ``"tool_calls": [{"id", "type": "function", "function": {"name", "arguments": {...}}}]`` (the
  arguments decoded to an object, as templates expect; kept as the model's string when that is not a
  JSON object);
- ``function_call_output`` → ``{"role": "tool", "name": <the call's function>, "tool_call_id",
  "content"}``;
- ``reasoning`` → ``reasoning_content`` on the next assistant message;
- the offered tools (the request's; else those the response echoes: an agent offers a task that
  names none its environment's own, and models echo the tools they were given) → the ``tools``
  column, a JSON string of chat function specs (``[{"type": "function", "function": {"name",
  "description", "parameters"}}]``): TRL's SFT and DPO trainers ``json.loads`` a string ``tools``
  column, and a string keeps every schema exactly where a typed column would merge different
  schemas' keys.

The three exports (one row each, columns in this order):

- ``sft``: ``{"messages": [...], "tools"?}``, the whole conversation ending with the assistant's turn
  (TRL's conversational language-modeling type, for ``SFTTrainer``);
- ``dpo``: ``{"prompt": [...], "chosen": [...], "rejected": [...], "tools"?}``: the task's prompt, and
  the completions of its best and worst rollout (TRL's conversational preference type with an
  explicit prompt, for ``DPOTrainer``);
- ``prompts``: ``{"prompt": [...], "tools"?, "gym_task", "environment", "agent", "task_index"}``, one
  per task (TRL's conversational prompt-only type, for ``GRPOTrainer``): ``gym_task`` is the task row as
  a JSON string (what ``/run``, ``/seed_session`` and ``/verify`` take), ``environment`` the
  environment that verified it (null for a task row), ``agent`` the agent instance that runs it
  (the task's ``agent_ref``, else the one that ran its rollouts).

A ``tools`` column is there when some exported row's task offered tools (null in the others).

A *task* is known by its ``task_index`` and its prompt (messages and tools): rollouts of the same task
file from several runs (another temperature, another model) are one task, and so are pass rates,
best-of-n and pairs across those files. Filters (:class:`ExportOptions`) run in this order, and each
dropped rollout is counted under one reason (:data:`DROP_REASONS`): a failed rollout; a conversation
that is not complete; a task outside the pass-rate window (the share of its rollouts whose reward
reaches ``pass_reward``, counted over all its rollouts); then per mode, sft: a reward below the
threshold, a duplicate conversation, beyond the best n of its task; dpo: a duplicate completion, a
task without two distinct rewards, a margin too small, neither the best nor the worst rollout;
prompts: a task already exported.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import msgspec

from gym_core.convert import create_params_to_chat, tools_to_chat
from gym_core.errors import GymError
from gym_core.schemas import (
    ChatMessage,
    FunctionTool,
    Message,
    ResponseCreateParams,
    decode_create_params,
    decode_response,
)

from gym_cli.reverify import task_fields
from gym_cli.rollouts import InputError, iter_jsonl, task_agent

__all__ = [
    "MODES",
    "FORMATS",
    "DROP_REASONS",
    "Conversation",
    "ExportOptions",
    "ExportSummary",
    "rollout_conversation",
    "task_conversation",
    "read_export_rows",
    "export_rows",
    "write_dataset",
    "export",
]

Mode = Literal["sft", "dpo", "prompts"]
MODES: tuple[Mode, ...] = ("sft", "dpo", "prompts")
FORMATS = (".jsonl", ".parquet")

# Why a row was left out, in the order the filters run: the name the summary counts it under, and
# what it means.
DROP_REASONS = {
    "failed": "a failed rollout: a failures-file row, or a response that failed (status failed or an error)",
    "incomplete": "not a complete conversation: the response was cut off (status incomplete) or does not "
    "end with an assistant turn",
    "pass_rate": "its task's pass rate is outside --min-pass-rate..--max-pass-rate",
    "below_threshold": "reward below --min-reward",
    "duplicate": "the same conversation as a row kept before it, tool-call ids aside (dpo: within its task; "
    "prompts: another row of a task already exported)",
    "not_best": "not among the --best-of highest rewards of its task",
    "no_contrast": "its task has fewer than 2 distinct rewards, so no pair",
    "margin_too_small": "its task's best minus worst reward is below --min-margin",
    "unpaired": "neither the best nor the worst rollout of its task",
}

# The fields a failures-file row has (gym_cli.rollouts.failure_fields) where a rollout row has a reward.
_FAILURE_FIELDS = ("reason", "message", "attempts")
_encoder = msgspec.json.Encoder(order="sorted")
_MSGSPEC_PATH = re.compile(r"^(?P<what>.*) - at `\$(?P<path>[^`]*)`$", re.DOTALL)


@dataclass
class Conversation:
    """A rollout (or a task) as chat messages: ``prompt`` (what the model was given), ``completion``
    (what followed: the model's turns, tool outputs, an environment's messages) and the ``tools``
    offered (chat function specs), None when none were."""

    prompt: list[dict[str, Any]]
    completion: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None

    @property
    def messages(self) -> list[dict[str, Any]]:
        return [*self.prompt, *self.completion]

    def tools_json(self) -> str | None:
        """The ``tools`` column: the tools as a JSON string, or None."""
        return None if self.tools is None else json.dumps(self.tools, ensure_ascii=False)


@dataclass
class ExportOptions:
    """The filters of an export (see the module docstring for their order)."""

    pass_reward: float = 1.0
    """A rollout passes when its reward reaches this; the pass rate of a task is the share that do."""
    min_pass_rate: float | None = None
    """Keep only tasks whose pass rate is at least this (inclusive)."""
    max_pass_rate: float | None = None
    """Keep only tasks whose pass rate is at most this (inclusive)."""
    min_reward: float | None = None
    """sft: keep rollouts whose reward reaches this (default: ``pass_reward``)."""
    best_of: int | None = None
    """sft: keep at most this many rollouts per task, the highest rewards (the earlier row on a tie)."""
    dedup: bool = True
    """sft and dpo: drop a conversation (dpo: a completion of the same task) equal to one kept before it."""
    min_margin: float = 0.0
    """dpo: the best reward must exceed the worst by at least this (and by more than 0)."""


@dataclass
class ExportSummary:
    """What an export read, kept and dropped. ``rows_read`` counts input rows (rollouts, task rows,
    failures); ``kept`` the ones that went into the output (dpo: two per pair); ``rows_written`` the
    output's rows."""

    mode: str
    inputs: list[str]
    output: str | None = None
    rows_read: int = 0
    tasks: int = 0
    kept: int = 0
    rows_written: int = 0
    dropped: dict[str, int] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)

    def drop(self, reason: str, count: int = 1) -> None:
        if count:
            self.dropped[reason] = self.dropped.get(reason, 0) + count

    def as_json(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "inputs": self.inputs,
            "output": self.output,
            "rows_read": self.rows_read,
            "tasks": self.tasks,
            "kept": self.kept,
            "dropped": dict(self.dropped),
            "dropped_total": sum(self.dropped.values()),
            "rows_written": self.rows_written,
            "options": self.options,
        }


# --- one rollout as chat messages ---------------------------------------------------------------


def _arguments(text: str) -> Any:
    """A tool call's arguments as templates want them: the JSON object the model wrote, decoded; its
    own string when it is not one (an invalid call is still what the model said)."""
    try:
        value = json.loads(text)
    except ValueError:
        return text
    return value if isinstance(value, dict) else text


def _template_messages(messages: Iterable[ChatMessage], call_names: dict[str, str]) -> list[dict[str, Any]]:
    """Chat completions messages (OpenAI's wire shape) as chat-template messages. ``call_names``
    (call id → function name) is read and extended, so a tool message can name its function."""
    out: list[dict[str, Any]] = []
    for message in messages:
        role = "system" if message.role == "developer" else message.role
        entry: dict[str, Any] = {"role": role}
        if role == "tool":
            call_id = message.tool_call_id if isinstance(message.tool_call_id, str) else None
            if call_id in call_names:
                entry["name"] = call_names[call_id]
            if call_id is not None:
                entry["tool_call_id"] = call_id
        entry["content"] = "" if message.content is None else message.content
        if isinstance(message.reasoning_content, str) and message.reasoning_content:
            entry["reasoning_content"] = message.reasoning_content
        if isinstance(message.tool_calls, list) and message.tool_calls:
            calls = []
            for call in message.tool_calls:
                call_names[call.id] = call.function.name
                calls.append(
                    {
                        "id": call.id,
                        "type": "function",
                        "function": {"name": call.function.name, "arguments": _arguments(call.function.arguments)},
                    }
                )
            entry["tool_calls"] = calls
        out.append(entry)
    return out


def _input_items(params: ResponseCreateParams) -> list[Any]:
    if isinstance(params.input, str):
        return [Message(role="user", content=params.input)]
    return list(params.input)


def _conversation(
    params: ResponseCreateParams, output: Sequence[Any], echoed_tools: Sequence[Any] = ()
) -> Conversation:
    call_names: dict[str, str] = {}
    # A task that names no tools is offered its environment's own (gym_core.rollout.Rollout.offer): the
    # row's request does not hold them then, but a model's response echoes the tools it was given.
    tools = params.tools or [t for t in echoed_tools if isinstance(t, FunctionTool)]
    # The prompt and the output are converted apart, so that an output's first tool call never merges
    # into an assistant message that ends the prompt (a prefill): the prompt is exactly what was sent.
    prompt = create_params_to_chat(msgspec.structs.replace(params, input=_input_items(params)))
    completion = create_params_to_chat(ResponseCreateParams(input=list(output)))
    return Conversation(
        prompt=_template_messages(prompt.messages, call_names),
        completion=_template_messages(completion.messages, call_names),
        tools=tools_to_chat(tools) if tools else None,
    )


def _field_error(prefix: str, exc: msgspec.ValidationError) -> str:
    """``field `prefix.path`: what`` from a msgspec error ("Expected `str`, got `int` - at `$.input[0].role`")."""
    match = _MSGSPEC_PATH.match(str(exc))
    if match is None:
        return f"field `{prefix}`: {exc}"
    return f"field `{prefix}{match['path']}`: {match['what']}"


def _decoded_params(task: Mapping[str, Any]) -> ResponseCreateParams:
    params = task.get("responses_create_params")
    if not isinstance(params, dict):
        what = "missing" if params is None else f"must be an object (the model's input), got {type(params).__name__}"
        raise ValueError(f"field `responses_create_params`: {what}")
    try:
        return decode_create_params(params)
    except msgspec.ValidationError as exc:
        raise ValueError(_field_error("responses_create_params", exc)) from None


def task_conversation(task: Mapping[str, Any]) -> Conversation:
    """A task row's prompt as chat messages (no completion). Raises ``ValueError`` naming the field
    when its ``responses_create_params`` is not a Responses request."""
    return _conversation(_decoded_params(task), ())


def rollout_conversation(row: Mapping[str, Any]) -> Conversation:
    """A rollout row (``gym collect``'s output) as chat messages: the task's ``instructions`` and
    ``input`` as the prompt, the ``response.output`` items as the completion, the offered tools (see
    the module docstring for the shape). Raises ``ValueError`` naming the field when the row's
    ``responses_create_params`` or ``response`` is not what a rollout holds."""
    params = _decoded_params(row)
    response = row.get("response")
    if response is None and "response" in row:  # an agent that returned no trajectory: nothing to train on
        return _conversation(params, ())
    if not isinstance(response, dict):
        what = "missing" if response is None else f"must be a Responses object, got {type(response).__name__}"
        raise ValueError(f"field `response`: {what}")
    try:
        decoded = decode_response(response)
    except msgspec.ValidationError as exc:
        raise ValueError(_field_error("response", exc)) from None
    return _conversation(params, decoded.output, decoded.tools)


# --- reading ------------------------------------------------------------------------------------


@dataclass
class _Row:
    """One input row: where it is, what kind it is and, unless it is a failure, its conversation."""

    where: str
    order: int
    data: dict[str, Any]
    kind: Literal["rollout", "task", "failure"]
    conversation: Conversation | None = None
    reward: float | None = None
    status: Literal["ok", "failed", "incomplete"] = "ok"
    task_key: tuple[int, bytes] | None = None


def _digest(value: Any) -> bytes:
    return hashlib.blake2b(_encoder.encode(value), digest_size=16).digest()


def _without_ids(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` without their tool-call ids, which are random: two rollouts that differ only in
    them said the same thing."""
    out = []
    for message in messages:
        message = {k: v for k, v in message.items() if k != "tool_call_id"}
        if "tool_calls" in message:
            message["tool_calls"] = [{k: v for k, v in call.items() if k != "id"} for call in message["tool_calls"]]
        out.append(message)
    return out


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _status(row: Mapping[str, Any], conversation: Conversation) -> Literal["ok", "failed", "incomplete"]:
    response = row["response"] or {}
    if response.get("status") == "failed" or response.get("error"):
        return "failed"
    if response.get("status") == "incomplete" or not conversation.completion:
        return "incomplete"
    # A last turn that is the assistant's counts, tool calls included (an environment that scores the
    # call itself, tool_call_match, never runs it); one that is a tool output or a user message does not.
    return "ok" if conversation.completion[-1]["role"] == "assistant" else "incomplete"


def _read_row(data: Any, where: str, order: int, mode: Mode) -> _Row:
    """One input row, classified and converted; ``ValueError`` (without the place) when it is not a
    row this mode can use."""
    if not isinstance(data, dict):
        raise ValueError(f"a row must be a JSON object, got {type(data).__name__}")
    if "reward" not in data and "response" not in data:
        if _is_int(data.get("task_index")) and all(k in data for k in _FAILURE_FIELDS):
            return _Row(where, order, data, "failure")
        if mode != "prompts":
            raise ValueError(
                "field `reward`: missing: not a rollout row of gym collect (a tasks file? "
                "`gym export prompts` takes tasks)"
            )
        return _Row(where, order, data, "task", conversation=task_conversation(data))
    for name in ("task_index", "reward", "response"):
        if name not in data:
            raise ValueError(f"field `{name}`: missing: not a rollout row of gym collect")
    if not _is_int(data["task_index"]):
        raise ValueError(f"field `task_index`: must be an integer, got {data['task_index']!r}")
    if not _is_number(data["reward"]):
        raise ValueError(f"field `reward`: must be a finite number, got {data['reward']!r}")
    conversation = rollout_conversation(data)
    row = _Row(where, order, data, "rollout", conversation=conversation, reward=float(data["reward"]))
    row.status = _status(data, conversation)
    return row


def read_export_rows(paths: Sequence[Path], mode: Mode) -> list[_Row]:
    """Every row of ``paths``, checked and converted. Every row that is not one ``mode`` can use is
    reported at once, by file, line and field (:class:`~gym_cli.rollouts.InputError`, exit 2)."""
    rows: list[_Row] = []
    problems: list[str] = []
    for path in paths:
        if not path.is_file():
            problems.append(f"{path}: file not found")
            continue
        count = 0
        for number, data, problem in iter_jsonl(path):
            count += 1
            if problem:
                problems.append(problem)
                continue
            where = f"{path}:{number}"
            try:
                row = _read_row(data, where, len(rows), mode)
            except ValueError as exc:
                problems.append(f"{where}: {exc}")
                continue
            if row.conversation is not None:
                task_index = data.get("task_index") if row.kind == "rollout" else count - 1
                row.task_key = (task_index, _digest([_without_ids(row.conversation.prompt), row.conversation.tools]))
            rows.append(row)
        if not count:
            problems.append(f"{path}: no rows")
    if problems:
        shown = problems[:20] + ([f"... and {len(problems) - 20} more"] if len(problems) > 20 else [])
        raise InputError("malformed input:\n" + "\n".join(f"  {p}" for p in shown))
    return rows


# --- filtering ----------------------------------------------------------------------------------


def _by_task(rows: Iterable[_Row]) -> dict[tuple[int, bytes], list[_Row]]:
    tasks: dict[tuple[int, bytes], list[_Row]] = {}
    for row in rows:
        assert row.task_key is not None
        tasks.setdefault(row.task_key, []).append(row)
    return tasks


def _in_window(rows: list[_Row], options: ExportOptions) -> bool:
    rewards = [row.reward for row in rows if row.reward is not None]
    if not rewards:  # task rows only: no pass rate (export_rows refuses a window then)
        return True
    rate = sum(1 for r in rewards if r >= options.pass_reward) / len(rewards)
    return not (
        (options.min_pass_rate is not None and rate < options.min_pass_rate)
        or (options.max_pass_rate is not None and rate > options.max_pass_rate)
    )


def _sft(tasks: dict[tuple[int, bytes], list[_Row]], options: ExportOptions, summary: ExportSummary) -> list[_Row]:
    threshold = options.pass_reward if options.min_reward is None else options.min_reward
    seen: set[bytes] = set()
    kept: list[_Row] = []
    for rows in tasks.values():
        candidates = []
        for row in rows:
            assert row.reward is not None and row.conversation is not None
            if row.reward < threshold:
                summary.drop("below_threshold")
                continue
            if options.dedup:
                key = _digest([_without_ids(row.conversation.messages), row.conversation.tools])
                if key in seen:
                    summary.drop("duplicate")
                    continue
                seen.add(key)
            candidates.append(row)
        if options.best_of is not None and len(candidates) > options.best_of:
            best = sorted(candidates, key=lambda r: (-(r.reward or 0.0), r.order))[: options.best_of]
            summary.drop("not_best", len(candidates) - len(best))
            candidates = best
        kept.extend(candidates)
    return kept


def _dpo(
    tasks: dict[tuple[int, bytes], list[_Row]], options: ExportOptions, summary: ExportSummary
) -> list[tuple[_Row, _Row]]:
    pairs = []
    for rows in tasks.values():
        candidates = []
        seen: set[bytes] = set()
        for row in rows:
            assert row.conversation is not None
            key = _digest(_without_ids(row.conversation.completion))
            if options.dedup and key in seen:
                summary.drop("duplicate")
                continue
            seen.add(key)
            candidates.append(row)
        if len({row.reward for row in candidates}) < 2:
            summary.drop("no_contrast", len(candidates))
            continue
        # The first row of the highest reward, and the first of the lowest: stable, whatever the order of files.
        ranked = sorted(candidates, key=lambda r: (-(r.reward or 0.0), r.order))
        chosen = ranked[0]
        rejected = min(candidates, key=lambda r: (r.reward or 0.0, r.order))
        assert chosen.reward is not None and rejected.reward is not None
        if chosen.reward - rejected.reward < options.min_margin:
            summary.drop("margin_too_small", len(candidates))
            continue
        summary.drop("unpaired", len(candidates) - 2)
        pairs.append((chosen, rejected))
    return pairs


def _gym_task(rows: list[_Row]) -> tuple[_Row, dict[str, Any]]:
    """The row a task's prompt comes from, and its task: a task row as it is when there is one; else
    the first rollout's task fields (what gym reverify sends to /verify: the row without what the
    collector and the agent added)."""
    for row in rows:
        if row.kind == "task":
            return row, row.data
    return rows[0], task_fields(rows[0].data)


def _sft_row(row: _Row) -> dict[str, Any]:
    assert row.conversation is not None
    return {"messages": row.conversation.messages, "tools": row.conversation.tools_json()}


def _dpo_row(chosen: _Row, rejected: _Row) -> dict[str, Any]:
    assert chosen.conversation is not None and rejected.conversation is not None
    return {
        "prompt": chosen.conversation.prompt,
        "chosen": chosen.conversation.completion,
        "rejected": rejected.conversation.completion,
        "tools": chosen.conversation.tools_json(),
    }


def _prompt_row(rows: list[_Row]) -> dict[str, Any]:
    source, task = _gym_task(rows)
    assert source.conversation is not None and source.task_key is not None
    agent = task_agent(task)
    if agent is None:
        agent = next(
            (r.data["agent"] for r in rows if r.kind == "rollout" and isinstance(r.data.get("agent"), str)), None
        )
    environment = next(
        (r.data["environment"] for r in rows if r.kind == "rollout" and isinstance(r.data.get("environment"), str)),
        None,
    )
    return {
        "prompt": source.conversation.prompt,
        "tools": source.conversation.tools_json(),
        "gym_task": json.dumps(task, ensure_ascii=False),
        "environment": environment,
        "agent": agent,
        "task_index": source.task_key[0],
    }


def _without_empty_tools(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The ``tools`` column only where some row has tools (TRL reads a missing column as no tools)."""
    if any(row["tools"] is not None for row in rows):
        return rows
    return [{k: v for k, v in row.items() if k != "tools"} for row in rows]


def export_rows(rows: list[_Row], mode: Mode, options: ExportOptions, summary: ExportSummary) -> list[dict[str, Any]]:
    """The dataset rows of ``mode`` from the input rows, and the counts in ``summary``."""
    if options.min_pass_rate is not None or options.max_pass_rate is not None:
        bare = next((row for row in rows if row.kind == "task"), None)
        if bare is not None:
            raise InputError(
                f"{bare.where}: a task row has no rollouts, so no pass rate: --min-pass-rate and "
                "--max-pass-rate need rollout rows (export from a gym collect output)"
            )
    summary.rows_read = len(rows)
    usable: list[_Row] = []
    for row in rows:
        if row.kind == "failure" or (mode != "prompts" and row.status == "failed"):
            summary.drop("failed")
        else:
            usable.append(row)
    tasks = _by_task(usable)
    summary.tasks = len(tasks)
    for key, task_rows in list(tasks.items()):
        if not _in_window(task_rows, options):
            summary.drop("pass_rate", len(task_rows))
            del tasks[key]
    if mode == "prompts":
        out = [_prompt_row(task_rows) for task_rows in tasks.values()]
        summary.kept = len(out)
        summary.drop("duplicate", sum(len(task_rows) - 1 for task_rows in tasks.values()))
        return _without_empty_tools(out)
    for key, task_rows in list(tasks.items()):
        complete = [row for row in task_rows if row.status == "ok"]
        summary.drop("incomplete", len(task_rows) - len(complete))
        tasks[key] = complete
    if mode == "sft":
        kept = sorted(_sft(tasks, options, summary), key=lambda r: r.order)
        summary.kept = len(kept)
        return _without_empty_tools([_sft_row(row) for row in kept])
    pairs = _dpo(tasks, options, summary)
    summary.kept = 2 * len(pairs)
    return _without_empty_tools([_dpo_row(chosen, rejected) for chosen, rejected in pairs])


# --- writing ------------------------------------------------------------------------------------


def _features(mode: Mode, columns: Sequence[str]) -> Any:
    """The datasets features of an export: each message a Json value (its own keys, none added)."""
    from datasets import Features, Json, List, Value

    types = {
        "messages": List(Json()),
        "prompt": List(Json()),
        "chosen": List(Json()),
        "rejected": List(Json()),
        "tools": Value("string"),
        "gym_task": Value("string"),
        "environment": Value("string"),
        "agent": Value("string"),
        "task_index": Value("int64"),
    }
    return Features({name: types[name] for name in columns})


def _check_parquet_writer() -> None:
    try:
        import datasets  # noqa: F401
    except ImportError:
        raise GymError(
            "writing .parquet needs Hugging Face datasets, which is not installed: "
            "pip install 'gym-cli[export]' (or write .jsonl, which needs nothing)"
        ) from None


def write_dataset(rows: list[dict[str, Any]], path: Path, mode: Mode) -> None:
    """Write ``rows`` to ``path`` (``.jsonl``: one JSON object a line; ``.parquet``: through Hugging
    Face ``datasets``), whole or not at all (a temporary file renamed)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    try:
        if path.suffix == ".parquet":
            _check_parquet_writer()
            import datasets

            datasets.disable_progress_bars()
            columns = list(rows[0]) if rows else []
            datasets.Dataset.from_list(rows, features=_features(mode, columns)).to_parquet(str(partial))
        else:
            with partial.open("wb") as f:
                for row in rows:
                    f.write(msgspec.json.encode(row) + b"\n")
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)


# The options each mode reads, for the summary.
_MODE_OPTIONS = {
    "sft": ("min_reward", "best_of", "dedup"),
    "dpo": ("min_margin", "dedup"),
    "prompts": (),
}


def _options_of(mode: Mode, options: ExportOptions) -> dict[str, Any]:
    names = ("pass_reward", "min_pass_rate", "max_pass_rate", *_MODE_OPTIONS[mode])
    return {name: getattr(options, name) for name in names if getattr(options, name) is not None}


def export(mode: Mode, inputs: Sequence[Path], output: Path, options: ExportOptions) -> ExportSummary:
    """Read ``inputs``, filter, and write ``output`` (its suffix picks the format). Raises
    :class:`~gym_core.errors.GymError` (exit 2) for bad input or an unusable output, before writing."""
    if output.is_dir():
        raise GymError(f"-o {output} is a directory; give a file path, e.g. {output / 'data.jsonl'}")
    if output.suffix not in FORMATS:
        raise GymError(f"-o {output}: the output must end in .jsonl or .parquet")
    if output.suffix == ".parquet":
        _check_parquet_writer()
    for path in inputs:
        if path.exists() and output.exists() and path.resolve() == output.resolve():
            raise GymError(f"-o {output} is one of the input files: write the dataset to another file")
    summary = ExportSummary(mode, [str(p) for p in inputs], str(output), options=_options_of(mode, options))
    rows = export_rows(read_export_rows(inputs, mode), mode, options, summary)
    summary.rows_written = len(rows)
    if rows:
        write_dataset(rows, output, mode)
    return summary
