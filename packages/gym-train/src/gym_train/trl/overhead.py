"""What gym's verification adds to a TRL GRPO step, measured (``python -m benchmarks --only trainer_overhead``).

``python -m gym_train.trl.overhead --steps 3 --repeats 2 --json OUT`` (in gym-train's venv) trains
SmolLM2-135M with TRL's ``GRPOTrainer`` on gym's math tasks (8 completions a step: 2 prompts x 4,
24 tokens at most) twice over, from the same weights and seed:

- **gym**: rewards from the math environment's server (:class:`~gym_train.trl.rewards.VerifyReward`:
  HTTP, a session per sample, the grader in the server's worker process);
- **in-process**: the same grader called in the trainer's process (``gym_math.library.library_grade``,
  what the math server runs for each ``/verify``).

The two runs generate the same completions (same weights, seed and data order) and must get the same
rewards (checked), so they differ only in where the reward is computed. Runs alternate (gym,
in-process, in-process, gym, ...), after one uncounted warm-up step of each, so that a change in
the machine's load falls on both. Reported: the mean and median step time of each (TRL's
``step_time``) and their ratios, the reward call's own time per step in each, and
``added_pct``: gym's reward time minus the in-process one, as a share of the in-process step.

Also measured: one batch of 32 completions verified with ``max_concurrency`` 1 and 32, to show that
the reward path does not serialise (``concurrency_speedup``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

__all__ = ["measure", "main"]

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _math_tasks() -> Path:
    """The math environment's example tasks (from the installed gym-math's source tree)."""
    import gym_math

    for parent in Path(gym_math.__file__).resolve().parents:
        candidate = parent / "data" / "example.jsonl"
        if candidate.is_file():
            return candidate
    raise FileNotFoundError("gym-math's data/example.jsonl was not found next to the installed package")


class InProcessMathReward:
    """math's reward computed in the trainer's process: ``library_grade`` on each completion."""

    __name__ = "gym"  # the same metric names as VerifyReward's, so the logs compare

    def __init__(self) -> None:
        self.seconds = 0.0

    def __call__(self, prompts: Any, completions: Any, *, gym_task: Any, **_: Any) -> list[float]:
        from gym_math.library import library_grade
        from gym_train.trl.data import TASK_COLUMN, task_of
        from gym_train.trl.rewards import completion_text

        started = time.monotonic()
        rewards = [
            float(library_grade(completion_text(c), str(task_of({TASK_COLUMN: t})["expected_answer"])).reward)
            for c, t in zip(completions, gym_task)
        ]
        self.seconds += time.monotonic() - started
        return rewards


def measure(
    steps: int = 3, repeats: int = 2, batch: int = 8, max_completion_length: int = 24, output_dir: Path | None = None
) -> dict[str, Any]:
    """Run the comparison (module docstring) and return its figures."""
    import tempfile

    import torch
    from trl import GRPOConfig, GRPOTrainer

    from gym_train.model import load_policy
    from gym_train.trl import GymServers, VerifyReward, read_prompt_rows, to_dataset

    torch.set_num_threads(1)  # a busy 2-core machine: torch's threads would wait for each other
    policy = load_policy()
    initial = {k: v.clone() for k, v in policy.model.state_dict().items()}
    rows = read_prompt_rows(_math_tasks())
    dataset = to_dataset(rows)
    InProcessMathReward()(
        [], ["\\boxed{1}"], gym_task=[rows[0]["gym_task"]]
    )  # the grader's imports, outside the timing
    work = Path(output_dir or tempfile.mkdtemp(prefix="gym-trainer-overhead-"))
    runs: dict[str, list[dict[str, Any]]] = {"gym": [], "in_process": []}
    with GymServers.serve(EXAMPLES / "trl_math.yaml") as servers:
        # A first step of each variant, not counted (one-off costs of the first trainer and generation),
        # then the runs in the order gym, in-process, in-process, gym, ... so that neither always goes first.
        order = [("warm-up", v) for v in ("gym", "in_process")]
        for repeat in range(repeats):
            pair = ("gym", "in_process") if repeat % 2 == 0 else ("in_process", "gym")
            order += [(repeat, v) for v in pair]
        for repeat, variant in order:
            policy.model.load_state_dict(initial)
            reward = VerifyReward(servers, dataset, validate=False) if variant == "gym" else InProcessMathReward()
            warm_up = repeat == "warm-up"
            args = GRPOConfig(
                output_dir=str(work / f"{variant}-{repeat}"),
                per_device_train_batch_size=batch,
                num_generations=4,
                max_completion_length=max_completion_length,
                max_steps=1 if warm_up else steps,
                logging_steps=1,
                learning_rate=1e-5,
                bf16=False,
                use_cpu=True,
                report_to=[],
                save_strategy="no",
                seed=0,
                disable_tqdm=True,
            )
            trainer = GRPOTrainer(
                model=policy.model,
                processing_class=policy.tokenizer,
                reward_funcs=reward,
                args=args,
                train_dataset=dataset,
            )
            trainer.train()
            logged = [h for h in trainer.state.log_history if "step_time" in h]
            if warm_up:
                continue
            runs[variant].append(
                {
                    "step_s": [h["step_time"] for h in logged],
                    "rewards": [h["reward"] for h in logged],
                    "reward_s_per_step": reward.seconds / max(len(logged), 1),
                }
            )
            print(
                f"{variant} run {int(repeat) + 1}/{repeats}: steps {[round(h['step_time'], 2) for h in logged]} s, "
                f"reward {reward.seconds / max(len(logged), 1):.4f} s a step",
                file=sys.stderr,
                flush=True,
            )

        # Concurrency of the reward path: one batch of 32 completions, one at a time vs all at once.
        texts = [json.loads(r["gym_task"])["conformance"]["response"] for r in rows]
        batch_rows = [rows[i % len(rows)] for i in range(32)]
        batch_texts = [texts[i % len(texts)] for i in range(32)]
        timings = {}
        for limit in (1, 32):
            verify = VerifyReward(servers, validate=False, max_concurrency=limit)
            begun = time.monotonic()
            verify([r["prompt"] for r in batch_rows], batch_texts, gym_task=[r["gym_task"] for r in batch_rows])
            timings[limit] = time.monotonic() - begun

    gym_step = statistics.mean(s for run in runs["gym"] for s in run["step_s"])
    local_step = statistics.mean(s for run in runs["in_process"] for s in run["step_s"])
    gym_median = statistics.median(s for run in runs["gym"] for s in run["step_s"])
    local_median = statistics.median(s for run in runs["in_process"] for s in run["step_s"])
    gym_reward = statistics.mean(run["reward_s_per_step"] for run in runs["gym"])
    local_reward = statistics.mean(run["reward_s_per_step"] for run in runs["in_process"])
    same = all(a["rewards"] == b["rewards"] for a, b in zip(runs["gym"], runs["in_process"]))
    return {
        "steps": steps,
        "repeats": repeats,
        "batch": batch,
        "max_completion_length": max_completion_length,
        "gym_step_s": round(gym_step, 3),
        "in_process_step_s": round(local_step, 3),
        "ratio": round(gym_step / local_step, 4),
        "gym_step_median_s": round(gym_median, 3),
        "in_process_step_median_s": round(local_median, 3),
        "median_ratio": round(gym_median / local_median, 4),
        "gym_reward_s_per_step": round(gym_reward, 4),
        "in_process_reward_s_per_step": round(local_reward, 4),
        "gym_reward_share_pct": round(100 * gym_reward / gym_step, 3),
        "added_pct": round(100 * (gym_reward - local_reward) / local_step, 3),
        "same_rewards": same,
        "concurrency_1_s": round(timings[1], 3),
        "concurrency_32_s": round(timings[32], 3),
        "concurrency_speedup": round(timings[1] / timings[32], 2),
        "runs": runs,  # per run: its step times, logged rewards and reward seconds per step
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gym_train.trl.overhead", description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--json", type=Path, help="write the figures here (else print them)")
    args = parser.parse_args(argv)
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    results = measure(args.steps, args.repeats, args.batch)
    text = json.dumps(results, indent=2)
    if args.json:
        args.json.write_text(text + "\n")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
