"""The validation pass: every training row checked against the environments before training starts.

A row that an environment would reject must stop the run before the first step, with its index and
the field at fault, rather than fail a step an hour in. For each distinct task of the rows:

1. its ``gym_task`` is a task row (a JSON object with ``responses_create_params``) and its ``prompt``
   a list of chat messages;
2. an instance plays it: the resources server that verifies it (``mode="verify"``), or the agent that
   runs it and that agent's environment (``mode="rollout"``);
3. the environment accepts it: ``/seed_session`` with the row and ``/verify`` with the row and an
   empty answer, in a session of their own (closed after). A 4xx there (a missing or mistyped field:
   gym's servers answer 422 naming it) is the row's problem; a server that cannot be reached is
   retried, then reported as such.

In ``rollout`` mode two rows with the same prompt must be the same task: TRL gives ``rollout_func``
only the prompts, so the rollout function finds a row by its prompt.

Every problem is reported at once (:class:`~gym_train.trl.data.DatasetError`), each naming its row.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from gym_core.errors import ServerHTTPError

from gym_cli.rollouts import GaveUp, failure_fields, with_retries
from gym_train.trl.data import (
    AGENT_COLUMN,
    ENVIRONMENT_COLUMN,
    PROMPT_COLUMN,
    TASK_COLUMN,
    DatasetError,
    prompt_key,
    task_of,
)
from gym_train.trl.rewards import text_response, verify_text
from gym_train.trl.servers import GymServers

__all__ = ["validate_rows"]


def validate_rows(
    servers: GymServers,
    rows: Sequence[Mapping[str, Any]],
    *,
    mode: Literal["verify", "rollout"],
    resources_server: str | None = None,
    agent: str | None = None,
    max_concurrency: int = 16,
    timeout_s: float = 600.0,
) -> None:
    """Check ``rows`` (module docstring); raise :class:`DatasetError` listing every problem."""
    problems: list[str] = []
    checks: dict[str, tuple[int, dict[str, Any], str]] = {}  # task JSON -> (first row, task, resources server)
    by_prompt: dict[str, tuple[int, str]] = {}
    for index, row in enumerate(rows):
        where = f"row {index}"
        prompt = row.get(PROMPT_COLUMN)
        if (
            not isinstance(prompt, list)
            or not prompt
            or not all(isinstance(m, Mapping) and "role" in m for m in prompt)
        ):
            problems.append(f"{where}: {PROMPT_COLUMN!r} must be a non-empty list of chat messages (role, content)")
            continue
        try:
            task = task_of(row)
        except ValueError as exc:
            problems.append(f"{where}: {exc}")
            continue
        raw = row[TASK_COLUMN] if isinstance(row[TASK_COLUMN], str) else repr(sorted(task.items()))
        if mode == "rollout":
            key = prompt_key(prompt)
            seen = by_prompt.setdefault(key, (index, raw))
            if seen[1] != raw:
                problems.append(
                    f"{where}: same prompt as row {seen[0]} but another task: the rollout function finds a "
                    "row by its prompt (TRL passes rollout_func the prompts only), so make the prompts differ"
                )
                continue
        if raw in checks:
            continue
        try:
            if mode == "rollout":
                agent_name = servers.agent_of(task, agent, hint=row.get(AGENT_COLUMN))
                named = servers.config.instances[agent_name].options.get("resources_server")
                environment = servers.resources_server_of(task, named if isinstance(named, str) else None)
            else:
                environment = servers.resources_server_of(
                    task,
                    resources_server,
                    agent_hint=row.get(AGENT_COLUMN),
                    environment_hint=row.get(ENVIRONMENT_COLUMN),
                )
        except ValueError as exc:
            problems.append(f"{where}: {exc}")
            continue
        checks[raw] = (index, task, environment)
    if checks:
        problems += servers.call(
            _check_all(servers, list(checks.values()), max_concurrency, timeout_s),
            timeout_s + 30,
            "the validation pass",
        )
    if problems:
        raise DatasetError(problems)


async def _check_all(
    servers: GymServers, checks: list[tuple[int, dict[str, Any], str]], max_concurrency: int, timeout_s: float
) -> list[str]:
    deadline = time.monotonic() + timeout_s
    limit = asyncio.Semaphore(max_concurrency)
    empty = text_response("")

    async def check(index: int, task: dict[str, Any], environment: str) -> str | None:
        async with limit:
            try:
                await with_retries(
                    lambda: verify_text(servers, environment, task, empty, deadline),
                    retries=2,
                    backoff_s=0.5,
                    backoff_max_s=4.0,
                    deadline=deadline,
                )
            except GaveUp as failure:
                cause = failure.cause
                plugin = servers.plugin_of(environment)
                if isinstance(cause, ServerHTTPError) and cause.status is not None and 400 <= cause.status < 500:
                    return f"row {index}: {plugin} ({environment}) rejects it at {cause.path}: {cause.detail}"
                fields = failure_fields(failure)
                return f"row {index}: could not be checked on {environment}: {fields['reason']}: {fields['message']}"
        return None

    found = await asyncio.gather(*(check(*c) for c in checks))
    return [p for p in found if p is not None]
