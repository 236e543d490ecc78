"""GRPO: advantages, the clipped loss, and optimizer steps on a tiny random Llama and on SmolLM2."""

from __future__ import annotations

import math
import statistics

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from gym_train.grpo import GRPOConfig, GRPOTrainer, RolloutSample, collate, group_advantages, grpo_loss
from gym_train.model import load_policy, token_log_probs


def _tiny_model(seed: int = 0) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    return LlamaForCausalLM(config).eval()


def _batch() -> list[RolloutSample]:
    """Two tasks, four rollouts each: completions that the reward favours and ones it does not."""
    samples = []
    for group, prompt in enumerate(([5, 6, 7], [9, 10])):
        for reward, completion in ((1.0, [20, 21, 22]), (1.0, [20, 21, 23, 24]), (0.0, [30, 31]), (0.0, [32, 33, 34])):
            samples.append(
                RolloutSample(prompt_token_ids=prompt, generation_token_ids=completion, reward=reward, group=group)
            )
    return samples


def _sequence_log_probs(model, samples) -> torch.Tensor:
    """Sum of the completion tokens' log-probs of each sample."""
    batch = collate(samples, pad_token_id=0)
    with torch.no_grad():
        log_probs = token_log_probs(model, batch.input_ids, batch.attention_mask)
    return (log_probs * batch.completion_mask).sum(dim=1)


def _with_old_log_probs(model, samples) -> list[RolloutSample]:
    """The samples with the log-probs the (sampling) policy gave their tokens, as a rollout carries."""
    batch = collate(samples, pad_token_id=0)
    with torch.no_grad():
        log_probs = token_log_probs(model, batch.input_ids, batch.attention_mask)
    out = []
    for row, sample in enumerate(samples):
        start = len(sample.prompt_token_ids) - 1
        old = log_probs[row, start : start + len(sample.generation_token_ids)].tolist()
        out.append(
            RolloutSample(
                prompt_token_ids=sample.prompt_token_ids,
                generation_token_ids=sample.generation_token_ids,
                reward=sample.reward,
                group=sample.group,
                generation_log_probs=old,
            )
        )
    return out


def test_a_constant_reward_group_has_zero_advantages():
    advantages = group_advantages([0.5, 0.5, 0.5, 1.0, 0.0], ["a", "a", "a", "b", "b"])
    assert advantages[:3].tolist() == [0.0, 0.0, 0.0]
    assert advantages[3] == pytest.approx(1.0, abs=1e-4) and advantages[4] == pytest.approx(-1.0, abs=1e-4)


def test_advantages_are_standardised_within_each_group_only():
    rewards = [1.0, 10.0, 2.0, 10.0, 3.0, 40.0]
    groups = [0, 1, 0, 1, 0, 1]  # interleaved: grouping is by label, not by position
    advantages = group_advantages(rewards, groups)
    # Group 0: rewards 1, 2, 3 (mean 2, population std sqrt(2/3)).
    assert advantages[[0, 2, 4]].tolist() == pytest.approx([-1 / math.sqrt(2 / 3), 0.0, 1 / math.sqrt(2 / 3)], abs=1e-4)
    mean, std = 20.0, statistics.pstdev([10.0, 10.0, 40.0])
    assert advantages[[1, 3, 5]].tolist() == pytest.approx(
        [(10 - mean) / std, (10 - mean) / std, (40 - mean) / std], abs=1e-4
    )
    assert float(advantages[[1, 3, 5]].sum()) == pytest.approx(0.0, abs=1e-5)
    assert group_advantages([3.0], ["alone"]).tolist() == [0.0]
    with pytest.raises(ValueError, match="group labels"):
        group_advantages([1.0, 2.0], [0])
    with pytest.raises(ValueError, match="finite"):
        group_advantages([float("nan"), 1.0], [0, 0])


def test_the_loss_clips_the_ratio_and_masks_prompt_tokens():
    mask = torch.tensor([[0.0, 1.0, 1.0]])
    old = torch.tensor([[-5.0, -1.0, -1.0]])
    # Token 1's ratio is e^0.5 > 1.2: for a positive advantage its term is clipped (no gradient);
    # token 0 is a prompt position with a wild log-prob that the mask must ignore.
    new = torch.tensor([[3.0, -0.5, -1.0]], requires_grad=True)
    loss, parts = grpo_loss(new, old, torch.tensor([2.0]), mask)
    assert loss.item() == pytest.approx(-(2.0 * 1.2 + 2.0 * 1.0) / 2)
    loss.backward()
    assert new.grad[0, 0] == 0 and new.grad[0, 1] == 0 and new.grad[0, 2] == pytest.approx(-1.0)
    assert parts["clipped"].item() == 1.0
    # A negative advantage is not clipped above: lowering a bad token's probability stays rewarded.
    loss, _ = grpo_loss(new.detach(), old, torch.tensor([-2.0]), mask)
    assert loss.item() == pytest.approx((2.0 * math.exp(0.5) + 2.0) / 2)


def test_the_kl_term_is_k3_and_needs_a_reference():
    mask = torch.ones(1, 2)
    new = torch.tensor([[-1.0, -2.0]])
    _, same = grpo_loss(new, new, torch.tensor([0.0]), mask, ref_log_probs=new, kl_coef=0.1)
    assert same["kl"].item() == 0.0
    ref = torch.tensor([[-1.5, -1.0]])
    loss, parts = grpo_loss(new, new, torch.tensor([0.0]), mask, ref_log_probs=ref, kl_coef=0.1)
    delta = ref - new
    expected = (torch.exp(delta) - delta - 1).sum()
    assert parts["kl"].item() == pytest.approx(expected.item()) and loss.item() == pytest.approx(
        0.1 * expected.item() / 2
    )
    with pytest.raises(ValueError, match="reference"):
        grpo_loss(new, new, torch.tensor([0.0]), mask, kl_coef=0.1)
    with pytest.raises(ValueError, match="reference"):
        GRPOTrainer(_tiny_model(), GRPOConfig(kl_coef=0.1))


def test_collate_lines_up_completions_and_rejects_what_a_rollout_lacks():
    batch = collate(
        [
            RolloutSample(
                prompt_token_ids=[1, 2, 3], generation_token_ids=[4, 5], reward=1.0, generation_log_probs=[-0.1, -0.2]
            ),
            RolloutSample(prompt_token_ids=[1], generation_token_ids=[6], reward=0.0),
        ],
        pad_token_id=0,
    )
    assert batch.input_ids.tolist() == [[1, 2, 3, 4, 5], [1, 6, 0, 0, 0]]
    # Position t predicts token t + 1: the completion of row 0 is predicted at positions 2 and 3.
    assert batch.completion_mask.tolist() == [[0, 0, 1, 1], [1, 0, 0, 0]]
    assert batch.old_log_probs[0, 2:4].tolist() == pytest.approx([-0.1, -0.2])
    assert torch.isnan(batch.old_log_probs[1, 0])  # no rollout log-probs: on-policy
    with pytest.raises(ValueError, match="token-faithful"):
        collate([RolloutSample(prompt_token_ids=[1], generation_token_ids=[], reward=1.0)], pad_token_id=0)
    with pytest.raises(ValueError, match="1 log-probs for 2"):
        collate(
            [RolloutSample(prompt_token_ids=[1], generation_token_ids=[2, 3], reward=1.0, generation_log_probs=[-1.0])],
            pad_token_id=0,
        )


def test_one_step_lowers_the_loss_and_favours_positive_advantages():
    model = _tiny_model()
    samples = _with_old_log_probs(model, _batch())
    trainer = GRPOTrainer(model, GRPOConfig(learning_rate=1e-2, micro_batch_size=3))
    before = _sequence_log_probs(model, samples)
    loss_before = trainer.loss(samples)
    stats = trainer.train_step(samples)
    after = _sequence_log_probs(model, samples)
    assert stats.step == trainer.version == 1 and stats.num_rollouts == 8 and stats.num_tokens == 24
    assert stats.loss == pytest.approx(loss_before, abs=1e-5)
    assert stats.mean_ratio == pytest.approx(1.0, abs=1e-5) and stats.grad_norm > 0
    assert trainer.loss(samples) < loss_before
    gain = after - before
    positive = torch.tensor([s.reward > 0 for s in samples])
    assert gain[positive].mean() > gain[~positive].mean()
    assert gain[positive].min() > gain[~positive].max()


def test_a_step_is_deterministic_and_micro_batching_does_not_change_it():
    def run(micro_batch_size: int) -> list[torch.Tensor]:
        model = _tiny_model(seed=3)
        trainer = GRPOTrainer(model, GRPOConfig(learning_rate=1e-3, seed=11, micro_batch_size=micro_batch_size))
        samples = _with_old_log_probs(model, _batch())
        for _ in range(2):
            trainer.train_step(samples)
        return [p.detach().clone() for p in model.parameters()]

    first, second, whole = run(2), run(2), run(8)
    assert all(torch.equal(a, b) for a, b in zip(first, second))
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(first, whole))
    untouched = _tiny_model(seed=3)
    assert not all(torch.equal(a, b) for a, b in zip(first, untouched.parameters()))


def test_the_kl_to_the_reference_grows_once_the_policy_moves():
    model, reference = _tiny_model(seed=5), _tiny_model(seed=5)
    trainer = GRPOTrainer(model, GRPOConfig(learning_rate=1e-2, kl_coef=0.05), reference=reference)
    samples = _batch()
    assert trainer.train_step(samples).kl == 0.0  # policy == reference before the first update
    assert trainer.train_step(samples).kl > 0.0
    assert not any(p.requires_grad for p in reference.parameters())


def test_a_batch_without_signal_is_refused_only_when_it_has_no_tokens():
    trainer = GRPOTrainer(_tiny_model())
    samples = [RolloutSample(prompt_token_ids=[1, 2], generation_token_ids=[3], reward=1.0, group=0)] * 2
    stats = trainer.train_step(samples)  # equal rewards: zero advantages, a step that changes nothing
    assert stats.loss == 0.0 and stats.grad_norm == 0.0
    with pytest.raises(ValueError, match="at least one rollout"):
        trainer.train_step([])


def test_one_step_on_smollm2_favours_the_rewarded_completion():
    policy = load_policy()
    prompt = policy.encode_chat([{"role": "user", "content": "What is 2+2? Answer with a number."}])
    answers = {
        "4<|im_end|>": 1.0,
        "The answer is 4.<|im_end|>": 1.0,
        "5<|im_end|>": 0.0,
        "I don't know.<|im_end|>": 0.0,
    }
    samples = _with_old_log_probs(
        policy.model,
        [
            RolloutSample(prompt_token_ids=prompt, generation_token_ids=policy.encode(text), reward=reward, group="q")
            for text, reward in answers.items()
        ],
    )
    trainer = GRPOTrainer(policy.model, GRPOConfig(learning_rate=1e-5), pad_token_id=policy.pad_token_id)
    before = torch.tensor([sum(s.generation_log_probs) for s in samples])
    stats = trainer.train_step(samples)
    assert trainer.loss(samples) < stats.loss
    gain = _sequence_log_probs(policy.model, samples) - before
    assert gain[:2].min() > gain[2:].max()
