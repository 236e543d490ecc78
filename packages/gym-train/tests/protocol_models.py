"""Model interfaces the protocol tests run in real worker processes (importable by name: the spawned
workers import them through the ``sys.path`` they inherit).

:class:`TinyLM` is a real, tiny torch language model (an embedding and a linear layer over 12 token
ids) behind the full interface: a sharded synthetic dataset, sampling, log-probs, SGD steps, and the
``evaluate``, ``offload`` and ``checkpoint`` hooks.
The crash and timeout tests use :mod:`protocol_flaky`, which spares their workers torch's import.
Every request and hook appends to ``events``, which ``spec`` returns, so the tests see what ran and
in which order.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from gym_train.protocol import Fetched, ModelInterface

VOCAB = 12


class TinyLM(ModelInterface):
    def __init__(self, index: int, n_workers: int, seed: int = 0, samples: int = 8):
        self.index, self.n_workers, self.seed, self.samples = index, n_workers, seed, samples
        self.events: list[str] = []
        self.model: torch.nn.Module | None = None
        self.optimizer: torch.optim.Optimizer | None = None
        self.offloaded: dict[str, torch.Tensor] | None = None
        self.steps = 0

    def _log(self, event: str) -> None:
        self.events.append(event)

    # non-blocking

    def fetch(self, payload: Any) -> Fetched:
        self._log("fetch")
        generator = torch.Generator().manual_seed(self.seed)
        # Every worker draws the same dataset and keeps its own shard: sample i goes to worker i % n.
        data = torch.randint(0, VOCAB, (self.samples, 6), generator=generator)
        samples = {f"s{i}": data[i].tolist() for i in range(self.samples) if i % self.n_workers == self.index}
        return Fetched(samples, [{"id": sid, "seqlen": len(tokens)} for sid, tokens in samples.items()])

    def spec(self, payload: Any) -> Any:
        return {"events": list(self.events), "steps": self.steps, "worker": self.index}

    def model_config(self, payload: Any) -> Any:
        self._log("model_config")
        return {"vocab_size": VOCAB, "hidden_size": 8}

    # blocking

    def initialize(self, payload: Any) -> Any:
        self._log("initialize")
        torch.manual_seed(self.seed)
        self.model = torch.nn.Sequential(torch.nn.Embedding(VOCAB, 8), torch.nn.Linear(8, VOCAB))
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=float((payload or {}).get("lr", 0.5)))
        return {"parameters": sum(p.numel() for p in self.model.parameters())}

    def _model(self) -> torch.nn.Module:
        if self.model is None:
            raise RuntimeError("the model is not initialized: send initialize first")
        if self.offloaded is not None:  # back from the offload hook
            self.model.load_state_dict(self.offloaded)
            self.offloaded = None
        return self.model

    def _log_probs(self, batch: list[list[int]]) -> torch.Tensor:
        tokens = torch.tensor(batch)
        logits = self._model()(tokens[:, :-1])
        return torch.log_softmax(logits, -1).gather(-1, tokens[:, 1:, None])[..., 0]

    def generate(self, payload: Any) -> Any:
        self._log("generate")
        torch.manual_seed(self.seed + self.steps)
        model = self._model()
        tokens = torch.tensor([[t[0]] for t in payload["batch"]])
        with torch.no_grad():
            for _ in range(int(payload.get("max_new_tokens", 4))):
                probs = torch.softmax(model(tokens[:, -1:])[:, -1], -1)
                tokens = torch.cat([tokens, torch.multinomial(probs, 1)], 1)
        return tokens.tolist()

    def inference(self, payload: Any) -> Any:
        self._log("inference")
        with torch.no_grad():
            return self._log_probs(payload["batch"]).tolist()

    def train_step(self, payload: Any) -> Any:
        self._log("train_step")
        assert self.optimizer is not None
        loss = -self._log_probs(payload["batch"]).mean()
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        self.steps += 1
        return {"loss": loss.item(), "step": self.steps}

    # hooks

    def hooks(self) -> Mapping[str, Any]:
        return {"evaluate": self._evaluate, "offload": self._offload, "checkpoint": self._checkpoint}

    def _evaluate(self, payload: dict[str, Any], args: Mapping[str, Any]) -> Any:
        self._log("evaluate")
        with torch.no_grad():
            return {"loss": -self._log_probs(payload["batch"]).mean().item()}

    def _offload(self, payload: dict[str, Any], args: Mapping[str, Any]) -> Any:
        # The parameters go to a copy and the live ones are zeroed: the next compute must reload them.
        self._log("offload")
        model = self._model()
        self.offloaded = {k: v.clone() for k, v in model.state_dict().items()}
        with torch.no_grad():
            for p in model.parameters():
                p.zero_()
        return {"tensors": len(self.offloaded)}

    def _checkpoint(self, payload: dict[str, Any], args: Mapping[str, Any]) -> Any:
        self._log("checkpoint")
        path = f"{args['directory']}/worker{self.index}-step{self.steps}.pt"
        torch.save(self._model().state_dict(), path)
        return {"path": path}
