"""Multi-turn GRPO with TRL through a gym agent: counter's tools, token_preserving, the policy served
from the trainer's own model. TRL's rollout_func runs each prompt through the agent's /run and trains
on the tokens the model generated (the tool outputs masked out).

Run from the workspace root in gym-train's venv (docs/training.md, "Train with TRL"):

    python packages/gym-train/src/gym_train/examples/trl_grpo_tools.py [STEPS]
"""

import sys

import torch
from trl import GRPOConfig, GRPOTrainer

from gym_train.model import load_policy
from gym_train.trl import AgentRollouts, GymServers, read_prompt_rows, to_dataset

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 10
torch.set_num_threads(1)
policy = load_policy()

# policy_model (a local_llama instance of the config) is served by the model being trained.
config = "packages/gym-train/src/gym_train/examples/trl_counter.yaml"
with GymServers.serve(config, policy_model="policy_model") as servers:
    dataset = to_dataset(read_prompt_rows("packages/gym-train/src/gym_train/examples/trl_counter.jsonl"))
    rollouts = AgentRollouts(servers, dataset, rollouts_path="out/trl-tools/rollouts.jsonl")
    args = GRPOConfig(
        output_dir="out/trl-tools",
        max_steps=steps,
        per_device_train_batch_size=8,
        num_generations=4,
        max_completion_length=40,  # per model call; the agent's max_steps bounds the calls
        learning_rate=2e-5,
        logging_steps=1,
        use_cpu=True,
        bf16=False,
        report_to=[],
        save_strategy="no",
    )
    trainer = GRPOTrainer(
        model=policy.model,
        processing_class=policy.tokenizer,
        reward_funcs=rollouts.reward,  # each rollout's verdict, from the environment's /verify
        rollout_func=rollouts,
        args=args,
        train_dataset=dataset,
    )
    trainer.train()
    print(f"rollouts took {rollouts.seconds:.1f} s; the policy server generated {servers.policy.stats}")
