"""Re-verifying rollouts: the rewards of a rollouts file recomputed by the resources servers running
now (a fixed verifier, a changed option), without calling a model.

For each row (one rollout, as ``gym collect`` wrote it):

1. a new session on the row's resources server (``resources_server``, else the one running instance
   of its ``environment``; ``--resources-server`` overrides both), seeded with the row's task fields;
2. the tool calls the agent executed (``function_call`` items paired with a ``function_call_output``,
   of tools offered in the rollout) replayed in order, so that a stateful environment (``counter``)
   reaches the state the rollout left; a replayed output that differs from the recorded one is
   counted: the environment's tools changed, and the model might have acted otherwise;
3. ``POST /verify`` with the row's task fields and its recorded ``response``;
4. the row written again with the new verdict (``reward``, and the verdict's own fields) and the
   old reward as ``previous_reward``; everything else unchanged (:func:`gym_core.rows.reverified_row`
   states which fields a verdict never replaces).

It shares the collector's machinery (:mod:`gym_cli.rollouts`): one writer per output file
(:func:`~gym_cli.rollouts.output_lock`), resuming by ``(task_index, rollout_index)``
(:func:`~gym_cli.rollouts.read_done`), one unbuffered write per row, infrastructure failures retried
(:func:`~gym_cli.rollouts.with_retries`) and the rest written to a failures
file, never scored. A row counts as failed, for ``--only-failed``, when its reward is below 1 (what
pass@k does not count as correct); the other rows are copied unchanged.

Rows whose reward did not come from one ``/verify`` (``gymnasium``: summed ``/step`` rewards;
``proof_refinement``: one verdict per correction turn; ``tool_simulation`` with verification
skipped) cannot be recomputed this way and are refused, by line, before anything runs.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from gym_core.errors import ServerCallError, ServerHTTPError, ServerTimeoutError, did_you_mean
from gym_core.failures import ends_rollout
from gym_core.rows import COLLECTOR_FIELDS, ENVIRONMENT_FIELDS, PREVIOUS_REWARD_FIELD, reverified_row
from gym_core.schemas import RolloutRecord

from gym_cli.rollouts import GaveUp, InputError, failure_fields, iter_jsonl, run_parallel, with_retries

if TYPE_CHECKING:
    from gym_core.client import ServerClient

__all__ = [
    "RolloutRow",
    "ReverifyOptions",
    "ReverifySummary",
    "read_rollout_rows",
    "passed",
    "task_fields",
    "executed_calls",
    "resolve_resources_servers",
    "copy_rows",
    "reverify_rollouts",
    "reward_diff",
]

_encoder = msgspec.json.Encoder()

# Fields a row holds about how it was produced and scored, not about its task: never sent back to the
# environment. (A verdict's own extra fields stay in the row and are sent: environments ignore
# fields they do not declare.)
ROW_FIELDS = frozenset(
    {
        *COLLECTOR_FIELDS,
        *ENVIRONMENT_FIELDS,
        PREVIOUS_REWARD_FIELD,
        "response",
        *RolloutRecord.__struct_fields__,
    }
)
# Rows whose reward is not one /verify verdict: (field present and truthy, why it cannot be recomputed).
_NOT_ONE_VERDICT = (
    (
        "env_steps",
        "a gymnasium rollout: its reward is the sum of the environment's /step rewards, not a /verify verdict",
    ),
    ("attempt_rewards", "a proof_refinement rollout: it was verified once per correction turn"),
    ("verification_skipped", "its agent skipped verification (tool_simulation's skip_verification)"),
)


@dataclass
class RolloutRow:
    """One row of the rollouts file and where it is: ``line`` (1-based), ``data`` (the row as read)."""

    line: int
    data: dict[str, Any]

    @property
    def pair(self) -> tuple[int, int]:
        return self.data["task_index"], self.data["rollout_index"]

    @property
    def reward(self) -> float:
        return float(self.data["reward"])


@dataclass
class ReverifyOptions:
    """Where rows go and how they are re-verified."""

    output: Path
    failures: Path
    parallel: int = 16
    retries: int = 3  # extra attempts of a row that failed for an infrastructure reason
    retry_backoff_s: float = 3.0  # the first retry's delay, doubled per retry (as gym collect)
    retry_backoff_max_s: float = 60.0
    row_timeout_s: float = 600.0  # one row: seed, replayed tools and verify, all its attempts together


@dataclass
class ReverifySummary:
    """Counts of a re-verification run, updated as rows complete."""

    total: int = 0  # rows in the rollouts file
    skipped: int = 0  # already in the output (resumed)
    copied: int = 0  # --only-failed: passed rows copied unchanged
    reverified: int = 0
    failed: int = 0
    retried: int = 0  # attempts that failed for an infrastructure reason and were retried
    up: int = 0  # rewards of this run's re-verified rows that went up, or down
    down: int = 0
    tools_diverged: int = 0  # rows whose replayed tool outputs differ from the recorded ones
    started: float = field(default_factory=time.monotonic)
    finished: float | None = None

    @property
    def elapsed_s(self) -> float:
        return (self.finished or time.monotonic()) - self.started


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _row_problem(row: Any) -> str | None:
    if not isinstance(row, dict):
        return f"a rollout row must be a JSON object, got {type(row).__name__}"
    missing = [
        k for k in ("task_index", "rollout_index", "reward", "responses_create_params", "response") if k not in row
    ]
    if missing:
        return f"not a rollout row of gym collect: missing {', '.join(missing)}"
    if not (_is_int(row["task_index"]) and _is_int(row["rollout_index"])):
        return "task_index and rollout_index must be integers"
    if not _is_number(row["reward"]):
        return f"reward must be a finite number, got {row['reward']!r}"
    if not isinstance(row["responses_create_params"], dict):
        return "responses_create_params must be an object (the model's input)"
    response = row["response"]
    if not isinstance(response, dict) or not isinstance(response.get("output"), list):
        return "response must be a Responses object with an output list (the trajectory to verify)"
    for key, why in _NOT_ONE_VERDICT:
        if row.get(key):
            return f"cannot be re-verified: {why}"
    return None


def read_rollout_rows(path: Path) -> list[RolloutRow]:
    """The rows of a rollouts file, checked: every line that is not a row reverify can use is
    reported with its number, at once (:class:`~gym_cli.rollouts.InputError`); so is a
    ``(task_index, rollout_index)`` pair found twice."""
    if not path.is_file():
        raise InputError(f"rollouts file not found: {path}")
    rows: list[RolloutRow] = []
    problems: list[str] = []
    first_line: dict[tuple[int, int], int] = {}
    for number, row, problem in iter_jsonl(path):
        problem = problem or (f"{path}:{number}: {why}" if (why := _row_problem(row)) else None)
        if problem:
            problems.append(problem)
            continue
        entry = RolloutRow(number, row)
        if entry.pair in first_line:
            problems.append(
                f"{path}:{number}: (task_index, rollout_index) = {entry.pair} is already on line "
                f"{first_line[entry.pair]}"
            )
            continue
        first_line[entry.pair] = number
        rows.append(entry)
    if problems:
        shown = problems[:20] + ([f"... and {len(problems) - 20} more"] if len(problems) > 20 else [])
        raise InputError("malformed rollouts:\n" + "\n".join(f"  {p}" for p in shown))
    if not rows:
        raise InputError(f"{path}: no rollouts")
    return rows


def passed(row: RolloutRow) -> bool:
    """Whether a row passed: reward 1 or more (a correct sample for pass@k). ``--only-failed``
    re-verifies the others."""
    return row.reward >= 1.0


def task_fields(row: dict[str, Any]) -> dict[str, Any]:
    """The fields of a row that the agent sent to ``seed_session`` and ``verify`` (the task's, and
    the earlier verdict's own extras): the row without what the collector and the agent added."""
    return {k: v for k, v in row.items() if k not in ROW_FIELDS}


def executed_calls(response: dict[str, Any]) -> Iterator[tuple[dict[str, Any], Any]]:
    """The function calls of a recorded response that have an output, in order, each with its
    recorded output: the calls an agent executed (a call without an output was never run)."""
    items = [item for item in response.get("output") or () if isinstance(item, dict)]
    outputs = {item.get("call_id"): item.get("output") for item in items if item.get("type") == "function_call_output"}
    for item in items:
        if item.get("type") == "function_call" and item.get("call_id") in outputs and isinstance(item.get("name"), str):
            yield item, outputs[item["call_id"]]


def _offered(params: dict[str, Any]) -> set[str] | None:
    """The function tools a task offered by name; None when it named none (the agent offered the
    environment's own tools)."""
    tools = params.get("tools")
    if not isinstance(tools, list):
        return None
    return {
        t["name"]
        for t in tools
        if isinstance(t, dict) and t.get("type", "function") == "function" and isinstance(t.get("name"), str)
    }


def _lines(numbers: list[int]) -> str:
    shown = ", ".join(map(str, numbers[:8]))
    more = f" and {len(numbers) - 8} more" if len(numbers) > 8 else ""
    return f"line{'s' * (len(numbers) > 1)} {shown}{more}"


def resolve_resources_servers(
    rows: list[RolloutRow], instances: dict[str, tuple[str | None, str | None]], override: str | None = None
) -> dict[int, str]:
    """The resources server instance that re-verifies each row, by line: ``override``
    (``--resources-server``), else the row's ``resources_server`` when it runs, else the only running
    instance of the row's ``environment``, else (a row naming neither) the only resources server
    running. ``instances`` maps each running instance to ``(kind, server type)``, kind None when
    unknown here. Raises :class:`~gym_cli.rollouts.InputError` naming the rows that no running
    server can re-verify, before any row is."""
    resources = {name: plugin for name, (kind, plugin) in instances.items() if kind in ("resources", None)}
    running = ", ".join(f"{n} ({p})" for n, p in sorted(resources.items())) or "none"
    if override is not None:
        if override not in instances:
            raise InputError(
                f"--resources-server: no server instance named {override!r}"
                f"{did_you_mean(override, resources)} (running resources servers: {running})"
            )
        if override not in resources:
            raise InputError(
                f"--resources-server: {override!r} is a {instances[override][0]} server, not a resources server"
            )
        return {row.line: override for row in rows}
    chosen: dict[int, str] = {}
    unresolved: dict[tuple[str | None, str | None], list[int]] = {}
    for row in rows:
        name, environment = row.data.get("resources_server"), row.data.get("environment")
        if isinstance(name, str) and name in resources:
            chosen[row.line] = name
            continue
        candidates = [n for n, p in resources.items() if p == environment] if environment else list(resources)
        if len(candidates) == 1 and (environment or name is None):
            chosen[row.line] = candidates[0]
        else:
            unresolved.setdefault((name, environment), []).append(row.line)
    if unresolved:
        problems = []
        for (name, environment), lines in unresolved.items():
            if name is None and environment is None:
                what = "name no resources server or environment"
            elif name is None:
                what = f"were verified by an instance of {environment!r}, and none is running"
            else:
                what = f"were verified by {name!r} (environment {environment or 'unknown'}), which is not running"
                if environment and sum(p == environment for p in resources.values()) > 1:
                    what += f" and several instances of {environment} are"
            problems.append(f"{_lines(lines)} ({len(lines)} row{'s' * (len(lines) > 1)}) {what}")
        raise InputError(
            "no running resources server for some rows: "
            + "; ".join(problems)
            + f" (running resources servers: {running}); serve a config that runs them "
            "or pass --resources-server NAME"
        )
    return chosen


def copy_rows(output: Path, rows: list[RolloutRow]) -> None:
    """Append rows to the output unchanged (``--only-failed``: the rows that passed), one write each."""
    with output.open("ab", buffering=0) as out:
        for row in rows:
            out.write(_encoder.encode(row.data) + b"\n")


async def reverify_rollouts(
    client: ServerClient,
    rows: list[RolloutRow],
    servers: dict[int, str],
    options: ReverifyOptions,
    summary: ReverifySummary,
    on_progress: Callable[[ReverifySummary], None] = lambda s: None,
) -> ReverifySummary:
    """Re-verify ``rows`` on their resources servers (``servers``: instance by line), appending each
    new row to the output as it completes and each row that still fails to the failures file.

    ``client`` should make one attempt per request (``ClientConfig(max_attempts=1)``): rows are
    retried here, whole, in a fresh session."""
    summary.started = time.monotonic()
    tools_of: dict[str, set[str]] = {}

    async def environment_tools(instance: str, left: float) -> set[str]:
        if instance not in tools_of:
            listed = msgspec.json.decode(await client.request("GET", instance, "/tools", timeout_s=left))
            tools_of[instance] = {t["name"] for t in listed if isinstance(t, dict) and isinstance(t.get("name"), str)}
        return tools_of[instance]

    async def attempt(row: RolloutRow, instance: str, deadline: float) -> tuple[dict[str, Any], bool]:
        def left(path: str) -> float:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ServerTimeoutError(instance, path, f"the row's deadline of {options.row_timeout_s:g} s passed")
            return remaining

        task = task_fields(row.data)
        cookies: dict[str, str] = {}
        diverged = False
        try:
            await client.request(
                "POST", instance, "/seed_session", body=task, cookies=cookies, timeout_s=left("/seed_session")
            )
            offered = _offered(row.data["responses_create_params"])
            for call, recorded in executed_calls(row.data["response"]):
                path = f"/tools/{call['name']}"
                if offered is None:
                    offered = await environment_tools(instance, left("/tools"))
                if call["name"] not in offered:
                    continue  # the agent answered "unknown tool" itself; the environment never saw it
                arguments = call.get("arguments")
                body = arguments.encode() if isinstance(arguments, str) else arguments
                try:
                    text = (
                        await client.request("POST", instance, path, body=body, cookies=cookies, timeout_s=left(path))
                    ).decode()
                except ServerHTTPError as exc:
                    # A 4xx the environment meant was the model's output, as the agent recorded it (the
                    # failure table's rule, the agents' own).
                    if ends_rollout(exc.status, exc.error_type):
                        raise
                    text = _encoder.encode({"error": exc.detail}).decode()
                diverged = diverged or text != recorded
            raw = await client.request(
                "POST",
                instance,
                "/verify",
                body={**task, "response": row.data["response"]},
                cookies=cookies,
                timeout_s=left("/verify"),
            )
        finally:
            if cookies:
                try:
                    await client.request(
                        "POST",
                        instance,
                        "/close_session",
                        body=b"{}",
                        cookies=cookies,
                        timeout_s=min(10.0, max(deadline - time.monotonic(), 0.5)),
                    )
                except ServerCallError:
                    pass  # best effort: the session expires on its own
        verdict = msgspec.json.decode(raw)
        if not isinstance(verdict, dict) or not _is_number(verdict.get("reward")):
            raise ServerCallError(instance, "/verify", f"the verdict has no numeric reward: {raw[:200]!r}")
        return verdict, diverged

    with options.output.open("ab", buffering=0) as out, options.failures.open("ab", buffering=0) as failures:

        async def one(row: RolloutRow) -> None:
            instance = servers[row.line]
            deadline = time.monotonic() + options.row_timeout_s

            def retried() -> None:
                summary.retried += 1

            try:
                verdict, diverged = await with_retries(
                    lambda: attempt(row, instance, deadline),
                    retries=options.retries,
                    backoff_s=options.retry_backoff_s,
                    backoff_max_s=options.retry_backoff_max_s,
                    deadline=deadline,
                    on_retry=retried,
                )
            except GaveUp as failure:
                record = {
                    "task_index": row.pair[0],
                    "rollout_index": row.pair[1],
                    "line": row.line,
                    "resources_server": instance,
                    **failure_fields(failure),
                }
                failures.write(_encoder.encode(record) + b"\n")
                summary.failed += 1
                on_progress(summary)
                return
            new = reverified_row(row.data, verdict)
            out.write(_encoder.encode(new) + b"\n")  # one write per row: a kill can only cut the last line
            summary.reverified += 1
            summary.up += new["reward"] > row.reward
            summary.down += new["reward"] < row.reward
            summary.tools_diverged += diverged
            on_progress(summary)

        try:
            await run_parallel(rows, options.parallel, one)
        finally:
            os.fsync(out.fileno())
            summary.finished = time.monotonic()
    return summary


@dataclass
class _Diff:
    rows: int = 0
    up: int = 0
    down: int = 0
    before: float = 0.0
    after: float = 0.0

    def add(self, before: float, after: float) -> None:
        self.rows += 1
        self.up += after > before
        self.down += after < before
        self.before += before
        self.after += after

    def fields(self) -> dict[str, Any]:
        return {
            "rows": self.rows,
            "up": self.up,
            "down": self.down,
            "changed": self.up + self.down,
            "mean_before": self.before / self.rows if self.rows else None,
            "mean_after": self.after / self.rows if self.rows else None,
        }


def reward_diff(rows: list[RolloutRow], output: Path) -> dict[str, Any]:
    """The rewards of the output (this run's rows and earlier runs') against those of the rollouts
    file, matched by ``(task_index, rollout_index)``: ``overall`` and ``by_environment``, each with
    ``rows``, ``up``, ``down``, ``changed``, ``mean_before`` and ``mean_after``."""
    # Looked up with whatever pair an output row holds (the output may hold rows of other runs).
    before: dict[tuple[Any, Any], RolloutRow] = {row.pair: row for row in rows}
    overall, groups = _Diff(), {}
    for _, new, problem in iter_jsonl(output) if output.exists() else ():
        if problem or not isinstance(new, dict) or not _is_number(new.get("reward")):
            continue
        old = before.get((new.get("task_index"), new.get("rollout_index")))
        if old is None:
            continue
        name = str(old.data.get("environment") or old.data.get("resources_server") or "?")
        for diff in (overall, groups.setdefault(name, _Diff())):
            diff.add(old.reward, float(new["reward"]))
    return {"overall": overall.fields(), "by_environment": {k: v.fields() for k, v in sorted(groups.items())}}
