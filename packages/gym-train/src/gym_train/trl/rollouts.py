"""TRL's ``rollout_func`` through gym's agents: multi-turn rollouts with tools, token for token.

``GRPOTrainer(rollout_func=rollouts, reward_funcs=rollouts.reward, ...)``: TRL 1.16 calls
``rollouts(prompts, trainer)`` with the batch's prompts (each repeated ``num_generations`` times)
and expects, per prompt, ``prompt_ids``, ``completion_ids`` and ``logprobs``; other keys are passed to
the reward functions, and ``env_mask`` (1 for the model's tokens, 0 for the rest) masks the
completion's tokens out of the loss. :class:`AgentRollouts` runs each prompt's task through a gym
agent's ``POST /run`` (``token_preserving``: the model server returns the ids it sampled and their
log-probs, and each turn's prompt is the previous prompt + generated ids + the new turns' tokens) and
returns:

- ``prompt_ids``: the first model call's prompt ids (the task's messages and tools, as the model
  server rendered them);
- ``completion_ids``: everything after them in the last call's prompt + generated ids: each turn's
  generated tokens and, between them, the tokens of the tool outputs (and the chat markup around
  them), exactly as the model saw them: nothing is re-tokenised;
- ``env_mask``: 1 on the generated tokens, 0 on the rest (TRL trains on the 1s only);
- ``logprobs``: the model server's log-probs of the generated tokens (0 elsewhere);
- ``gym_reward``, ``gym_environment``, ``gym_rollout_task``: the rollout's verdict (the agent's
  ``/verify``), its environment and the task it ran; :attr:`AgentRollouts.reward` returns the first.

The agents' model server is the policy being trained: with ``GymServers.serve(...,
policy_model=NAME)`` the rollout function binds ``trainer.model`` to the in-process policy server
before each round (:mod:`gym_train.trl.policy_server`); against a running ``gym run``, point its
model instance at a server the trainer updates (TRL's vLLM server mode on a GPU machine).

Sampling: each ``/run`` asks for the trainer's ``temperature``, ``top_p`` and, per model call,
``max_completion_length`` output tokens (the agent's ``max_steps`` bounds the calls), and a ``seed``
of its own (from the trainer's seed, the step and the rollout's place in the batch). Failures are
handled as the reward's are (:mod:`gym_train.trl.rewards`): server failures retried within
``deadline_s``, then ``on_failure="raise"`` fails the step naming each rollout, ``"mask"`` gives the
rollout an empty, fully masked completion and reward ``None`` (unscorable: advantage 0).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import msgspec

from gym_core.errors import GymError, ServerCallError

from gym_cli.rollouts import GaveUp, failure_fields, with_retries
from gym_train.trl.data import AGENT_COLUMN, PROMPT_COLUMN, TASK_COLUMN, prompt_key, task_of
from gym_train.trl.rewards import OnFailure, RolloutLog, VerificationFailed, environment_metrics
from gym_train.trl.servers import GymServers

__all__ = ["AgentRollouts", "RolloutReward", "TokenTrajectory", "token_trajectory"]


class TokenTrajectory(msgspec.Struct):
    """A multi-turn rollout as TRL trains on it (module docstring)."""

    prompt_ids: list[int]
    completion_ids: list[int]
    env_mask: list[int]
    logprobs: list[float]
    turns: int


def token_trajectory(result: Mapping[str, Any]) -> TokenTrajectory:
    """The token trajectory of an agent's ``/run`` result: from the token fields on its response's
    items (the last item of each model call carries that call's ``prompt_token_ids``,
    ``generation_token_ids`` and ``generation_log_probs``). ``ValueError`` when the rollout carries
    none, or when a turn's prompt does not extend the previous turn's ids (a re-tokenised history)."""
    turns = []
    for item in (result.get("response") or {}).get("output") or []:
        if isinstance(item, Mapping) and item.get("generation_token_ids") is not None:
            prompt, generated, log_probs = (
                item.get("prompt_token_ids"),
                item["generation_token_ids"],
                item.get("generation_log_probs"),
            )
            if prompt is None or log_probs is None or len(log_probs) != len(generated):
                raise ValueError(
                    "a model call's item carries generation_token_ids without prompt_token_ids and as "
                    "many generation_log_probs"
                )
            turns.append((list(prompt), list(generated), [float(x) for x in log_probs]))
    if not turns:
        raise ValueError(
            "the rollout carries no token ids: run it with a token-faithful agent (token_preserving) on a "
            "model server that returns them (local_llama, the trainer's policy server)"
        )
    first = turns[0][0]
    history: list[int] = []
    completion: list[int] = []
    mask: list[int] = []
    log_probs: list[float] = []
    for number, (prompt, generated, turn_log_probs) in enumerate(turns, 1):
        if prompt[: len(history)] != history or prompt[: len(first)] != first:
            raise ValueError(
                f"model call {number}'s prompt does not begin with the previous call's prompt + generated "
                "ids: the history was re-tokenised, and TRL would train on tokens the model never saw"
            )
        new = prompt[len(first) + len(completion) :]  # tool outputs and markup since the last generation
        completion += new + generated
        mask += [0] * len(new) + [1] * len(generated)
        log_probs += [0.0] * len(new) + turn_log_probs
        history = prompt + generated
    return TokenTrajectory(first, completion, mask, log_probs, len(turns))


class RolloutReward:
    """The reward function that goes with :class:`AgentRollouts` (its ``reward``): each sample's
    reward is its rollout's verdict, which the agent got from the environment's ``/verify``; it logs
    per-environment reward and pass rate like :class:`~gym_train.trl.rewards.VerifyReward`."""

    __name__ = "gym"

    def __call__(
        self,
        prompts: Sequence[Any],
        completions: Sequence[Any],
        *,
        gym_reward: Sequence[float | None],
        gym_environment: Sequence[str],
        gym_rollout_task: Sequence[str],
        gym_task: Sequence[Any] | None = None,
        log_metric: Callable[[str, float], None] | None = None,
        **_: Any,
    ) -> list[float | None]:
        if gym_task is not None:
            for index, (used, row) in enumerate(zip(gym_rollout_task, gym_task)):
                expected = row if isinstance(row, str) else json.dumps(row, ensure_ascii=False)
                if used != expected:
                    raise GymError(
                        f"sample {index}: its rollout ran another task than the batch's row (two rows share "
                        "a prompt?): the validation pass should have refused the dataset"
                    )
        rewards = [None if r is None or (isinstance(r, float) and r != r) else float(r) for r in gym_reward]
        if log_metric is not None:
            for name, value in environment_metrics(list(gym_environment), rewards).items():
                log_metric(name, value)
        return rewards


class AgentRollouts:
    """TRL's ``rollout_func``: each prompt's task through a gym agent's ``/run`` (module docstring).

    ``dataset``: the training rows (``prompt``, ``gym_task``), the same the trainer gets; validated
    now (:func:`gym_train.trl.validation.validate_rows`), and the table that maps a prompt back to
    its task. ``agent``: the agent instance for rows that name none (default: their ``agent_ref``, else
    the config's only agent)."""

    def __init__(
        self,
        servers: GymServers,
        dataset: Any,
        *,
        agent: str | None = None,
        max_concurrency: int = 32,
        deadline_s: float = 900.0,
        retries: int = 2,
        retry_backoff_s: float = 1.0,
        on_failure: OnFailure = "raise",
        rollouts_path: str | Path | None = None,
        validate: bool = True,
    ):
        if on_failure not in ("raise", "mask"):
            raise ValueError(f"on_failure must be 'raise' or 'mask', not {on_failure!r}")
        self.servers = servers
        self.agent = agent
        self.max_concurrency = max_concurrency
        self.deadline_s = deadline_s
        self.retries = retries
        self.retry_backoff_s = retry_backoff_s
        self.on_failure = on_failure
        rows = [dict(r) for r in dataset]
        if validate:
            from gym_train.trl.validation import validate_rows

            validate_rows(servers, rows, mode="rollout", agent=agent, max_concurrency=max_concurrency)
        # prompt key -> (gym_task JSON, the row's agent column): TRL gives rollout_func the prompts only.
        self.tasks: dict[str, tuple[str, Any]] = {}
        for row in rows:
            raw = (
                row[TASK_COLUMN]
                if isinstance(row[TASK_COLUMN], str)
                else json.dumps(row[TASK_COLUMN], ensure_ascii=False)
            )
            self.tasks.setdefault(prompt_key(row[PROMPT_COLUMN]), (raw, row.get(AGENT_COLUMN)))
        self.reward = RolloutReward()
        self.log = RolloutLog(rollouts_path, [raw for raw, _ in self.tasks.values()]) if rollouts_path else None
        self.retried = 0  # attempts that failed for an infrastructure reason and were made again
        self.seconds = 0.0  # spent in rollouts, all rounds together
        self.last: list[dict[str, Any]] = []  # the last round: per sample, its /run result or failure

    def __call__(self, prompts: Sequence[Any], trainer: Any) -> dict[str, list[Any]]:
        started = time.monotonic()
        if self.servers.policy is not None:
            model = (
                trainer.accelerator.unwrap_model(trainer.model) if hasattr(trainer, "accelerator") else trainer.model
            )
            self.servers.policy.bind(model, trainer.processing_class)
        raws, hints = [], []
        for index, prompt in enumerate(prompts):
            found = self.tasks.get(prompt_key(prompt))
            if found is None:
                raise GymError(
                    f"prompt {index} of the batch is not a prompt of the dataset the rollouts were built with"
                )
            raws.append(found[0])
            hints.append(found[1])
        tasks = [task_of({TASK_COLUMN: raw}) for raw in raws]
        args = getattr(trainer, "args", None)
        sampling = {
            key: value
            for key, value in (
                ("temperature", getattr(args, "temperature", None)),
                ("top_p", getattr(args, "top_p", None)),
                ("max_output_tokens", getattr(args, "max_completion_length", None)),
            )
            if value is not None
        }
        agents = [self.servers.agent_of(task, self.agent, hint=hint) for task, hint in zip(tasks, hints)]
        step = int(getattr(getattr(trainer, "state", None), "global_step", 0) or 0) + 1
        # A seed per rollout (the trainer's seed, the step, its place in the batch): the policy server
        # samples each rollout from its own generator, so a round does not depend on how requests batch.
        base = int(getattr(args, "seed", 0) or 0) * 1_000_003 + step * 10_007
        outcomes = self.servers.call(
            self._run_all(tasks, agents, sampling, [base + i for i in range(len(tasks))]),
            self.deadline_s + 30.0,
            "the rollouts",
        )
        out: dict[str, list[Any]] = {
            k: []
            for k in (
                "prompt_ids",
                "completion_ids",
                "logprobs",
                "env_mask",
                "gym_reward",
                "gym_environment",
                "gym_rollout_task",
            )
        }
        failures = []
        self.last = []
        for index, (outcome, task, raw, agent) in enumerate(zip(outcomes, tasks, raws, agents)):
            environment = self._environment(agent)
            if isinstance(outcome, GaveUp):
                fields = failure_fields(outcome)
                failures.append(
                    f"rollout {index} (agent {agent}, {environment}): {fields['reason']}: {fields['message']}"
                )
                self.last.append({"agent": agent, "failure": fields})
                trajectory = self._masked(prompts[index], trainer)
                reward = None
            else:
                result, latency = outcome
                environment = str(result.get("environment") or environment)
                try:
                    trajectory = token_trajectory(result)
                except ValueError as exc:
                    raise GymError(f"rollout {index} (agent {agent}): {exc}") from None
                reward = float(result["reward"])
                self.last.append({"agent": agent, "result": result})
                if self.log is not None:
                    self.log.write(raw, task, result, agent=agent, reward=reward, latency_s=latency, step=step)
            out["prompt_ids"].append(trajectory.prompt_ids)
            out["completion_ids"].append(trajectory.completion_ids)
            out["logprobs"].append(trajectory.logprobs)
            out["env_mask"].append(trajectory.env_mask)
            out["gym_reward"].append(reward)
            out["gym_environment"].append(environment)
            out["gym_rollout_task"].append(raw)
        if failures and self.on_failure == "raise":
            raise VerificationFailed(failures, len(outcomes), "rolled out")
        self.seconds += time.monotonic() - started
        return out

    def _environment(self, agent: str) -> str:
        named = self.servers.config.instances[agent].options.get("resources_server")
        return (
            self.servers.plugin_of(named)
            if isinstance(named, str) and named in self.servers.config.instances
            else agent
        )

    def _masked(self, prompt: Any, trainer: Any) -> TokenTrajectory:
        """A failed rollout's stand-in: the prompt's ids and one end-of-text token, masked out."""
        tokenizer = trainer.processing_class
        ids = tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True)
        if isinstance(ids, Mapping):
            ids = ids["input_ids"]
        return TokenTrajectory(list(ids), [int(tokenizer.eos_token_id)], [0], [0.0], 0)

    def _retried(self) -> None:
        self.retried += 1

    async def _run_all(
        self, tasks: list[dict[str, Any]], agents: list[str], sampling: dict[str, Any], seeds: list[int]
    ) -> list[tuple[dict[str, Any], float] | GaveUp]:
        deadline = time.monotonic() + self.deadline_s
        limit = asyncio.Semaphore(self.max_concurrency)
        client = self.servers.client

        async def attempt(task: dict[str, Any], agent: str, seed: int) -> dict[str, Any]:
            left = deadline - time.monotonic()
            body = {**task, "responses_create_params": {**task["responses_create_params"], **sampling, "seed": seed}}
            result = await client.post(agent, "/run", body, timeout_s=max(left, 0.001))
            reward = result.get("reward") if isinstance(result, dict) else None
            if not isinstance(reward, (int, float)) or isinstance(reward, bool):
                raise ServerCallError(agent, "/run", "the result has no numeric reward")
            return result

        async def one(task: dict[str, Any], agent: str, seed: int) -> tuple[dict[str, Any], float] | GaveUp:
            async with limit:
                begun = time.monotonic()
                try:
                    result = await with_retries(
                        lambda: attempt(task, agent, seed),
                        retries=self.retries,
                        backoff_s=self.retry_backoff_s,
                        backoff_max_s=8.0,
                        deadline=deadline,
                        on_retry=self._retried,
                    )
                except GaveUp as failure:
                    return failure
                return result, time.monotonic() - begun

        return await asyncio.gather(*(one(t, a, s) for t, a, s in zip(tasks, agents, seeds)))
