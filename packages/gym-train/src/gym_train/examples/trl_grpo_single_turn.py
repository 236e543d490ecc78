"""GRPO with TRL on a gym environment, on the CPU: TRL generates, the environment's /verify scores.

Run from the workspace root in gym-train's venv (docs/training.md, "Train with TRL"):

    python packages/gym-train/src/gym_train/examples/trl_grpo_single_turn.py [--steps 10]
    python packages/gym-train/src/gym_train/examples/trl_grpo_single_turn.py \
        --config packages/gym-train/src/gym_train/examples/trl_short_answers.yaml \
        --tasks packages/gym-train/src/gym_train/examples/short_answers.jsonl --max-completion-length 12
"""

import argparse

import torch
from trl import GRPOConfig, GRPOTrainer

from gym_train.model import load_policy
from gym_train.trl import GymServers, VerifyReward, read_prompt_rows, to_dataset

parser = argparse.ArgumentParser()
parser.add_argument("--config", default="packages/gym-train/src/gym_train/examples/trl_math.yaml")
parser.add_argument("--tasks", default="plugins/resources/math/data/example.jsonl")
parser.add_argument("--steps", type=int, default=10)
parser.add_argument("--max-completion-length", type=int, default=24)
parser.add_argument("--output", default="out/trl-math")
options = parser.parse_args()

torch.set_num_threads(1)  # on a small, busy CPU torch's threads mostly wait for each other
policy = load_policy()  # SmolLM2-135M-Instruct in float32, from the GGUF that local_llama serves

with GymServers.serve(options.config) as servers:
    # Tasks files, or `gym export prompts` output: columns prompt (chat messages) and gym_task (the row).
    dataset = to_dataset(read_prompt_rows(options.tasks))
    # Checks every row against its environment now; then scores each completion through /verify.
    reward = VerifyReward(servers, dataset, rollouts_path=f"{options.output}/rollouts.jsonl")
    args = GRPOConfig(
        output_dir=options.output,
        max_steps=options.steps,
        per_device_train_batch_size=8,  # 2 prompts x 4 completions a step
        num_generations=4,
        max_completion_length=options.max_completion_length,
        learning_rate=2e-5,
        logging_steps=1,
        use_cpu=True,
        bf16=False,
        report_to=[],
        save_strategy="no",
    )
    trainer = GRPOTrainer(
        model=policy.model, processing_class=policy.tokenizer, reward_funcs=reward, args=args, train_dataset=dataset
    )
    trainer.train()
    print(f"gym verified {reward.batches} batches in {reward.seconds:.2f} s")
