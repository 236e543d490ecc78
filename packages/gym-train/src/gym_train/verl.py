"""gym's agents as a veRL agent loop (veRL 0.9.1, ``verl.experimental.agent_loop``).

:class:`GymAgentLoop` is an ``AgentLoopBase`` registered as ``gym_agent``: for each sample it runs
the row's gym task through a gym agent's ``POST /run`` (token-faithful: the ``token_preserving``
agent) and returns veRL's ``AgentLoopOutput``:

- ``prompt_ids``: the first model call's prompt ids, as gym's model server rendered them;
- ``response_ids``: each turn's generated ids and, between them, the tool outputs' ids, exactly as
  the model saw them (:func:`gym_train.trl.rollouts.token_trajectory`);
- ``response_mask``: 1 on generated ids, 0 on tool output ids;
- ``response_logprobs``: the model server's log-probs of the generated ids (0 elsewhere);
- ``reward_score``: the rollout's verified reward (the agent's ``/verify``), so veRL's reward loop
  does not score it again; ``num_turns``: model calls × 2;
- ``extra_fields``: ``gym_environment``, ``gym_agent`` and, beside veRL's ``turn_scores`` and
  ``tool_rewards`` (empty), the raw gym reward.

Rows: veRL's RL dataset (parquet) with ``agent_name: gym_agent`` and the gym task in
``extra_info.gym_task`` (JSON text or an object, as ``gym export prompts`` writes ``gym_task``).
Register it with an agent loop config file (``actor_rollout_ref.rollout.agent.agent_loop_config_path``)::

    - name: gym_agent
      _target_: gym_train.verl.GymAgentLoop
      head_url: http://127.0.0.1:11000   # a running `gym run`; default $GYM_HEAD_URL
      agent: null                        # default: the row's agent_ref, else the config's only agent

Sampling: veRL's ``temperature`` and ``top_p``, and per model call ``max_output_tokens`` (the loop's
option, at most the rollout's ``response_length``, which it defaults to); ids past ``response_length`` in all are cut off (mask and
log-probs with them), ids past ``prompt_length`` raise (veRL would cut the prompt's start, which the
model saw). A failed rollout raises :class:`~gym_train.agent_rollout.RolloutFailed` (typed, never a
reward of 0): veRL fails the step.

The policy: the gym agent's model server generates. For on-policy training it must serve veRL's
current weights (point a gym ``openai_model`` instance at veRL's rollout server); on CPU the tests use
gym's ``local_llama`` (see docs/training.md, "Train with veRL").
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopMetrics, AgentLoopOutput, register

from gym_train.agent_rollout import AgentRollout, RolloutFailed, connect_servers, parse_task, run_rollout
from gym_train.trl.servers import GymServers

__all__ = ["AGENT_NAME", "GymAgentLoop", "RolloutFailed", "to_agent_loop_output", "verl_row"]

AGENT_NAME = "gym_agent"
TASK_FIELD = "gym_task"


def verl_row(task: Mapping[str, Any], *, data_source: str = "gym") -> dict[str, Any]:
    """A row of veRL's RL dataset (a parquet row) for a gym task: ``prompt`` (the task's input as chat
    messages: what veRL logs and measures; the agent renders the prompt itself), ``data_source``,
    ``agent_name`` (``gym_agent``) and ``extra_info.gym_task`` (the task as JSON text)."""
    task = parse_task(dict(task))
    given = task["responses_create_params"].get("input")
    messages = (
        [{"role": "user", "content": given}]
        if isinstance(given, str)
        else [
            {
                "role": str(m.get("role")),
                "content": m.get("content") if isinstance(m.get("content"), str) else json.dumps(m.get("content")),
            }
            for m in given or []
            if isinstance(m, Mapping) and "role" in m
        ]
    )
    return {
        "data_source": data_source,
        "prompt": messages,
        "agent_name": AGENT_NAME,
        "extra_info": {TASK_FIELD: json.dumps(task, ensure_ascii=False)},
    }


def to_agent_loop_output(rollout: AgentRollout, *, prompt_length: int, response_length: int) -> AgentLoopOutput:
    """veRL's output for one gym rollout (module docstring)."""
    trajectory = rollout.trajectory
    if len(trajectory.prompt_ids) > prompt_length:
        raise RolloutFailed(
            rollout.agent,
            "prompt_too_long",
            f"the prompt has {len(trajectory.prompt_ids)} ids, more than the rollout's prompt_length "
            f"({prompt_length}): raise data.max_prompt_length or shorten the task",
        )
    cut = slice(0, response_length)
    return AgentLoopOutput(
        prompt_ids=list(trajectory.prompt_ids),
        response_ids=list(trajectory.completion_ids[cut]),
        response_mask=list(trajectory.env_mask[cut]),
        response_logprobs=list(trajectory.logprobs[cut]),
        reward_score=rollout.reward,
        num_turns=2 * trajectory.turns,
        metrics=AgentLoopMetrics(),
        extra_fields={
            "turn_scores": [],
            "tool_rewards": [],
            "gym_reward": rollout.reward,
            "gym_environment": rollout.environment,
            "gym_agent": rollout.agent,
        },
    )


@register(AGENT_NAME)
class GymAgentLoop(AgentLoopBase):
    """veRL's agent loop through a gym agent's ``/run`` (module docstring).

    ``head_url``: a running ``gym run`` (default ``$GYM_HEAD_URL``); ``servers``: a
    :class:`~gym_train.trl.servers.GymServers` of this process instead (tests, a config served in
    threads). ``agent``: the agent instance for rows that name none. ``max_output_tokens``: per model
    call (default and bound: ``response_length``, the whole response's). ``on_rollout``: called with each
    scored :class:`~gym_train.agent_rollout.AgentRollout` (its ``/run`` result: to log rows)."""

    def __init__(
        self,
        *args: Any,
        head_url: str | None = None,
        servers: GymServers | None = None,
        agent: str | None = None,
        deadline_s: float = 900.0,
        retries: int = 2,
        max_output_tokens: int | None = None,
        on_rollout: Callable[[AgentRollout], None] | None = None,
        **kwargs: Any,
    ):
        super().__init__(*args, **kwargs)
        # Connected on the first run: veRL builds the loop on its worker's running event loop.
        self.servers = servers
        self.head_url = head_url
        self.agent = agent
        self.deadline_s = deadline_s
        self.retries = retries
        self.on_rollout = on_rollout
        self.max_output_tokens = max_output_tokens

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        extra_info = kwargs.get("extra_info") or {}
        raw = extra_info.get(TASK_FIELD) if hasattr(extra_info, "get") else None
        if raw is None:
            raw = kwargs.get(TASK_FIELD)
        if raw is None:
            raise ValueError(
                f"the row has no gym task: put it in extra_info.{TASK_FIELD} (or a {TASK_FIELD} column) "
                "of veRL's dataset"
            )
        task = parse_task(raw)
        response_length = int(self.rollout_config.response_length)
        sampling = {
            key: float(value)
            for key, value in (
                ("temperature", sampling_params.get("temperature")),
                ("top_p", sampling_params.get("top_p")),
            )
            if value is not None
        }
        sampling["max_output_tokens"] = min(self.max_output_tokens or response_length, response_length)
        if self.servers is None:
            self.servers = await connect_servers(self.head_url)
        rollout = await run_rollout(
            self.servers, task, agent=self.agent, sampling=sampling, deadline_s=self.deadline_s, retries=self.retries
        )
        if self.on_rollout is not None:
            self.on_rollout(rollout)
        return to_agent_loop_output(
            rollout, prompt_length=int(self.rollout_config.prompt_length), response_length=response_length
        )
