"""TRL 1.16 trains on gym's environments (``gym_train.trl``), for real, on the CPU.

The policy is SmolLM2-135M-Instruct as gym-train loads it (float32, from the GGUF local_llama
serves); the environments are gym's own servers, served in threads of the test's process. Each
GRPO test runs TRL's ``GRPOTrainer`` for 3 steps (2 prompts x 4 generations a step) and checks what
TRL logged against what gym's servers returned: per step, TRL's mean reward and the per-environment
metrics equal the verdicts written to the rollouts file, and those verdicts are gym's (the
completions verified again, or the rollouts re-verified by ``gym reverify``'s machinery, give the
same rewards); the loss is finite and the weights changed.

One torch thread: on a busy 2-core machine torch's threads wait for each other (a generation of 16
tokens took 20-32 s with two threads, 2 s with one).
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import torch

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # rollout_func is "experimental" in TRL 1.16

from trl import GRPOConfig, GRPOTrainer  # noqa: E402

import gym_train  # noqa: E402
from gym_train.model import load_policy, token_log_probs  # noqa: E402
from gym_train.trl import (  # noqa: E402
    AgentRollouts,
    DatasetError,
    GymServers,
    MixtureSource,
    TaskMixture,
    VerificationFailed,
    VerifyReward,
    prompt_row,
    read_prompt_rows,
    to_dataset,
)
from gym_train.trl.rewards import verify_text  # noqa: E402

pytestmark = pytest.mark.timeout(900)

REPO = Path(__file__).resolve().parents[3]
EXAMPLES = Path(gym_train.__file__).parent / "examples"
FIXTURES = Path(__file__).parent / "fixtures"
MATH_TASKS = REPO / "plugins" / "resources" / "math" / "data" / "example.jsonl"
IF_TASKS = REPO / "plugins" / "resources" / "instruction_following" / "data" / "example.jsonl"
COUNTER_TASKS = EXAMPLES / "trl_counter.jsonl"


@pytest.fixture
def policy():
    torch.set_num_threads(1)
    torch.manual_seed(0)
    return load_policy()


def grpo_config(tmp_path: Path, **overrides: Any) -> GRPOConfig:
    settings: dict[str, Any] = dict(
        output_dir=str(tmp_path / "trl"),
        per_device_train_batch_size=8,
        num_generations=4,
        max_completion_length=24,
        max_steps=3,
        logging_steps=1,
        learning_rate=2e-5,
        bf16=False,
        use_cpu=True,
        report_to=[],
        save_strategy="no",
        seed=0,
        disable_tqdm=True,
    )
    settings.update(overrides)
    return GRPOConfig(**settings)


def snapshot(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in model.named_parameters()}


def weight_change(before: dict[str, torch.Tensor], model: torch.nn.Module) -> float:
    """The largest absolute change of any weight; finite weights asserted on the way."""
    largest = 0.0
    for name, p in model.named_parameters():
        assert torch.isfinite(p).all(), f"{name} has non-finite weights"
        largest = max(largest, float((p.detach() - before[name]).abs().max()))
    return largest


def read_rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def train_steps(trainer: GRPOTrainer) -> list[dict[str, Any]]:
    return [h for h in trainer.state.log_history if "loss" in h and "train_loss" not in h]


def check_logs_match_rollouts(steps: list[dict[str, Any]], rows: list[dict[str, Any]], per_step: int) -> None:
    """TRL's logged rewards, per step, are the mean of gym's verdicts for that step's samples, and
    each environment's reward and pass rate are the verdicts' of its samples."""
    for step, logged in enumerate(steps, 1):
        mine = [r for r in rows if r["train_step"] == step]
        assert len(mine) == per_step, f"step {step}: {len(mine)} rollouts recorded"
        rewards = [r["reward"] for r in mine]
        assert logged["reward"] == pytest.approx(sum(rewards) / len(rewards), abs=1e-6), step
        assert logged["rewards/gym/mean"] == pytest.approx(sum(rewards) / len(rewards), abs=1e-6), step
        for environment in {r["environment"] for r in mine}:
            theirs = [r["reward"] for r in mine if r["environment"] == environment]
            assert logged[f"gym/{environment}/reward"] == pytest.approx(sum(theirs) / len(theirs), abs=1e-6)
            assert logged[f"gym/{environment}/pass_rate"] == pytest.approx(
                sum(x >= 1 for x in theirs) / len(theirs), abs=1e-6
            )
        assert logged["gym/failed"] == 0


def test_grpo_on_math_trains_on_the_environments_rewards(policy, tmp_path):
    """Single-turn: TRL generates, math's /verify scores; 3 steps."""
    with GymServers.serve(EXAMPLES / "trl_math.yaml") as servers:
        dataset = to_dataset(read_prompt_rows(MATH_TASKS))
        reward = VerifyReward(servers, dataset, rollouts_path=tmp_path / "rollouts.jsonl")
        trainer = GRPOTrainer(
            model=policy.model,
            processing_class=policy.tokenizer,
            reward_funcs=reward,
            args=grpo_config(tmp_path),
            train_dataset=dataset,
        )
        before = snapshot(policy.model)
        trainer.train()
        steps = train_steps(trainer)
        rows = read_rows(tmp_path / "rollouts.jsonl")
        assert len(steps) == 3 and all(math.isfinite(s["loss"]) for s in steps), steps
        check_logs_match_rollouts(steps, rows, per_step=8)
        assert {r["environment"] for r in rows} == {"math"} and all(r["resources_server"] == "math" for r in rows)

        # The rewards are the environment's: each recorded completion verified again scores the same.
        async def again() -> list[float]:
            deadline = time.monotonic() + 120
            return [
                float(
                    (await verify_text(servers, "math", json.loads(json.dumps(_task(r))), r["response"], deadline))[
                        "reward"
                    ]
                )
                for r in rows
            ]

        assert servers.call(again(), 150) == [r["reward"] for r in rows]
    assert any(s["frac_reward_zero_std"] < 1 for s in steps), "no group had different rewards: nothing to learn"
    assert weight_change(before, policy.model) > 0


def _task(row: dict[str, Any]) -> dict[str, Any]:
    """The task fields of a rollouts-file row (what was sent to /seed_session and /verify)."""
    from gym_cli.reverify import task_fields

    return {k: v for k, v in task_fields(row).items() if k != "train_step"}


def test_policy_server_rollouts_are_token_faithful_and_on_policy(policy):
    """Multi-turn rollouts through token_preserving on the trainer's own model: each turn's prompt
    extends the last, the mask covers exactly the generated tokens, and the log-probs are the
    model's own (teacher forcing on the same weights)."""
    with GymServers.serve(EXAMPLES / "trl_counter.yaml", policy_model="policy_model") as servers:
        rows = read_prompt_rows(COUNTER_TASKS)
        rollouts = AgentRollouts(servers, rows)
        trainer = _FakeTrainer(policy)
        prompts = [r["prompt"] for r in rows[:3] for _ in range(4)]
        out = rollouts(prompts, trainer)
        assert servers.policy.stats.batches >= 1

        # The environment gone: masked rollouts (reward None, nothing to train on), or the round fails.
        servers.served.stop_instance("counter")
        masked = AgentRollouts(servers, rows, deadline_s=5, retries=1, on_failure="mask", validate=False)
        lost = masked(prompts[:2], trainer)
        assert lost["gym_reward"] == [None, None] and lost["env_mask"] == [[0], [0]]
        assert lost["completion_ids"] == [[policy.tokenizer.eos_token_id]] * 2
        assert all(len(ids) > 0 for ids in lost["prompt_ids"])
        with pytest.raises(VerificationFailed, match="2 of 2 samples could not be rolled out"):
            AgentRollouts(servers, rows, deadline_s=5, retries=1, validate=False)(prompts[:2], trainer)
    assert (
        [len(x) for x in out["completion_ids"]]
        == [len(x) for x in out["env_mask"]]
        == [len(x) for x in out["logprobs"]]
    )
    assert out["gym_reward"] == [float(r["result"]["reward"]) for r in rollouts.last]
    assert set(out["gym_environment"]) == {"counter"}
    multi_turn = 0
    for index, (prompt_ids, completion, mask, log_probs) in enumerate(
        zip(out["prompt_ids"], out["completion_ids"], out["env_mask"], out["logprobs"])
    ):
        result = rollouts.last[index]["result"]
        carriers = [i for i in result["response"]["output"] if i.get("generation_token_ids") is not None]
        last = carriers[-1]
        assert prompt_ids + completion == last["prompt_token_ids"] + last["generation_token_ids"]
        assert sum(mask) == sum(len(c["generation_token_ids"]) for c in carriers)
        if len(carriers) > 1:
            multi_turn += 1
            masked = policy.tokenizer.decode([t for t, m in zip(completion, mask) if m == 0])
            assert "<tool_response>" in masked, masked  # the tool's output, which the model did not generate
        ids = torch.tensor([prompt_ids + completion])
        with torch.no_grad():
            forced = token_log_probs(policy.model, ids, torch.ones_like(ids))[0, len(prompt_ids) - 1 :]
        generated = [i for i, m in enumerate(mask) if m]
        difference = max(abs(float(forced[i]) - log_probs[i]) for i in generated)
        assert difference < 1e-3, f"rollout {index}: log-probs differ from the model's by {difference}"
    assert multi_turn >= 1, "no rollout called a tool: nothing multi-turn was checked"


class _FakeTrainer:
    """What AgentRollouts reads of a GRPOTrainer, without one (the token checks need no training)."""

    def __init__(self, policy: Any):
        from types import SimpleNamespace

        self.model = policy.model
        self.processing_class = policy.tokenizer
        self.args = SimpleNamespace(temperature=1.0, top_p=1.0, max_completion_length=40, seed=0)
        self.state = SimpleNamespace(global_step=0)


def test_grpo_multi_turn_with_tools_through_a_gym_agent(policy, tmp_path):
    """Multi-turn: each prompt runs through token_preserving on counter (tools), on the policy being
    trained; 3 steps; the rewards in TRL's logs are the agents' verdicts, which gym reverify's
    machinery reproduces by replaying the recorded tool calls."""
    from gym_cli.reverify import ReverifyOptions, ReverifySummary, read_rollout_rows, reverify_rollouts

    # Two model calls at most (a tool call, then the answer), to keep the test's time down.
    with GymServers.serve(
        EXAMPLES / "trl_counter.yaml", ["counter_agent.max_steps=2"], policy_model="policy_model"
    ) as servers:
        dataset = to_dataset(read_prompt_rows(COUNTER_TASKS))
        rollouts = AgentRollouts(servers, dataset, rollouts_path=tmp_path / "rollouts.jsonl")
        trainer = GRPOTrainer(
            model=policy.model,
            processing_class=policy.tokenizer,
            reward_funcs=rollouts.reward,
            rollout_func=rollouts,
            args=grpo_config(tmp_path, max_completion_length=32),
            train_dataset=dataset,
        )
        before = snapshot(policy.model)
        trainer.train()
        steps = train_steps(trainer)
        rows = read_rows(tmp_path / "rollouts.jsonl")
        assert len(steps) == 3 and all(math.isfinite(s["loss"]) for s in steps), steps
        check_logs_match_rollouts(steps, rows, per_step=8)
        assert all(r["agent"] == "counter_agent" and r["token_drift"] == 0 for r in rows)
        assert any(r["num_tool_calls"] > 0 for r in rows), "no rollout called a tool"

        options = ReverifyOptions(output=tmp_path / "reverified.jsonl", failures=tmp_path / "reverify.failures.jsonl")
        summary = ReverifySummary()
        servers.call(
            reverify_rollouts(
                servers.client,
                read_rollout_rows(tmp_path / "rollouts.jsonl"),
                {line: "counter" for line in range(1, len(rows) + 1)},
                options,
                summary,
            ),
            300,
        )
        assert (summary.reverified, summary.failed, summary.up, summary.down) == (len(rows), 0, 0, 0)
    assert any(s["frac_reward_zero_std"] < 1 for s in steps), "no group had different rewards: nothing to learn"
    assert weight_change(before, policy.model) > 0


def test_a_mixture_of_environments_logs_each_environment_per_step(policy, tmp_path):
    """50 % math, 30 % instruction_following, 20 % counter: the draw is deterministic under a seed,
    each environment's reward and pass rate are in TRL's logs per step and in gym profile."""
    from gym_cli.reward_profile import build_profile

    sources = [
        MixtureSource("math", MATH_TASKS, 0.5, agent="math_agent"),
        MixtureSource("instruction_following", IF_TASKS, 0.3, agent="instruction_following_agent"),
        MixtureSource("counter", COUNTER_TASKS, 0.2, agent="counter_agent"),
    ]
    mixture = TaskMixture(sources, seed=3)
    assert mixture.counts(10) == {"math": 5, "instruction_following": 3, "counter": 2}
    assert mixture.counts(7) == {"math": 4, "instruction_following": 2, "counter": 1}
    rows = mixture.rows(20)
    assert rows == TaskMixture(sources, seed=3).rows(20)
    assert [r["gym_task"] for r in rows] != [r["gym_task"] for r in TaskMixture(sources, seed=4).rows(20)]
    assert sorted(r["gym_source"] for r in rows) == sorted(
        ["math"] * 10 + ["instruction_following"] * 6 + ["counter"] * 4
    )
    assert {json.loads(r["gym_task"])["agent_ref"]["name"] for r in rows if r["gym_source"] == "counter"} == {
        "counter_agent"
    }

    dataset = to_dataset(rows)
    with GymServers.serve(EXAMPLES / "trl_mixture.yaml", policy_model="policy_model") as servers:
        rollouts = AgentRollouts(servers, dataset, rollouts_path=tmp_path / "rollouts.jsonl")
        trainer = GRPOTrainer(
            model=policy.model,
            processing_class=policy.tokenizer,
            reward_funcs=rollouts.reward,
            rollout_func=rollouts,
            train_dataset=dataset,
            args=grpo_config(tmp_path, max_steps=2, per_device_train_batch_size=12, max_completion_length=32),
        )
        trainer.train()
    steps = train_steps(trainer)
    recorded = read_rows(tmp_path / "rollouts.jsonl")
    assert len(steps) == 2
    check_logs_match_rollouts(steps, recorded, per_step=12)
    assert len({r["environment"] for r in recorded}) >= 2
    profile = build_profile(recorded, ks=[1])
    for environment in {r["environment"] for r in recorded}:
        theirs = [r["reward"] for r in recorded if r["environment"] == environment]
        assert profile["environments"][environment]["fields"]["reward"]["mean"] == pytest.approx(
            sum(theirs) / len(theirs)
        )


def test_the_validation_pass_names_the_row_and_field(tmp_path):
    """Rows an environment would reject stop the run before training, each named."""
    tasks = [json.loads(line) for line in MATH_TASKS.read_text().splitlines()[:3]]
    bad = dict(tasks[1])
    del bad["expected_answer"]
    rows = [
        prompt_row(tasks[0]),
        prompt_row(bad),
        {"prompt": [{"role": "user", "content": "hi"}], "gym_task": "{not json"},
        prompt_row(tasks[2]),
    ]
    with GymServers.serve(EXAMPLES / "trl_math.yaml") as servers:
        with pytest.raises(DatasetError) as caught:
            VerifyReward(servers, rows)
        message = str(caught.value)
        assert "row 1: math (math) rejects it at /verify" in message and "expected_answer" in message, message
        assert "row 2: gym_task is not JSON" in message, message
        assert "row 0" not in message and "row 3" not in message, message
        VerifyReward(servers, [rows[0], rows[3]])  # the good rows pass
    # Rollout mode: two rows with one prompt must be one task (TRL gives rollout_func the prompts only).
    counter = [json.loads(line) for line in COUNTER_TASKS.read_text().splitlines()[:1]]
    twin = {**counter[0], "initial_count": 40, "expected_count": 42}
    with GymServers.serve(EXAMPLES / "trl_counter.yaml", policy_model="policy_model") as servers:
        with pytest.raises(DatasetError, match="row 1: same prompt as row 0 but another task"):
            AgentRollouts(servers, [prompt_row(counter[0]), prompt_row(twin)])


def test_export_prompts_rows_train_as_they_are():
    """`gym export prompts` output (its agent and environment columns) is read and verified as is."""
    rows = read_prompt_rows(FIXTURES / "export_prompts.jsonl")
    assert rows and all({"prompt", "gym_task"} <= set(r) for r in rows)
    with GymServers.serve(EXAMPLES / "trl_counter.yaml", instances=["counter"]) as servers:
        reward = VerifyReward(servers, rows)
        assert reward(
            ["x"] * len(rows),
            ["nothing"] * len(rows),
            gym_task=[r["gym_task"] for r in rows],
            agent=[r.get("agent") for r in rows],
            environment=[r.get("environment") for r in rows],
        ) == [
            float(json.loads(r["gym_task"])["initial_count"] == json.loads(r["gym_task"])["expected_count"])
            for r in rows
        ]


def test_a_server_that_dies_is_retried_then_fails_the_step_never_scored_zero(policy, tmp_path):
    """Server failures are retried within the deadline; past it the step fails with the reason (or,
    with on_failure='mask', the samples are left unscored): no reward of 0 is made up."""
    tasks = [json.loads(line) for line in MATH_TASKS.read_text().splitlines()[:4]]
    rows = [prompt_row(t) for t in tasks]
    answers = [t["conformance"]["response"] for t in tasks]
    expected = [t["conformance"]["reward"] for t in tasks]
    with GymServers.serve(EXAMPLES / "trl_math.yaml") as servers:
        reward = VerifyReward(servers, rows, deadline_s=10, retries=2, retry_backoff_s=0.5)
        batch = dict(gym_task=[r["gym_task"] for r in rows])
        assert reward([r["prompt"] for r in rows], answers, **batch) == expected

        # Down for a moment: the retries see it come back (room for a slow restart on a busy machine).
        patient = VerifyReward(servers, rows, deadline_s=120, retries=15, retry_backoff_s=0.5, validate=False)
        served = servers.served
        served.stop_instance("math")
        restart = threading.Timer(1.0, lambda: served.start_instance("math"))
        restart.start()
        assert patient([r["prompt"] for r in rows], answers, **batch) == expected
        restart.join()
        assert patient.retried >= 1

        # Down for good: the batch fails naming the environment and the reason; masked, nothing is scored.
        served.stop_instance("math")
        with pytest.raises(VerificationFailed) as caught:
            reward([r["prompt"] for r in rows], answers, **batch)
        assert "4 of 4 samples could not be verified" in str(caught.value)
        assert "math on math): ServerUnavailableError" in str(caught.value), str(caught.value)
        masked = VerifyReward(servers, rows, deadline_s=5, retries=1, on_failure="mask", validate=False)
        logged: dict[str, float] = {}
        assert masked([r["prompt"] for r in rows], answers, log_metric=logged.__setitem__, **batch) == [None] * 4
        assert logged["gym/failed"] == 4 and not any(k.endswith("/reward") for k in logged)
        served.start_instance("math")

        # In training: the server dies after step 1; step 2 fails with the reason, nothing trained on it.
        from transformers import TrainerCallback

        class KillAfterFirstStep(TrainerCallback):
            def on_step_end(self, args, state, control, **kwargs):
                if state.global_step == 1 and "math" in served.threads:
                    served.stop_instance("math")

        dataset = to_dataset(read_prompt_rows(MATH_TASKS))
        trainer = GRPOTrainer(
            model=policy.model,
            processing_class=policy.tokenizer,
            reward_funcs=VerifyReward(servers, dataset, deadline_s=10, retries=2),
            args=grpo_config(tmp_path, max_steps=2),
            train_dataset=dataset,
            callbacks=[KillAfterFirstStep()],
        )
        with pytest.raises(VerificationFailed, match="ServerUnavailableError"):
            trainer.train()
        assert trainer.state.global_step == 1


def test_the_local_llama_chat_template_renders_as_local_llama_does(policy):
    """Every conversation of the SFT and DPO exports, tool calls, tool outputs and tools included,
    renders through LOCAL_LLAMA_CHAT_TEMPLATE exactly as local_llama prompts the model."""
    from gym_local_llama.chat_template import DEFAULT_SYSTEM_PROMPT, render_prompt
    from gym_train.trl.chat_template import DEFAULT_SYSTEM_PROMPT as OURS
    from gym_train.trl.chat_template import LOCAL_LLAMA_CHAT_TEMPLATE

    assert OURS == DEFAULT_SYSTEM_PROMPT
    tokenizer = policy.tokenizer
    tokenizer.chat_template = LOCAL_LLAMA_CHAT_TEMPLATE
    conversations = []
    for row in read_rows(FIXTURES / "export_sft.jsonl"):
        conversations.append((row["messages"], json.loads(row["tools"]) if row.get("tools") else None))
    for row in read_rows(FIXTURES / "export_dpo.jsonl"):
        tools = json.loads(row["tools"]) if row.get("tools") else None
        conversations += [(row["prompt"] + row["chosen"], tools), (row["prompt"] + row["rejected"], tools)]
    conversations.append(
        (
            [  # no system message, content parts, two calls, a run of two tool results
                {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
                {
                    "role": "assistant",
                    "content": "x",
                    "tool_calls": [
                        {"type": "function", "function": {"name": "f", "arguments": {"q": 1}}},
                        {"function": {"name": "g", "arguments": None}},
                    ],
                },
                {"role": "tool", "content": "1"},
                {"role": "tool", "content": "2"},
                {"role": "user", "content": "ok"},
            ],
            None,
        )
    )
    assert any(tools for _, tools in conversations)
    assert any(m.get("tool_calls") for messages, _ in conversations for m in messages)
    for messages, tools in conversations:
        rendered = tokenizer.apply_chat_template(messages, tools=tools, tokenize=False, add_generation_prompt=True)
        assert rendered == render_prompt(messages, tools)


def test_sft_and_dpo_take_a_step_on_gym_export_output(policy, tmp_path):
    """`gym export sft` and `gym export dpo` files (the fixtures the export's tests keep current) load
    with datasets and train one real step of TRL's SFTTrainer and DPOTrainer, rendered in
    local_llama's format (the tool calls are in what SFT trains on)."""
    from datasets import load_dataset
    from trl import DPOConfig, DPOTrainer, SFTConfig, SFTTrainer

    from gym_train.trl.chat_template import LOCAL_LLAMA_CHAT_TEMPLATE

    policy.tokenizer.chat_template = LOCAL_LLAMA_CHAT_TEMPLATE
    common = dict(
        max_steps=1,
        bf16=False,
        use_cpu=True,
        report_to=[],
        save_strategy="no",
        logging_steps=1,
        max_length=512,
        disable_tqdm=True,
    )
    before = snapshot(policy.model)
    sft = load_dataset("json", data_files=str(FIXTURES / "export_sft.jsonl"), split="train")
    assert {"messages", "tools"} <= set(sft.column_names)
    trainer = SFTTrainer(
        model=policy.model,
        processing_class=policy.tokenizer,
        train_dataset=sft,
        args=SFTConfig(output_dir=str(tmp_path / "sft"), per_device_train_batch_size=4, **common),
    )
    trained_on = [policy.tokenizer.decode(row["input_ids"]) for row in trainer.train_dataset]
    assert any('<tool_call>{"name": "increment_counter"' in text for text in trained_on)
    assert any("# Tools" in text and "<tool_response>" in text for text in trained_on)
    trainer.train()
    assert trainer.state.global_step == 1 and math.isfinite(trainer.state.log_history[0]["loss"])
    assert weight_change(before, policy.model) > 0

    before = snapshot(policy.model)
    dpo = load_dataset("json", data_files=str(FIXTURES / "export_dpo.jsonl"), split="train")
    assert {"prompt", "chosen", "rejected"} <= set(dpo.column_names)
    trainer = DPOTrainer(
        model=policy.model,
        processing_class=policy.tokenizer,
        train_dataset=dpo,
        args=DPOConfig(output_dir=str(tmp_path / "dpo"), per_device_train_batch_size=2, **common),
    )
    trainer.train()
    logged = trainer.state.log_history[0]
    assert trainer.state.global_step == 1 and math.isfinite(logged["loss"])
    assert "rewards/margins" in logged and weight_change(before, policy.model) > 0


def test_the_policy_engine_refuses_what_it_cannot_decode_by_name():
    """local_llama's server hands its engine a grammar (JSON schema, a required tool call) and
    top_logprobs; the trainer's engine samples the policy freely, so it refuses both with a
    ValueError (the server's 400 naming them) rather than a TypeError (a 500) or ignoring them."""
    import asyncio

    from gym_train.trl.policy_server import PolicyEngine

    engine = PolicyEngine()
    messages = [{"role": "user", "content": "hi"}]
    with pytest.raises(ValueError, match="does not constrain decoding"):
        asyncio.run(engine.agenerate(messages, grammar=object()))
    with pytest.raises(ValueError, match="top_logprobs"):
        asyncio.run(engine.agenerate(messages, top_logprobs=2))
