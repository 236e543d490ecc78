"""gym's agents as an OpenRLHF agent executor (OpenRLHF 0.11.2, ``openrlhf.utils.agent``).

:class:`GymAgentExecutor` is an ``AgentExecutorBase``: ``execute(prompt, label, sampling_params,
max_length, hf_tokenizer, llm_engine)`` runs the gym task that ``label`` holds through a gym agent's
``POST /run`` (token-faithful: the ``token_preserving`` agent) and returns the dict OpenRLHF's sample
maker reads:

- ``observation_tokens``: the first model call's prompt ids, then each turn's generated ids and the
  tool outputs' ids between them, exactly as the model saw them
  (:func:`gym_train.trl.rollouts.token_trajectory`);
- ``action_ranges``: the ``[start, end)`` spans of generated ids in ``observation_tokens`` (OpenRLHF's
  action mask: 1 inside them, 0 on the prompt and tool outputs);
- ``rollout_log_probs``: when ``sampling_params.logprobs`` is set, one per observation token: the
  model server's log-probs on generated ids, 0 elsewhere;
- ``reward`` and ``scores``: the rollout's verified reward (the agent's ``/verify``);
- ``truncated``: the agent's response is ``incomplete``; ``extra_logs``: ``gym_turns`` (model calls).

Rows: OpenRLHF's prompt dataset with the gym task JSON as the label (``--data.label_key gym_task``
on ``gym export prompts`` output); ``prompt`` is only echoed: gym's agent renders the task's messages
itself. OpenRLHF loads the executor from a file (``--train.agent_func_path``) that defines a class
named ``AgentExecutor``; ``examples/openrlhf_agent.py`` is one, configured by ``$GYM_HEAD_URL`` (a
running ``gym run``) and ``$GYM_AGENT``.

Sampling: ``temperature``, ``top_p`` and ``seed`` from ``sampling_params``; ``max_output_tokens`` per model call
= ``sampling_params.max_tokens`` when set, else the model server's default; OpenRLHF itself cuts
observations longer than ``max_length`` (``--data.max_len``). A failed rollout raises
:class:`~gym_train.agent_rollout.RolloutFailed` (typed, never a reward of 0).

The policy: the gym agent's model server generates, not ``llm_engine``. For on-policy training that
server must serve OpenRLHF's current weights (see docs/training.md, "Train with OpenRLHF").
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from openrlhf.utils.agent import AgentExecutorBase

from gym_train.agent_rollout import AgentRollout, RolloutFailed, connect_servers, parse_task, run_rollout
from gym_train.trl.servers import GymServers

__all__ = ["AGENT_ENV", "GymAgentExecutor", "RolloutFailed", "to_executor_output"]

AGENT_ENV = "GYM_AGENT"


def action_ranges(mask: list[int], offset: int) -> list[tuple[int, int]]:
    """The ``[start, end)`` runs of 1 in ``mask``, shifted by ``offset``."""
    ranges: list[tuple[int, int]] = []
    start = None
    for index, bit in enumerate([*mask, 0]):
        if bit and start is None:
            start = index
        elif not bit and start is not None:
            ranges.append((offset + start, offset + index))
            start = None
    return ranges


def to_executor_output(
    rollout: AgentRollout, *, prompt: Any, label: Any, log_probs: bool, images: Any = None
) -> dict[str, Any]:
    """OpenRLHF's executor output for one gym rollout (module docstring)."""
    trajectory = rollout.trajectory
    prompt_ids = list(trajectory.prompt_ids)
    response = rollout.result.get("response") or {}
    return {
        "prompt": prompt,
        "label": label,
        "images": images,
        "mm_train_inputs": None,
        "observation_tokens": prompt_ids + list(trajectory.completion_ids),
        "action_ranges": action_ranges(list(trajectory.env_mask), len(prompt_ids)),
        "rollout_log_probs": [0.0] * len(prompt_ids) + list(trajectory.logprobs) if log_probs else None,
        "reward": rollout.reward,
        "scores": rollout.reward,
        "truncated": response.get("status") == "incomplete",
        "extra_logs": {"gym_turns": trajectory.turns},
    }


class GymAgentExecutor(AgentExecutorBase):
    """OpenRLHF's agent executor through a gym agent's ``/run`` (module docstring).

    ``head_url``: a running ``gym run`` (default ``$GYM_HEAD_URL``); ``servers``: a
    :class:`~gym_train.trl.servers.GymServers` of this process instead. ``agent``: the agent instance
    for labels whose task names none (default ``$GYM_AGENT``, else the task's ``agent_ref``, else the
    config's only agent). ``on_rollout``: called with each scored
    :class:`~gym_train.agent_rollout.AgentRollout` (its ``/run`` result: to log rows). Servers are
    connected on the first ``execute``: OpenRLHF builds the executor in each vLLM engine's actor."""

    def __init__(
        self,
        head_url: str | None = None,
        *,
        servers: GymServers | None = None,
        agent: str | None = None,
        deadline_s: float = 900.0,
        retries: int = 2,
        on_rollout: Callable[[AgentRollout], None] | None = None,
    ):
        self.head_url = head_url
        self.servers = servers
        self.agent = agent or os.environ.get(AGENT_ENV) or None
        self.deadline_s = deadline_s
        self.retries = retries
        self.on_rollout = on_rollout

    async def execute(
        self, prompt, label, sampling_params, max_length: int, hf_tokenizer, llm_engine, images=None
    ) -> dict[str, Any]:
        task = parse_task(label)
        sampling: dict[str, Any] = {}
        for key in ("temperature", "top_p"):
            value = getattr(sampling_params, key, None)
            if value is not None:
                sampling[key] = float(value)
        seed = getattr(sampling_params, "seed", None)
        if seed is not None:
            sampling["seed"] = int(seed)
        max_tokens = getattr(sampling_params, "max_tokens", None)
        if max_tokens:
            sampling["max_output_tokens"] = int(max_tokens)
        if self.servers is None:
            self.servers = await connect_servers(self.head_url)
        rollout = await run_rollout(
            self.servers, task, agent=self.agent, sampling=sampling, deadline_s=self.deadline_s, retries=self.retries
        )
        if self.on_rollout is not None:
            self.on_rollout(rollout)
        return to_executor_output(
            rollout,
            prompt=prompt,
            label=label,
            log_probs=getattr(sampling_params, "logprobs", None) is not None,
            images=images,
        )
