"""TRL reward functions whose rewards come from gym's environments.

:class:`VerifyReward` is the single-turn reward: TRL generates a completion, and the environment that
owns the row scores it, as a gym agent would (``POST /seed_session`` with the task row, ``POST
/verify`` with the row and the completion as the model's response, ``POST /close_session``). A batch
is verified concurrently, at most ``max_concurrency`` samples at a time, the whole batch within
``deadline_s``.

A sample that cannot be verified is never scored 0. A failure of the servers (unreachable, a
timeout, a 5xx, a lost session: :func:`gym_cli.rollouts.is_infrastructure_failure`) is retried, the
whole seed → verify → close again in a fresh session, up to ``retries`` times within the deadline;
then, and for any other failure (the environment refused the row), ``on_failure`` decides:

- ``"raise"`` (the default): :class:`VerificationFailed`, naming each failed sample, its environment
  and the typed reason; TRL's step fails with it and nothing is trained on that batch;
- ``"mask"``: the sample's reward is ``None``; TRL 1.16 then counts it *unscorable* (when every
  reward function says ``None`` for it): its advantage is 0, and it is left out of the group's
  baseline and of the logged reward statistics. The number masked is logged as ``gym/failed``.

Every step logs, through TRL's ``log_metric``, the mean reward and pass rate (reward >= 1) of each
environment in the batch (``gym/<environment>/reward``, ``gym/<environment>/pass_rate``) and the
seconds the batch's verification took (``gym/verify_seconds``). With ``rollouts_path``, each
verified completion is also appended there as a row of ``gym collect``'s shape (plus ``train_step``),
so ``gym profile`` and ``gym report`` read what training saw.
"""

from __future__ import annotations

import asyncio
import json
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import msgspec

from gym_core.errors import GymError, ServerCallError, ServerTimeoutError
from gym_core.rows import rollout_row
from gym_core.schemas import Message, OutputText, Response

from gym_cli.rollouts import GaveUp, failure_fields, with_retries
from gym_train.trl.data import TASK_COLUMN, task_of
from gym_train.trl.servers import GymServers

__all__ = [
    "OnFailure",
    "RolloutLog",
    "VerificationFailed",
    "VerifyReward",
    "completion_text",
    "environment_metrics",
    "text_response",
    "verify_text",
]

OnFailure = Literal["raise", "mask"]
_encoder = msgspec.json.Encoder()


class VerificationFailed(GymError):
    """Samples of a batch could not be scored by their environments (after the retries allowed):
    the step fails rather than train on rewards gym did not give."""

    def __init__(self, failures: Sequence[str], total: int, what: str = "verified"):
        self.failures = list(failures)
        shown = self.failures[:10] + ([f"... and {len(self.failures) - 10} more"] if len(self.failures) > 10 else [])
        super().__init__(
            f"{len(self.failures)} of {total} samples could not be {what} (none was scored; "
            "on_failure='mask' trains on the others instead):\n" + "\n".join(f"  {f}" for f in shown)
        )


def completion_text(completion: Any) -> str:
    """The text of a TRL completion: a string (standard format), or the assistant messages'
    content (conversational format)."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list):
        return "".join(str(m.get("content") or "") for m in completion if isinstance(m, dict))
    raise TypeError(f"a completion is a string or a list of messages, not {type(completion).__name__}")


def text_response(text: str, model: str = "trl-policy") -> Response:
    """A Responses API response holding ``text`` as the assistant's one message (what /verify scores)."""
    return Response(model=model, output=[Message(role="assistant", content=[OutputText(text=text)])])


async def verify_text(
    servers: GymServers, resources_server: str, task: Mapping[str, Any], response: Any, deadline: float
) -> dict[str, Any]:
    """One verification in a fresh session: ``/seed_session`` with ``task``, ``/verify`` with the
    task and ``response``, ``/close_session`` (best effort). The verdict; a typed error when a call
    fails or the verdict has no numeric reward."""
    client = servers.client

    def left(path: str) -> float:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise ServerTimeoutError(resources_server, path, "the batch's deadline passed")
        return remaining

    cookies: dict[str, str] = {}
    try:
        await client.request(
            "POST", resources_server, "/seed_session", body=task, cookies=cookies, timeout_s=left("/seed_session")
        )
        raw = await client.request(
            "POST",
            resources_server,
            "/verify",
            body={**task, "response": response},
            cookies=cookies,
            timeout_s=left("/verify"),
        )
    finally:
        if cookies:
            try:
                await client.request(
                    "POST",
                    resources_server,
                    "/close_session",
                    body=b"{}",
                    cookies=cookies,
                    timeout_s=min(10.0, max(deadline - time.monotonic(), 0.5)),
                )
            except ServerCallError:
                pass  # the session expires on its own
    try:
        verdict = msgspec.json.decode(raw)
    except msgspec.DecodeError as exc:
        raise ServerCallError(resources_server, "/verify", f"the verdict is not JSON: {exc}") from None
    reward = verdict.get("reward") if isinstance(verdict, dict) else None
    if not isinstance(reward, (int, float)) or isinstance(reward, bool) or not math.isfinite(reward):
        raise ServerCallError(resources_server, "/verify", f"the verdict has no numeric reward: {raw[:200]!r}")
    return verdict


def environment_metrics(environments: Sequence[str], rewards: Sequence[float | None]) -> dict[str, float]:
    """Per environment of a batch: ``gym/<env>/reward`` (mean) and ``gym/<env>/pass_rate`` (the share
    of rewards >= 1), over its scored samples; ``gym/failed``, the samples left unscored."""
    metrics: dict[str, float] = {"gym/failed": float(sum(r is None for r in rewards))}
    groups: dict[str, list[float]] = {}
    for environment, reward in zip(environments, rewards):
        if reward is not None:
            groups.setdefault(environment, []).append(float(reward))
    for environment, values in sorted(groups.items()):
        metrics[f"gym/{environment}/reward"] = sum(values) / len(values)
        metrics[f"gym/{environment}/pass_rate"] = sum(v >= 1.0 for v in values) / len(values)
    return metrics


class RolloutLog:
    """Rows appended to a JSONL file in ``gym collect``'s shape (:func:`gym_core.rows.rollout_row`),
    each with ``train_step``; one write per row. ``task_index`` is the task's index among the
    distinct tasks of the dataset, ``rollout_index`` counts that task's rows."""

    def __init__(self, path: str | Path, tasks: Sequence[str]):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.index = {task: i for i, task in enumerate(dict.fromkeys(tasks))}
        self.counts: dict[int, int] = {}
        self._lock = threading.Lock()

    def write(
        self,
        task_json: str,
        task: Mapping[str, Any],
        result: Mapping[str, Any],
        *,
        agent: str,
        reward: float,
        latency_s: float,
        step: int,
    ) -> dict[str, Any]:
        with self._lock:
            task_index = self.index.setdefault(task_json, len(self.index))
            rollout_index = self.counts.get(task_index, 0)
            self.counts[task_index] = rollout_index + 1
            row = rollout_row(
                result,
                task,
                task_index=task_index,
                rollout_index=rollout_index,
                agent=agent,
                reward=reward,
                latency_s=round(latency_s, 4),
            )
            row = {"train_step": step, **row}
            with self.path.open("ab", buffering=0) as f:
                f.write(_encoder.encode(row) + b"\n")
            return row


def _step(trainer_state: Any) -> int:
    """The step a batch trains: the trainer's completed steps + 1."""
    return int(getattr(trainer_state, "global_step", 0) or 0) + 1


class VerifyReward:
    """A TRL reward function (``reward_funcs=``): each completion scored by its environment's
    ``/verify`` (module docstring).

    ``servers``: the gym servers; ``dataset``: the training rows (``prompt``, ``gym_task``): checked
    against the environments now (:func:`gym_train.trl.validation.validate_rows`), so that a row an
    environment rejects is an error naming it before training starts; ``resources_server``: the
    instance that verifies every row (default: per row, see
    :meth:`GymServers.resources_server_of`)."""

    __name__ = "gym"  # TRL names the reward's columns after it: rewards/gym/mean

    def __init__(
        self,
        servers: GymServers,
        dataset: Any = None,
        *,
        resources_server: str | None = None,
        max_concurrency: int = 32,
        deadline_s: float = 300.0,
        retries: int = 2,
        retry_backoff_s: float = 0.5,
        on_failure: OnFailure = "raise",
        rollouts_path: str | Path | None = None,
        validate: bool = True,
    ):
        if on_failure not in ("raise", "mask"):
            raise ValueError(f"on_failure must be 'raise' or 'mask', not {on_failure!r}")
        if max_concurrency < 1:
            raise ValueError(f"max_concurrency must be >= 1, got {max_concurrency}")
        self.servers = servers
        self.resources_server = resources_server
        self.max_concurrency = max_concurrency
        self.deadline_s = deadline_s
        self.retries = retries
        self.retry_backoff_s = retry_backoff_s
        self.on_failure = on_failure
        self.retried = 0  # attempts that failed for an infrastructure reason and were made again
        self.seconds = 0.0  # spent verifying, all batches together
        self.batches = 0
        self.last: list[dict[str, Any]] = []  # the last batch: per sample, its environment, verdict or failure
        rows = list(dataset) if dataset is not None else []
        if validate and rows:
            from gym_train.trl.validation import validate_rows

            validate_rows(
                servers, rows, mode="verify", resources_server=resources_server, max_concurrency=max_concurrency
            )
        self.log = RolloutLog(rollouts_path, [r[TASK_COLUMN] for r in rows]) if rollouts_path else None

    def __call__(
        self,
        prompts: Sequence[Any],
        completions: Sequence[Any],
        *,
        gym_task: Sequence[Any] | None = None,
        agent: Sequence[Any] | None = None,
        environment: Sequence[Any] | None = None,
        log_metric: Callable[[str, float], None] | None = None,
        trainer_state: Any = None,
        **_: Any,
    ) -> list[float | None]:
        if gym_task is None:
            raise GymError(
                f"the batch has no {TASK_COLUMN!r} column: build the dataset with gym_train.trl "
                "(prompt_row, read_prompt_rows, TaskMixture) or `gym export prompts`"
            )
        started = time.monotonic()
        tasks, servers_of = [], []
        for index, value in enumerate(gym_task):
            try:
                task = task_of({TASK_COLUMN: value})
                servers_of.append(
                    self.servers.resources_server_of(
                        task,
                        self.resources_server,
                        agent_hint=agent[index] if agent is not None else None,
                        environment_hint=environment[index] if environment is not None else None,
                    )
                )
            except ValueError as exc:
                raise GymError(f"sample {index} of the batch: {exc}") from None
            tasks.append(task)
        texts = [completion_text(c) for c in completions]
        outcomes = self.servers.call(
            self._verify_all(tasks, servers_of, texts), self.deadline_s + 30.0, "verifying the batch"
        )
        elapsed = time.monotonic() - started
        self.seconds += elapsed
        self.batches += 1
        environments = [self.servers.plugin_of(s) for s in servers_of]
        rewards: list[float | None] = []
        failures = []
        self.last = []
        for index, (outcome, environment, server) in enumerate(zip(outcomes, environments, servers_of)):
            if isinstance(outcome, GaveUp):
                fields = failure_fields(outcome)
                failures.append(f"sample {index} ({environment} on {server}): {fields['reason']}: {fields['message']}")
                rewards.append(None)
                self.last.append({"environment": environment, "failure": fields})
            else:
                verdict, latency = outcome
                rewards.append(float(verdict["reward"]))
                self.last.append({"environment": environment, "verdict": verdict})
        if failures and self.on_failure == "raise":
            raise VerificationFailed(failures, len(outcomes))
        if self.log is not None:
            step = _step(trainer_state)
            for index, outcome in enumerate(outcomes):
                if isinstance(outcome, GaveUp):
                    continue
                verdict, latency = outcome
                result = {
                    "environment": environments[index],
                    "resources_server": servers_of[index],
                    **verdict,
                    "response": msgspec.to_builtins(text_response(texts[index])),
                }
                self.log.write(
                    json.dumps(tasks[index], ensure_ascii=False)
                    if not isinstance(gym_task[index], str)
                    else gym_task[index],
                    tasks[index],
                    result,
                    agent="trl",
                    reward=float(verdict["reward"]),
                    latency_s=latency,
                    step=step,
                )
        if log_metric is not None:
            for name, value in environment_metrics(environments, rewards).items():
                log_metric(name, value)
            log_metric("gym/verify_seconds", elapsed)
        return rewards

    def _retried(self) -> None:
        self.retried += 1

    async def _verify_all(
        self, tasks: list[dict[str, Any]], servers_of: list[str], texts: list[str]
    ) -> list[tuple[dict[str, Any], float] | GaveUp]:
        deadline = time.monotonic() + self.deadline_s
        limit = asyncio.Semaphore(self.max_concurrency)

        async def one(task: dict[str, Any], server: str, text: str) -> tuple[dict[str, Any], float] | GaveUp:
            async with limit:
                begun = time.monotonic()
                response = text_response(text)
                try:
                    verdict = await with_retries(
                        lambda: verify_text(self.servers, server, task, response, deadline),
                        retries=self.retries,
                        backoff_s=self.retry_backoff_s,
                        backoff_max_s=8.0,
                        deadline=deadline,
                        on_retry=self._retried,
                    )
                except GaveUp as failure:
                    return failure
                return verdict, time.monotonic() - begun

        return await asyncio.gather(*(one(t, s, x) for t, s, x in zip(tasks, servers_of, texts)))
