"""gym's environments in TRL's trainers (``pip install 'gym-train[trl]'``; TRL 1.16).

Single-turn GRPO: TRL generates, gym's environments score::

    from trl import GRPOConfig, GRPOTrainer
    from gym_train.trl import GymServers, VerifyReward, read_prompt_rows, to_dataset

    with GymServers.serve("math.yaml") as servers:                  # or GymServers.connect(head_url)
        dataset = to_dataset(read_prompt_rows("math_tasks.jsonl"))   # prompt + gym_task columns
        reward = VerifyReward(servers, dataset)                      # validates every row first
        GRPOTrainer(model=..., reward_funcs=reward, train_dataset=dataset, args=GRPOConfig(...)).train()

Multi-turn GRPO with tools: TRL's ``rollout_func`` runs each task through a gym agent whose model
server is the policy being trained::

    with GymServers.serve("counter.yaml", policy_model="policy_model") as servers:
        rollouts = AgentRollouts(servers, dataset)
        GRPOTrainer(model=..., rollout_func=rollouts, reward_funcs=rollouts.reward, ...).train()

- :mod:`gym_train.trl.servers`: :class:`GymServers`, the servers and a client on a loop of their own;
- :mod:`gym_train.trl.rewards`: :class:`VerifyReward` (``/verify`` per completion, concurrent,
  bounded, typed failures raised or masked, never 0);
- :mod:`gym_train.trl.rollouts`: :class:`AgentRollouts` (``/run`` per prompt; token ids, the
  completion mask and log-probs from the model server's token fields);
- :mod:`gym_train.trl.policy_server`: :class:`TrainerPolicyServer`, the trainer's torch model behind
  ``local_llama``'s server;
- :mod:`gym_train.trl.data`: rows (``prompt``, ``gym_task``), :class:`TaskMixture` (weighted
  environments);
- :mod:`gym_train.trl.validation`: the pass that checks every row against its environment first.

Nothing here imports TRL: the reward and rollout functions are plain callables in TRL's signatures.
"""

from __future__ import annotations

from gym_train.trl.data import (
    PROMPT_COLUMN,
    TASK_COLUMN,
    DatasetError,
    MixtureSource,
    TaskMixture,
    prompt_row,
    read_prompt_rows,
    task_of,
    to_dataset,
)
from gym_train.trl.rewards import VerificationFailed, VerifyReward
from gym_train.trl.rollouts import AgentRollouts, RolloutReward, token_trajectory
from gym_train.trl.servers import GymServers
from gym_train.trl.validation import validate_rows

__all__ = [
    "PROMPT_COLUMN",
    "TASK_COLUMN",
    "AgentRollouts",
    "DatasetError",
    "GymServers",
    "MixtureSource",
    "RolloutReward",
    "TaskMixture",
    "VerificationFailed",
    "VerifyReward",
    "prompt_row",
    "read_prompt_rows",
    "task_of",
    "to_dataset",
    "token_trajectory",
    "validate_rows",
]
