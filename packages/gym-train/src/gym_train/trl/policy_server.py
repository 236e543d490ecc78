"""The policy being trained, served as a gym model server from the trainer's own process.

Multi-turn rollouts go through a gym agent (``token_preserving``), which calls a model server. For
GRPO the rollouts must come from the policy being trained (on-policy), with the token ids the model
sampled and their log-probs. :class:`TrainerPolicyServer` serves that policy in place of a
``local_llama`` instance of the config: it *is* ``local_llama``'s server
(:class:`gym_local_llama.server.LocalLlamaModel`: the same routes, options, prompt format, tool-call
markup and token-history protocol) whose engine, :class:`PolicyEngine`, generates with the trainer's
torch model instead of llama.cpp. The model is bound by the rollout function before each generation
round (:meth:`PolicyEngine.bind`), so each round samples from the weights of that step, exactly.

Why not ``local_llama`` restarted on saved weights, as ``gym train`` does: writing a 540 MB GGUF and
restarting the engine costs seconds per step, and llama.cpp's log-probs differ from torch's (8-bit
activations, 0.05 nats a token on average), so the rollouts would be slightly off-policy. Here the
weights are the trainer's tensors, the log-probs the trainer's forward pass.

Concurrent requests are decoded together (up to the instance's ``batch_size``, left-padded, one
token each per step); requests with other sampling settings wait for the next batch. Generation
runs on one worker thread; the trainer's thread is waiting for the rollouts meanwhile, so the two
never use the model at once. The model's train/eval mode is restored after each batch.

Generations follow ``local_llama``'s conventions (:mod:`gym_local_llama.decoding`):
``generation_token_ids`` include the end-of-generation token when the model produced one;
``generation_log_probs`` are raw log-probabilities (log-softmax of the logits, before temperature and
top-p); ``finish_reason`` is ``tool_calls``, ``stop`` or ``length``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import queue
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from gym_local_llama.chat_template import DEFAULT_SYSTEM_PROMPT, render_continuation, render_prompt
from gym_local_llama.decoding import Generation
from gym_local_llama.server import LocalLlamaModel
from gym_local_llama.tool_calls import parse_tool_calls
from gym_train.loop import POLICY_SERVER_TYPE
from gym_train.model import _cache_argument

__all__ = ["PolicyEngine", "PolicyNotBoundError", "TrainerPolicyServer", "EngineStats"]


class PolicyNotBoundError(RuntimeError):
    """A generation was asked for before a model was bound (a ``RuntimeError``: ``local_llama``'s
    server answers it 503, which callers may retry)."""


@dataclass
class EngineStats:
    """What the engine generated so far: requests, batches, tokens and seconds of decoding."""

    requests: int = 0
    batches: int = 0
    generated_tokens: int = 0
    prompt_tokens: int = 0
    seconds: float = 0.0


@dataclass
class _Request:
    prompt_ids: list[int]
    tools: list[dict] | None
    temperature: float
    top_p: float
    max_tokens: int
    stop: list[str]
    seed: int | None
    future: concurrent.futures.Future = field(default_factory=concurrent.futures.Future)


class _Detokenizer:
    """``llm.detokenize`` of ``local_llama``'s engine (its server renders log-prob entries with it)."""

    def __init__(self, engine: PolicyEngine):
        self.engine = engine

    def detokenize(self, ids: Sequence[int]) -> bytes:
        return self.engine.decode(ids).encode("utf-8")


class PolicyEngine:
    """The engine contract of ``local_llama``'s server (``agenerate``, ``check_token_ids``,
    ``model_name``, ``llm.detokenize``, ``aclose``) on a torch causal LM bound with :meth:`bind`."""

    def __init__(
        self,
        *,
        n_ctx: int = 4096,
        batch_size: int = 8,
        seed: int = 0,
        default_system_prompt: str | None = DEFAULT_SYSTEM_PROMPT,
    ):
        self.n_ctx = n_ctx
        self.batch_size = batch_size
        self.default_system_prompt = default_system_prompt
        self.generator = torch.Generator().manual_seed(seed)
        self.model: Any = None
        self.tokenizer: Any = None
        self.eog_token_ids: frozenset[int] = frozenset()
        self.stats = EngineStats()
        self.llm = _Detokenizer(self)
        self._queue: queue.Queue[_Request | None] = queue.Queue()
        self._worker: threading.Thread | None = None
        self._lock = threading.Lock()
        self._closed = False

    # --- binding ----------------------------------------------------------------------------------

    def configure(self, *, n_ctx: int, batch_size: int, seed: int) -> None:
        """The served instance's options (``local_llama``'s ``n_ctx``, ``batch_size``, ``seed``)."""
        self.n_ctx, self.batch_size = n_ctx, batch_size
        self.generator = torch.Generator().manual_seed(seed)

    def bind(self, model: Any, tokenizer: Any) -> None:
        """Generate with ``model`` (a causal LM, the trainer's own object) and ``tokenizer`` from now on."""
        with self._lock:
            self.model, self.tokenizer = model, tokenizer
            eog = {tokenizer.eos_token_id}
            for special in ("<|im_end|>", "<|endoftext|>"):
                token = tokenizer.convert_tokens_to_ids(special)
                if isinstance(token, int) and token != tokenizer.unk_token_id:
                    eog.add(token)
            self.eog_token_ids = frozenset(t for t in eog if t is not None)

    @property
    def model_name(self) -> str:
        name = getattr(getattr(self.model, "config", None), "_name_or_path", "") or "trainer-policy"
        return f"trainer-policy:{str(name).rstrip('/').rsplit('/', 1)[-1]}" if name != "trainer-policy" else name

    @property
    def vocab_size(self) -> int:
        return int(self.model.get_input_embeddings().num_embeddings) if self.model is not None else 0

    def check_token_ids(self, ids: Sequence[int], what: str) -> None:
        """Raise ``ValueError`` unless every id is a token of the bound model's vocabulary."""
        if self.model is None:
            return  # checked again when generating
        size = self.vocab_size
        bad = next((t for t in ids if not isinstance(t, int) or isinstance(t, bool) or not 0 <= t < size), None)
        if bad is not None:
            raise ValueError(f"{what}: {bad!r} is not a token id of the policy (0 to {size - 1})")

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``, special-token markup (``<|im_start|>``) included, no BOS added."""
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=True)

    # --- requests ----------------------------------------------------------------------------------

    async def agenerate(
        self,
        messages: list[dict],
        *,
        token_history: Sequence[int] | None = None,
        tools: list[dict] | None = None,
        temperature: float | None = 0.7,
        top_p: float | None = 0.95,
        max_tokens: int | None = 512,
        stop: list[str] | None = None,
        seed: int | None = None,
        return_token_ids: bool = False,
        return_logprobs: bool = False,
        grammar: object | None = None,
        top_logprobs: int = 0,
    ) -> Generation:
        """Generate a reply to ``messages`` (after ``token_history``: the ids the conversation starts
        with, followed by only the new messages), as ``LlamaEngine.agenerate`` does. The trainer's
        model samples freely: a grammar (JSON schema, a required tool call) or ``top_logprobs`` is a
        ValueError, which the server answers 400 naming it."""
        if grammar is not None:
            raise ValueError(
                "the trainer's policy does not constrain decoding: response_format json_schema/json_object "
                "and tool_choice required or a named function are not served during training"
            )
        if top_logprobs:
            raise ValueError("the trainer's policy returns the sampled tokens' log-probs only: top_logprobs is 0")
        if self._closed:
            raise RuntimeError("the policy engine is closed")
        if self.model is None:
            raise PolicyNotBoundError("no policy bound yet: the trainer binds its model before each rollout round")
        temperature = 0.7 if temperature is None else temperature
        top_p = 0.95 if top_p is None else top_p
        if not temperature >= 0.0:
            raise ValueError(f"temperature must be >= 0, got {temperature}")
        if not 0.0 < top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {top_p}")
        if max_tokens is None or max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
        if token_history is None:
            prompt_ids = self.encode(render_prompt(messages, tools, default_system_prompt=self.default_system_prompt))
        else:
            history = list(token_history)
            if not history:
                raise ValueError("the token history is empty")
            self.check_token_ids(history, "token history")
            text = render_continuation(messages, close_assistant_turn=history[-1] not in self.eog_token_ids)
            prompt_ids = history + self.encode(text)
        if len(prompt_ids) >= self.n_ctx:
            raise ValueError(f"prompt is {len(prompt_ids)} tokens; the context window is {self.n_ctx}")
        request = _Request(
            prompt_ids, tools, float(temperature), float(top_p), int(max_tokens), [s for s in stop or [] if s], seed
        )
        self._ensure_worker()
        self._queue.put(request)
        try:
            return await asyncio.wrap_future(request.future)
        except asyncio.CancelledError:
            request.future.cancel()  # dropped if still queued; a running batch finishes it anyway
            raise

    def _ensure_worker(self) -> None:
        with self._lock:
            if self._worker is None:
                self._worker = threading.Thread(target=self._work, name="trainer-policy-engine", daemon=True)
                self._worker.start()

    def _work(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            batch = [first]
            # Requests that arrive together (a group's rollouts) are decoded together.
            deadline = time.monotonic() + 0.02
            while len(batch) < self.batch_size:
                try:
                    item = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
                except queue.Empty:
                    break
                if item is None:
                    self._queue.put(None)
                    break
                batch.append(item)
            batch = [r for r in batch if r.future.set_running_or_notify_cancel()]
            groups: dict[tuple[float, float], list[_Request]] = {}
            for request in batch:
                groups.setdefault((request.temperature, request.top_p), []).append(request)
            for (temperature, top_p), requests in groups.items():
                try:
                    results = self._decode(requests, temperature, top_p)
                except BaseException as exc:  # a failed batch fails its requests, not the worker
                    for request in requests:
                        request.future.set_exception(RuntimeError(f"generation failed: {type(exc).__name__}: {exc}"))
                    continue
                for request, result in zip(requests, results):
                    request.future.set_result(result)

    @torch.no_grad()
    def _decode(self, requests: list[_Request], temperature: float, top_p: float) -> list[Generation]:
        model, eog = self.model, self.eog_token_ids
        started = time.monotonic()
        size = self.vocab_size
        for request in requests:
            self.check_token_ids(request.prompt_ids, "prompt")
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else next(iter(eog))
        width = max(len(r.prompt_ids) for r in requests)
        ids = torch.full((len(requests), width), int(pad), dtype=torch.long)
        mask = torch.zeros((len(requests), width), dtype=torch.long)
        for row, request in enumerate(requests):  # left-padded: every row's next token is in the last column
            ids[row, width - len(request.prompt_ids) :] = torch.tensor(request.prompt_ids)
            mask[row, width - len(request.prompt_ids) :] = 1
        budgets = [min(r.max_tokens, self.n_ctx - len(r.prompt_ids)) for r in requests]
        out: list[list[int]] = [[] for _ in requests]
        log_probs: list[list[float]] = [[] for _ in requests]
        finish = ["length"] * len(requests)
        done = [b <= 0 for b in budgets]
        cache_arg = _cache_argument(model)
        was_training = model.training
        model.eval()
        try:
            past = None
            step_ids, positions = ids, (mask.cumsum(-1) - 1).clamp(min=0)
            while not all(done):
                output = model(
                    input_ids=step_ids, attention_mask=mask, position_ids=positions, use_cache=True, **{cache_arg: past}
                )
                past = getattr(output, cache_arg)
                logits = output.logits[:, -1, :size].float()
                raw = torch.log_softmax(logits, dim=-1)
                tokens = self._sample(logits, temperature, top_p, requests)
                for row, token in enumerate(tokens):
                    if done[row]:
                        continue
                    out[row].append(token)
                    log_probs[row].append(float(raw[row, token]))
                    if token in eog:
                        finish[row], done[row] = "stop", True
                    elif requests[row].stop and any(s in self.decode(out[row]) for s in requests[row].stop):
                        finish[row], done[row] = "stop", True
                    elif len(out[row]) >= budgets[row]:
                        done[row] = True
                step_ids = torch.tensor([[t] for t in tokens])
                mask = torch.cat([mask, torch.ones((len(requests), 1), dtype=torch.long)], dim=1)
                positions = positions[:, -1:] + 1
        finally:
            model.train(was_training)
        results = []
        for row, request in enumerate(requests):
            text_ids = [t for t in out[row] if t not in eog]
            text = self.decode(text_ids)
            for s in request.stop:  # the reply ends before a stop string
                cut = text.find(s)
                if cut >= 0:
                    text = text[:cut]
            text, calls = parse_tool_calls(text, request.tools)
            results.append(
                Generation(
                    text=text,
                    tool_calls=calls,
                    finish_reason="tool_calls" if calls else finish[row],
                    prompt_tokens=len(request.prompt_ids),
                    completion_tokens=len(out[row]),
                    prompt_token_ids=list(request.prompt_ids),
                    generation_token_ids=out[row],
                    generation_log_probs=log_probs[row],
                )
            )
        self.stats.requests += len(requests)
        self.stats.batches += 1
        self.stats.generated_tokens += sum(len(o) for o in out)
        self.stats.prompt_tokens += sum(len(r.prompt_ids) for r in requests)
        self.stats.seconds += time.monotonic() - started
        return results

    def _sample(self, logits: torch.Tensor, temperature: float, top_p: float, requests: list[_Request]) -> list[int]:
        """One token per row: argmax at temperature 0, else from softmax(logits / temperature)
        restricted to the top-p nucleus (its first token always kept)."""
        if temperature == 0:
            return [int(t) for t in torch.argmax(logits, dim=-1)]
        probs = torch.softmax(logits / temperature, dim=-1)
        sorted_probs, order = torch.sort(probs, dim=-1, descending=True, stable=True)
        keep = (torch.cumsum(sorted_probs, dim=-1) - sorted_probs) < top_p
        tokens = []
        for row, request in enumerate(requests):
            generator = self.generator if request.seed is None else torch.Generator().manual_seed(request.seed)
            choice = torch.multinomial(sorted_probs[row] * keep[row], 1, generator=generator)
            tokens.append(int(order[row, choice]))
        return tokens

    # --- lifecycle ----------------------------------------------------------------------------------

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._queue.put(None)
        if self._worker is not None:
            self._worker.join(30)

    async def aclose(self) -> None:
        """``local_llama``'s server calls this at shutdown; the engine outlives a server restart, so
        only :meth:`close` (by :class:`~gym_train.trl.servers.GymServers`) stops it."""


class TrainerPolicyServer(LocalLlamaModel):
    """``local_llama``'s server with :class:`PolicyEngine` as its engine (module docstring)."""

    SERVER_TYPE = POLICY_SERVER_TYPE  # the instance type it stands in for

    def __init__(self, *args: Any, engine: PolicyEngine, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.policy_engine = engine

    async def startup(self) -> None:
        cfg = self.config
        self.policy_engine.configure(n_ctx=cfg.n_ctx, batch_size=cfg.batch_size, seed=cfg.seed)
        self.engine = self.policy_engine
        self.model_name = "trainer-policy"
        self.log.info("serving the trainer's policy (batches of up to %d requests)", cfg.batch_size)
