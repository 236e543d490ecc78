"""One task through a gym agent's ``/run``, as another trainer's rollout hook needs it.

veRL's agent loops (:mod:`gym_train.verl`) and OpenRLHF's agent executors (:mod:`gym_train.openrlhf`)
each roll out one sample at a time, in a coroutine on the trainer's own event loop. Both call
:func:`run_rollout`, which runs the ``/run`` on the :class:`~gym_train.trl.servers.GymServers` loop
(awaitable from any loop), retries infrastructure failures as ``gym collect`` does
(:func:`gym_cli.rollouts.with_retries`), and turns the result into token ids with
:func:`gym_train.trl.rollouts.token_trajectory` (the same conversion as the TRL adapter: prompt ids of
the first model call, then each turn's generated ids (mask 1, their log-probs) and the tool output ids
between them (mask 0)). A rollout that cannot be scored is a :class:`RolloutFailed`, never a reward
of 0.

Which servers: those given to the adapter, else :func:`servers_from_env`, the running ``gym run``
whose head server ``$GYM_HEAD_URL`` names (one connection per process: the trainers build a fresh
agent loop or executor per sample).
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gym_core.errors import GymError, ServerCallError

from gym_cli.rollouts import GaveUp, failure_fields, with_retries
from gym_train.trl.data import TASK_COLUMN, task_of
from gym_train.trl.rollouts import TokenTrajectory, token_trajectory
from gym_train.trl.servers import GymServers

__all__ = [
    "HEAD_URL_ENV",
    "AgentRollout",
    "RolloutFailed",
    "connect_servers",
    "parse_task",
    "run_rollout",
    "servers_from_env",
]

HEAD_URL_ENV = "GYM_HEAD_URL"


class RolloutFailed(GymError):
    """A rollout that gave no scored trajectory: the agent failed past its retries, answered without a
    numeric reward, or its items carry no faithful token ids. ``reason`` is the typed failure
    (a :class:`~gym_core.errors.ServerCallError`'s reason, else the exception's type)."""

    def __init__(self, agent: str, reason: str, message: str, attempts: int = 1):
        super().__init__(f"rollout through agent {agent!r} failed ({reason}, {attempts} attempt(s)): {message}")
        self.agent = agent
        self.reason = reason
        self.attempts = attempts


@dataclass(frozen=True)
class AgentRollout:
    """One scored rollout: the agent's ``/run`` result, its token trajectory and verdict."""

    agent: str
    task: dict[str, Any]
    result: dict[str, Any]
    trajectory: TokenTrajectory
    reward: float
    environment: str


def parse_task(value: Any) -> dict[str, Any]:
    """A gym task row from a trainer's dataset field: JSON text or an object with
    ``responses_create_params`` (``gym export prompts`` writes it as ``gym_task``). ``ValueError``
    saying what is wrong."""
    return task_of({TASK_COLUMN: value})


_lock = threading.Lock()
_connected: dict[str, GymServers] = {}


def servers_from_env(head_url: str | None = None) -> GymServers:
    """The running ``gym run`` whose head server is ``head_url`` (default ``$GYM_HEAD_URL``),
    connected once per process."""
    head_url = head_url or os.environ.get(HEAD_URL_ENV)
    if not head_url:
        raise GymError(
            f"no gym servers: set {HEAD_URL_ENV} to a running `gym run`'s head server URL "
            "(`gym status` prints it), or give the adapter its servers"
        )
    with _lock:
        servers = _connected.get(head_url)
        if servers is None:
            servers = _connected[head_url] = GymServers.connect(head_url)
        return servers


async def connect_servers(head_url: str | None = None) -> GymServers:
    """:func:`servers_from_env` from a coroutine: connecting runs an event loop of its own, so it runs
    in a worker thread, not on the caller's loop (veRL's and OpenRLHF's hooks run on theirs)."""
    return await asyncio.to_thread(servers_from_env, head_url)


async def run_rollout(
    servers: GymServers,
    task: Mapping[str, Any],
    *,
    agent: str | None = None,
    sampling: Mapping[str, Any] | None = None,
    deadline_s: float = 900.0,
    retries: int = 2,
    retry_backoff_s: float = 1.0,
) -> AgentRollout:
    """Run ``task`` through its agent (``agent``, else the task's ``agent_ref``, else the config's
    only agent) with ``sampling`` merged into its ``responses_create_params`` (``temperature``,
    ``top_p``, ``max_output_tokens``, ``seed``). Awaitable from any event loop. Raises
    :class:`RolloutFailed`; ``ValueError`` when the task is not a task of these servers."""
    task = dict(task)
    name = servers.agent_of(task, agent)
    body = {**task, "responses_create_params": {**task["responses_create_params"], **(sampling or {})}}
    deadline = time.monotonic() + deadline_s
    client = servers.client

    async def attempt() -> dict[str, Any]:
        result = await client.post(name, "/run", body, timeout_s=max(deadline - time.monotonic(), 0.001))
        reward = result.get("reward") if isinstance(result, dict) else None
        if not isinstance(reward, (int, float)) or isinstance(reward, bool):
            raise ServerCallError(name, "/run", "the result has no numeric reward")
        return result

    async def on_servers_loop() -> dict[str, Any]:
        return await with_retries(
            attempt, retries=retries, backoff_s=retry_backoff_s, backoff_max_s=8.0, deadline=deadline
        )

    future = asyncio.run_coroutine_threadsafe(on_servers_loop(), servers.loop)
    try:
        result = await asyncio.wait_for(asyncio.wrap_future(future), deadline_s + 30.0)
    except GaveUp as failure:
        fields = failure_fields(failure)
        raise RolloutFailed(name, fields["reason"], fields["message"], fields["attempts"]) from None
    except TimeoutError:
        future.cancel()
        raise RolloutFailed(name, "timeout", f"no result within {deadline_s + 30.0:g} s") from None
    try:
        trajectory = token_trajectory(result)
    except ValueError as exc:
        raise RolloutFailed(name, "not_token_faithful", str(exc)) from None
    resources = servers.config.instances[name].options.get("resources_server")
    environment = str(
        result.get("environment")
        or (
            servers.plugin_of(resources)
            if isinstance(resources, str) and resources in servers.config.instances
            else name
        )
    )
    return AgentRollout(name, task, result, trajectory, float(result["reward"]), environment)
