"""``gym train``: the closed loop (collect → GRPO step → GGUF → serve → collect), offline on the CPU.

Defining the command imports click only (``gym --help`` imports every command module); running it
imports the loop, and the model worker imports torch.
"""

from __future__ import annotations

from pathlib import Path

import click

__all__ = ["train"]

EXAMPLE_DIR = Path(__file__).resolve().parent / "examples"


@click.command()
@click.option(
    "--config",
    "config_paths",
    multiple=True,
    type=click.Path(exists=True, dir_okay=False),
    default=[str(EXAMPLE_DIR / "short_answers.yaml")],
    show_default="the example: short answers",
    help="gym config to serve in this process (repeatable): one local_llama instance (the policy), an agent "
    "that returns token ids (token_preserving) and its environment.",
)
@click.option(
    "--input",
    "input_path",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=EXAMPLE_DIR / "short_answers.jsonl",
    show_default="the example's tasks",
    help="Tasks, one JSON object per line (as for gym collect).",
)
@click.option(
    "--output",
    "output_dir",
    type=click.Path(file_okay=False, path_type=Path),
    required=True,
    help="A new directory: rollouts.jsonl, steps.jsonl, summary.json, reward.png, policy/policy-v<N>.gguf.",
)
@click.option(
    "--steps", type=click.IntRange(min=1), default=3, show_default=True, help="GRPO steps (one round of rollouts each)."
)
@click.option(
    "--repeats",
    type=click.IntRange(min=2),
    default=4,
    show_default=True,
    help="Rollouts per task and round: the group whose rewards GRPO compares.",
)
@click.option("--limit", type=click.IntRange(min=1), help="Only the first N tasks.")
@click.option(
    "--mode",
    type=click.Choice(["sync", "async"]),
    default="sync",
    show_default=True,
    help="sync: collect, then train, then serve the new policy, then collect again. async: collection goes on "
    "with the served policy while the trainer steps (bounded by --max-staleness).",
)
@click.option(
    "--max-staleness",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="async: how many policy versions a round's rollouts may lag the trainer; older ones are dropped.",
)
@click.option(
    "--temperature",
    type=click.FloatRange(min=0, min_open=True),
    default=1.0,
    show_default=True,
    help="Sampling temperature of every rollout.",
)
@click.option(
    "--max-output-tokens",
    type=click.IntRange(min=1),
    default=12,
    show_default=True,
    help="Most generated tokens per model call.",
)
@click.option(
    "--learning-rate",
    type=click.FloatRange(min=0, min_open=True),
    default=5e-5,
    show_default=True,
    help="AdamW learning rate.",
)
@click.option(
    "--micro-batch-size",
    type=click.IntRange(min=1),
    default=8,
    show_default=True,
    help="Rollouts per forward/backward pass (memory; the update is the same).",
)
@click.option(
    "--trainer-threads",
    type=click.IntRange(min=0),
    default=1,
    show_default=True,
    help="torch threads of the trainer (0: torch's default). One leaves a core to collection, and threads "
    "that wait for each other lose more than they gain on a busy machine.",
)
@click.option("--seed", type=int, default=0, show_default=True, help="The trainer's seed.")
@click.option(
    "--policy-model", help="The local_llama instance that serves the policy (default: the config's only one)."
)
@click.option(
    "--agent", help="Agent instance that runs every task (default: the row's agent_ref, else the only agent)."
)
@click.option(
    "--parallel", type=click.IntRange(min=1), default=8, show_default=True, help="Rollouts in flight at once."
)
@click.option("--set", "overrides", multiple=True, help="Config override, Hydra grammar (repeatable).")
@click.option(
    "--round-timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=900.0,
    show_default=True,
    help="Seconds a round of rollouts may take.",
)
@click.option(
    "--step-timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=900.0,
    show_default=True,
    help="Seconds a GRPO step (with writing its GGUF) may take; also bounds loading the model.",
)
@click.option(
    "--server-timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=180.0,
    show_default=True,
    help="Seconds a server (or the trainer's worker) may take to start.",
)
@click.option(
    "--backend",
    type=click.Choice(["process", "ray"]),
    default="process",
    show_default=True,
    help="Where the trainer's model worker runs: a process on this machine, or a Ray actor (on the cluster at "
    "--ray-address, else $RAY_ADDRESS, else a local Ray started for the run). With Ray, the worker writes "
    "each GGUF on its node: on several machines OUTPUT must be a path every node shares.",
)
@click.option("--ray-address", metavar="HOST:PORT", help="--backend ray: the Ray cluster to join.")
@click.option(
    "--trainer-resources",
    metavar="JSON",
    callback=lambda ctx, param, value: _json_object(param, value),
    help="--backend ray: Ray options of the worker's actor, e.g. '{\"num_gpus\": 1}' or "
    '\'{"resources": {"trainer": 1}}\' (num_cpus, num_gpus, memory, resources, accelerator_type).',
)
def train(
    config_paths,
    input_path,
    output_dir,
    steps,
    repeats,
    limit,
    mode,
    max_staleness,
    temperature,
    max_output_tokens,
    learning_rate,
    micro_batch_size,
    trainer_threads,
    seed,
    policy_model,
    agent,
    parallel,
    overrides,
    round_timeout,
    step_timeout,
    server_timeout,
    backend,
    ray_address,
    trainer_resources,
) -> None:
    """Train the served policy with GRPO on an environment, closing the loop offline.

    Each step: collect a round (every task REPEATS times, through the config's agent, on the policy
    local_llama serves), take one GRPO step on it (group-relative advantages over each task's
    rollouts, importance ratio against the rollouts' own log-probs), write the new weights to a
    GGUF and serve it. After the last step one more round measures the trained policy. Prints the
    reward before and after and the loop's throughput; writes everything under OUTPUT.

    \b
    Example (SmolLM2-135M learns to answer in fewer than 8 words; about 6 minutes on 2 busy CPU cores):
      gym train --output runs/sync --limit 4
      gym train --output runs/async --limit 4 --mode async
    """
    import importlib.util

    from gym_core.errors import GymError

    if backend != "ray" and (ray_address or trainer_resources):
        raise click.UsageError("--ray-address and --trainer-resources are for --backend ray")

    for module, package in (("torch", "torch"), ("transformers", "transformers"), ("gguf", "gguf")):
        if importlib.util.find_spec(module) is None:
            raise GymError(
                f"gym train needs {package}, which this Python ({_python()}) does not have: run it in "
                "gym-train's venv (see packages/gym-train/README.md, 'Dependencies and its venv')"
            )
    from gym_train.loop import TrainOptions, run_loop

    options = TrainOptions(
        config_paths=list(config_paths),
        input_path=input_path,
        output_dir=output_dir,
        overrides=list(overrides),
        steps=steps,
        repeats=repeats,
        mode=mode,
        max_staleness=max_staleness,
        limit=limit,
        temperature=temperature,
        max_output_tokens=max_output_tokens,
        learning_rate=learning_rate,
        micro_batch_size=micro_batch_size,
        trainer_threads=trainer_threads or None,
        seed=seed,
        policy_model=policy_model,
        agent=agent,
        parallel=parallel,
        round_timeout_s=round_timeout,
        step_timeout_s=step_timeout,
        server_timeout_s=server_timeout,
        backend=backend,
        ray_address=ray_address,
        trainer_resources=trainer_resources,
    )
    run_loop(options, log=lambda line: click.echo(line, err=True))


def _json_object(param: click.Parameter, value: str | None) -> dict | None:
    """A JSON object given on the command line, or a usage error saying what was wrong with it."""
    import json

    if value is None:
        return None
    try:
        parsed = json.loads(value)
    except ValueError as exc:
        raise click.BadParameter(f"not JSON: {exc}", param=param) from None
    if not isinstance(parsed, dict):
        raise click.BadParameter(f"a JSON object is wanted, not {type(parsed).__name__}", param=param)
    return parsed


def _python() -> str:
    import sys

    return sys.executable
