"""GRPO on CPU: group-relative advantages, the clipped policy-gradient loss, one optimizer step.

A *group* is the rollouts of one task (``repeats`` in ``gym collect``). Each rollout's advantage is
its reward standardised within its group, ``(r - mean) / (std + eps)`` (population std), so a group
whose rollouts all got the same reward teaches nothing (advantages 0).

The loss over the completion tokens ``t`` of every rollout ``i`` (prompt tokens are masked out)::

    ratio  = exp(logp_new[i, t] - logp_old[i, t])          # old: the rollout's own log-probs
    pg     = max(-A_i * ratio, -A_i * clip(ratio, 1 - clip_low, 1 + clip_high))
    kl     = exp(logp_ref - logp_new) - (logp_ref - logp_new) - 1     # k3 estimator, >= 0
    loss   = sum_{i,t} (pg + kl_coef * kl) / (number of completion tokens in the batch)

Token-level averaging over the whole batch weighs every token alike (a long completion is not
diluted to the weight of a short one). ``logp_old`` comes from the rollout (``generation_log_probs``
of a token-faithful agent, computed by the inference engine); where a rollout has none, the current
policy's own log-probs stand in (ratio 1: plain on-policy policy gradient).

:class:`GRPOTrainer` holds the policy, an optional frozen reference and an AdamW optimizer; its
:meth:`~GRPOTrainer.train_step` is what a model worker's ``train_step`` request runs. The batch is
processed in micro-batches whose gradients add up to the full batch's (same normaliser), so memory is
bounded without changing the update.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import msgspec
import torch

from gym_train.model import pad_sequences, token_log_probs

__all__ = [
    "GRPOBatch",
    "GRPOConfig",
    "GRPOTrainer",
    "RolloutSample",
    "StepStats",
    "collate",
    "grpo_loss",
    "group_advantages",
]


class RolloutSample(msgspec.Struct, kw_only=True):
    """One scored rollout as the trainer needs it (the fields of a token-faithful rollout).

    ``group``: the task it answered (rollouts of one task are compared with each other);
    ``generation_log_probs``: the sampling policy's log-prob of each generated token (``None``: use
    the current policy's, i.e. on-policy)."""

    prompt_token_ids: list[int]
    generation_token_ids: list[int]
    reward: float
    group: str | int = 0
    generation_log_probs: list[float] | None = None


class GRPOConfig(msgspec.Struct, kw_only=True, frozen=True):
    """Hyper-parameters of :class:`GRPOTrainer`."""

    learning_rate: float = 1e-5
    clip_low: float = 0.2
    clip_high: float = 0.2
    kl_coef: float = 0.0  # > 0 needs a reference model
    weight_decay: float = 0.0
    max_grad_norm: float | None = 1.0
    advantage_eps: float = 1e-6
    micro_batch_size: int = 4
    seed: int = 0

    def __post_init__(self) -> None:
        if not self.learning_rate > 0:
            raise ValueError(f"learning_rate must be > 0, got {self.learning_rate}")
        if self.clip_low < 0 or self.clip_high < 0 or self.clip_low >= 1:
            raise ValueError(f"need 0 <= clip_low < 1 and clip_high >= 0, got {self.clip_low}, {self.clip_high}")
        if self.kl_coef < 0:
            raise ValueError(f"kl_coef must be >= 0, got {self.kl_coef}")
        if self.micro_batch_size < 1:
            raise ValueError(f"micro_batch_size must be >= 1, got {self.micro_batch_size}")


class StepStats(msgspec.Struct, kw_only=True):
    """What one step did: the loss before the update and its parts, averaged per completion token."""

    step: int  # the policy version after this step
    loss: float
    policy_loss: float
    kl: float
    clip_fraction: float  # share of completion tokens whose ratio was clipped
    mean_ratio: float
    grad_norm: float  # before clipping
    num_tokens: int
    num_rollouts: int
    mean_reward: float


def group_advantages(rewards: Sequence[float], groups: Sequence[Hashable], eps: float = 1e-6) -> torch.Tensor:
    """``(r - mean) / (std + eps)`` of each reward within its group (population std), float32.

    A group of one rollout, or of equal rewards, gets advantages 0."""
    if len(rewards) != len(groups):
        raise ValueError(f"{len(rewards)} rewards but {len(groups)} group labels")
    values = torch.tensor([float(r) for r in rewards], dtype=torch.float64)
    if not torch.isfinite(values).all():
        raise ValueError("rewards must be finite numbers")
    members: dict[Hashable, list[int]] = defaultdict(list)
    for index, group in enumerate(groups):
        members[group].append(index)
    out = torch.zeros_like(values)
    for indices in members.values():
        group_rewards = values[indices]
        centred = group_rewards - group_rewards.mean()
        out[indices] = centred / (group_rewards.std(unbiased=False) + eps)
    return out.float()


@dataclass
class GRPOBatch:
    """Padded tensors of a list of :class:`RolloutSample` (see :func:`collate`)."""

    input_ids: torch.Tensor  # (B, T) right-padded prompt + completion
    attention_mask: torch.Tensor  # (B, T)
    completion_mask: torch.Tensor  # (B, T - 1) float: 1 where the predicted token is a completion token
    old_log_probs: torch.Tensor  # (B, T - 1), aligned with completion_mask; NaN where unknown
    advantages: torch.Tensor  # (B,)
    rewards: torch.Tensor  # (B,)


def collate(
    samples: Sequence[RolloutSample], pad_token_id: int, advantages: torch.Tensor | None = None, eps: float = 1e-6
) -> GRPOBatch:
    """Pad ``samples`` and line up the masks: position ``t`` of the log-prob tensors predicts token
    ``t + 1``, so the completion occupies ``[len(prompt) - 1, len(prompt) - 1 + len(completion))``."""
    if not samples:
        raise ValueError("a GRPO batch needs at least one rollout")
    for index, sample in enumerate(samples):
        if not sample.prompt_token_ids or not sample.generation_token_ids:
            raise ValueError(f"rollout {index}: needs prompt and generation token ids (a token-faithful rollout)")
        if sample.generation_log_probs is not None and len(sample.generation_log_probs) != len(
            sample.generation_token_ids
        ):
            raise ValueError(
                f"rollout {index}: {len(sample.generation_log_probs)} log-probs for "
                f"{len(sample.generation_token_ids)} generated tokens"
            )
    ids, attention = pad_sequences([s.prompt_token_ids + s.generation_token_ids for s in samples], pad_token_id)
    completion = torch.zeros(ids.shape[0], ids.shape[1] - 1)
    old = torch.full((ids.shape[0], ids.shape[1] - 1), math.nan)
    for row, sample in enumerate(samples):
        start, count = len(sample.prompt_token_ids) - 1, len(sample.generation_token_ids)
        completion[row, start : start + count] = 1.0
        if sample.generation_log_probs is not None:
            old[row, start : start + count] = torch.tensor(sample.generation_log_probs, dtype=torch.float32)
    rewards = torch.tensor([float(s.reward) for s in samples])
    if advantages is None:
        advantages = group_advantages(rewards.tolist(), [s.group for s in samples], eps)
    return GRPOBatch(
        input_ids=ids,
        attention_mask=attention,
        completion_mask=completion,
        old_log_probs=old,
        advantages=advantages,
        rewards=rewards,
    )


def grpo_loss(
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    completion_mask: torch.Tensor,
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    ref_log_probs: torch.Tensor | None = None,
    kl_coef: float = 0.0,
    normalizer: float | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The clipped GRPO objective (module docstring) summed over masked tokens / ``normalizer``
    (default: the number of masked tokens). Returns the loss and its detached parts (sums, for
    averaging over micro-batches). ``old_log_probs`` NaN -> the current log-probs (ratio 1)."""
    mask = completion_mask
    old = torch.where(torch.isnan(old_log_probs), log_probs.detach(), old_log_probs)
    # Padding may hold any value; zero the log-ratio there so exp() cannot overflow into the sum.
    log_ratio = torch.where(mask > 0, log_probs - old, torch.zeros_like(log_probs))
    ratio = torch.exp(log_ratio)
    adv = advantages.unsqueeze(-1)
    unclipped = -adv * ratio
    clipped = -adv * torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    per_token = torch.maximum(unclipped, clipped)
    kl = torch.zeros_like(per_token)
    if kl_coef > 0:
        if ref_log_probs is None:
            raise ValueError("kl_coef > 0 needs the reference model's log-probs")
        delta = torch.where(mask > 0, ref_log_probs - log_probs, torch.zeros_like(log_probs))
        kl = torch.exp(delta) - delta - 1.0
    total = normalizer if normalizer is not None else float(mask.sum().clamp(min=1.0))
    loss = ((per_token + kl_coef * kl) * mask).sum() / total
    with torch.no_grad():
        parts = {
            "policy_loss": (per_token * mask).sum(),
            "kl": (kl * mask).sum(),
            "clipped": ((clipped > unclipped).float() * mask).sum(),
            "ratio": (ratio * mask).sum(),
        }
    return loss, parts


class GRPOTrainer:
    """GRPO on a causal LM: ``train_step(samples)`` = advantages, loss, backward, one AdamW step.

    ``reference``: a frozen copy of the initial policy for the KL term (needed when ``kl_coef > 0``).
    ``version`` counts the steps taken (the policy version rollouts are tagged with)."""

    def __init__(
        self,
        model: torch.nn.Module,
        config: GRPOConfig | None = None,
        *,
        pad_token_id: int = 0,
        reference: torch.nn.Module | None = None,
    ):
        self.config = config or GRPOConfig()
        if self.config.kl_coef > 0 and reference is None:
            raise ValueError("kl_coef > 0 needs a reference model")
        torch.manual_seed(self.config.seed)
        self.model = model
        self.reference = reference
        if reference is not None:
            reference.eval()
            reference.requires_grad_(False)
        self.pad_token_id = pad_token_id
        self.optimizer = torch.optim.AdamW(
            [p for p in model.parameters() if p.requires_grad],
            lr=self.config.learning_rate,
            weight_decay=self.config.weight_decay,
        )
        self.version = 0

    def _micro_batches(self, batch: GRPOBatch) -> list[slice]:
        size = self.config.micro_batch_size
        return [slice(i, i + size) for i in range(0, batch.input_ids.shape[0], size)]

    def _accumulate(self, batch: GRPOBatch, backward: bool) -> dict[str, float]:
        """Loss (and, with ``backward``, gradients) of the whole batch, micro-batch by micro-batch."""
        cfg = self.config
        normalizer = float(batch.completion_mask.sum())
        sums: dict[str, float] = defaultdict(float)
        for part in self._micro_batches(batch):
            ids, attention = batch.input_ids[part], batch.attention_mask[part]
            # Trim the micro-batch's padding columns: they cost compute and change nothing.
            width = int(attention.sum(dim=1).max())
            ids, attention = ids[:, :width], attention[:, :width]
            mask = batch.completion_mask[part, : width - 1]
            ref = None
            if cfg.kl_coef > 0:
                with torch.no_grad():
                    ref = token_log_probs(self.reference, ids, attention)
            with torch.set_grad_enabled(backward):
                log_probs = token_log_probs(self.model, ids, attention)
                loss, parts = grpo_loss(
                    log_probs,
                    batch.old_log_probs[part, : width - 1],
                    batch.advantages[part],
                    mask,
                    clip_low=cfg.clip_low,
                    clip_high=cfg.clip_high,
                    ref_log_probs=ref,
                    kl_coef=cfg.kl_coef,
                    normalizer=normalizer,
                )
                if backward:
                    loss.backward()
            sums["loss"] += float(loss.detach())
            for key, value in parts.items():
                sums[key] += float(value) / normalizer
        return dict(sums)

    def loss(self, samples: Sequence[RolloutSample]) -> float:
        """The GRPO loss of ``samples`` under the current weights (no update)."""
        self.model.eval()
        return self._accumulate(collate(samples, self.pad_token_id, eps=self.config.advantage_eps), backward=False)[
            "loss"
        ]

    def train_step(self, samples: Sequence[RolloutSample]) -> StepStats:
        """One optimizer step on ``samples`` (all rollouts of the step's groups)."""
        batch = collate(samples, self.pad_token_id, eps=self.config.advantage_eps)
        if not batch.completion_mask.sum() > 0:
            raise ValueError("the batch has no completion tokens")
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        sums = self._accumulate(batch, backward=True)
        params = [p for p in self.model.parameters() if p.grad is not None]
        limit = self.config.max_grad_norm if self.config.max_grad_norm is not None else math.inf
        grad_norm = float(torch.nn.utils.clip_grad_norm_(params, limit)) if params else 0.0
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.model.eval()
        self.version += 1
        return StepStats(
            step=self.version,
            loss=sums["loss"],
            policy_loss=sums["policy_loss"],
            kl=sums["kl"],
            clip_fraction=sums["clipped"],
            mean_ratio=sums["ratio"],
            grad_norm=grad_norm,
            num_tokens=int(batch.completion_mask.sum()),
            num_rollouts=len(samples),
            mean_reward=float(batch.rewards.mean()),
        )
