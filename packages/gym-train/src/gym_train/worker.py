"""The model worker of ``gym train``: a :class:`~gym_train.protocol.ModelInterface` holding the policy
and its :class:`~gym_train.grpo.GRPOTrainer`, run by a :class:`~gym_train.protocol.Master` in its
own process (so that training overlaps the collection running in the master's process).

Requests it answers:

- ``initialize`` (blocking): ``{"gguf": path or None, "grpo": {GRPOConfig fields}, "threads": n or
  None}``: sets torch's thread count (None: torch's default), loads the policy
  (:func:`gym_train.model.load_policy`) and builds the trainer; returns the parameter count, the
  GGUF, and where the worker runs (``pid``, and ``ray_node``: the Ray node id when a Ray actor hosts
  it, else None);
- ``train_step`` (blocking): one GRPO step on ``payload["batch"]`` (rows of
  :class:`~gym_train.grpo.RolloutSample`, put there by the ``data_transfer`` pre-hook); returns the
  step's :class:`~gym_train.grpo.StepStats` as a dict;
- ``model_config`` (non-blocking): the policy's architecture and its current version.

Its hook: ``checkpoint`` (post), ``{"path": ...}``: writes the current weights to a GGUF that
``local_llama`` loads (:func:`gym_train.model.save_gguf`, float32) and returns its path and version.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import msgspec

from gym_train.protocol import ModelInterface

__all__ = ["GRPOPolicyWorker"]


def _ray_node() -> str | None:
    """The Ray node this worker runs on when a Ray actor hosts it (Master(backend="ray")), else None."""
    if "ray" not in sys.modules:  # a process worker never imported Ray: do not start importing it here
        return None
    import ray

    return ray.get_runtime_context().get_node_id() if ray.is_initialized() else None


class GRPOPolicyWorker(ModelInterface):
    """The policy and its GRPO trainer in a model worker (one worker: the model is not sharded)."""

    def __init__(self, index: int, n_workers: int, **config: Any):
        if n_workers != 1:
            raise ValueError(f"GRPOPolicyWorker holds the whole model: run it with one worker, not {n_workers}")
        self.policy: Any = None
        self.trainer: Any = None

    def _trainer(self) -> Any:
        if self.trainer is None:
            raise RuntimeError("the policy is not initialized: send initialize first")
        return self.trainer

    def initialize(self, payload: Any) -> Any:
        import torch
        import transformers

        from gym_train.grpo import GRPOConfig, GRPOTrainer
        from gym_train.model import load_policy

        transformers.utils.logging.disable_progress_bar()  # the command's log is one line per event
        payload = payload or {}
        if payload.get("threads"):
            torch.set_num_threads(int(payload["threads"]))
        config = msgspec.convert(payload.get("grpo") or {}, GRPOConfig)
        self.policy = load_policy(payload.get("gguf"))
        self.trainer = GRPOTrainer(self.policy.model, config, pad_token_id=self.policy.pad_token_id)
        return {
            "parameters": sum(p.numel() for p in self.policy.model.parameters()),
            "gguf": str(self.policy.gguf_path),
            "pid": os.getpid(),
            "ray_node": _ray_node(),
        }

    def model_config(self, payload: Any) -> Any:
        trainer = self._trainer()
        config = self.policy.model.config
        return {
            "model_type": config.model_type,
            "num_hidden_layers": config.num_hidden_layers,
            "hidden_size": config.hidden_size,
            "vocab_size": config.vocab_size,
            "version": trainer.version,
        }

    def train_step(self, payload: Any) -> Any:
        from gym_train.grpo import RolloutSample

        samples = msgspec.convert(payload.get("batch") or [], list[RolloutSample])
        if not samples:
            raise ValueError("train_step got no rollouts: send them with the data_transfer pre-hook")
        return msgspec.to_builtins(self._trainer().train_step(samples))

    def hooks(self) -> Mapping[str, Any]:
        return {"checkpoint": self._checkpoint}

    def _checkpoint(self, payload: dict[str, Any], args: Mapping[str, Any]) -> Any:
        if "path" not in args:
            raise ValueError("the checkpoint hook needs a 'path' argument (where to write the GGUF)")
        trainer = self._trainer()
        path = self.policy.save_gguf(Path(args["path"]))
        return {"path": str(path), "version": trainer.version}
