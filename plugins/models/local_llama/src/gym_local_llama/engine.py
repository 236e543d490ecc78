"""Offline chat inference engine: SmolLM2-135M-Instruct (GGUF) on llama-cpp-python.

This module is deliberately independent of ``gym_core``: it turns OpenAI-style
chat messages into a prompt, runs the model token by token and parses tool
calls out of the reply.  The HTTP model server wraps it.

Each concern has its module; this one holds :class:`LlamaEngine`, which ties them together, and
re-exports their public names:

* :mod:`~gym_local_llama.weights`: the GGUF file, its copies in other formats (``weight_format``);
* :mod:`~gym_local_llama.chat_template`: messages and tools rendered as a ChatML prompt;
* :mod:`~gym_local_llama.tool_calls`: tool calls parsed out of the reply;
* :mod:`~gym_local_llama.sampling`: the sampler;
* :mod:`~gym_local_llama.decoding`: one request's decoding and its :class:`Generation`;
* :mod:`~gym_local_llama.batching`: requests decoded together (``batch_size`` > 1);
* :mod:`~gym_local_llama.errors`: the errors.

Token history
-------------
``generate(new_messages, token_history=ids)`` prompts with ``ids`` (an earlier call's prompt +
generated ids) verbatim, followed by :func:`render_continuation` of the new messages tokenized on
their own: ``\n`` (``<|im_end|>\n`` when ``ids`` does not end with an end-of-generation token), the
new turns, the generation header.  :meth:`LlamaEngine.log_probs` recomputes the log-probs of a
generation by teacher forcing, evaluating the tokens exactly as ``generate`` does.

Generation
----------
The prompt is tokenized with ``llm.tokenize(prompt.encode(), add_bos=<from the
GGUF>, special=True)`` (SmolLM2: no BOS).  The engine decodes one token at a
time with its own sampler (numpy; temperature 0 -> argmax; otherwise softmax of
``logits / temperature``, restricted to the top-p nucleus -- tokens ranked by
logit, ties by id -- then one uniform draw from a ``numpy`` PCG64 generator).
``seed`` given per request -> a fresh generator seeded with it (reproducible);
``seed=None`` -> the engine's own generator, seeded once with the constructor's
``seed`` (so a fixed sequence of requests is reproducible too).

Prefix cache: the KV cache of the previous request's *prompt* is kept, and a
new prompt only evaluates the tokens after the longest common prefix with it
(at least the last two prompt tokens are evaluated again).  Multi-turn
conversations thus pay for the last reply and the new turn only.  The results
do not depend on the cache state: llama.cpp computes a lone token slightly
differently from a token inside a batch (up to ~1.7 in the logits for this
model), so KV cells of generated tokens (decoded one by one) are never reused
and prompt tokens are always decoded in batches of two or more.  Disable with
``prefix_cache=False``.

Threading
---------
A llama context is not thread-safe.  :meth:`LlamaEngine.generate` holds an
internal lock for its whole duration; :meth:`LlamaEngine.agenerate` runs
``generate`` on ONE dedicated worker thread, so concurrent async callers are
served first-in first-out while the event loop stays free.  Cancelling an
``agenerate`` call drops it from the queue, or stops the running generation at
the next token.  With ``batch_size`` > 1, ``agenerate`` renders and tokenizes
off the loop, then waits for the scheduler thread; cancelling it drops a queued
request, or frees a running one's slot at the next step.

Streaming: :meth:`LlamaEngine.aprepare` then :meth:`LlamaEngine.arun` (what ``agenerate`` does), with
the prepared decoding's ``on_text`` set in between, gives the reply's text as it is decoded
(:mod:`~gym_local_llama.decoding`).
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import llama_cpp
import numpy as np
from llama_cpp import Llama

from gym_local_llama.batching import BatchScheduler, BatchStats
from gym_local_llama.chat_template import (
    DEFAULT_SYSTEM_PROMPT,
    IM_END,
    render_continuation,
    render_prompt,
    render_tools_section,
)
from gym_local_llama.decoding import Decoding, Generation, prompt_chunks, reusable_prefix
from gym_local_llama.errors import (
    EngineClosedError,
    GenerationCancelled,
    ModelConversionError,
    ModelNotFoundError,
    PromptTooLongError,
)
from gym_local_llama.grammar import Grammar, GrammarConstraint, json_schema_grammar, tool_call_grammar
from gym_local_llama.sampling import log_softmax_at
from gym_local_llama.tool_calls import GeneratedToolCall, parse_tool_calls
from gym_local_llama.weights import (
    MODEL_FILENAME,
    MODEL_NAME,
    MODEL_PACKAGE,
    WEIGHT_FORMATS,
    available_cpus,
    default_cache_dir,
    default_model_path,
    model_in_format,
)

__all__ = [
    "BatchStats",
    "DEFAULT_SYSTEM_PROMPT",
    "MODEL_FILENAME",
    "MODEL_NAME",
    "MODEL_PACKAGE",
    "EngineClosedError",
    "GeneratedToolCall",
    "Generation",
    "GenerationCancelled",
    "Grammar",
    "LlamaEngine",
    "ModelConversionError",
    "ModelNotFoundError",
    "PromptTooLongError",
    "WEIGHT_FORMATS",
    "default_cache_dir",
    "default_model_path",
    "json_schema_grammar",
    "model_in_format",
    "parse_tool_calls",
    "render_continuation",
    "render_prompt",
    "render_tools_section",
    "tool_call_grammar",
]


class LlamaEngine:
    """SmolLM2 chat engine; one model, one context, one worker thread (and, with ``batch_size`` > 1,
    a second context where up to that many requests are decoded together)."""

    def __init__(
        self,
        model_path: str | Path | None = None,
        n_ctx: int = 4096,
        n_threads: int | None = None,
        seed: int = 0,
        *,
        default_system_prompt: str | None = DEFAULT_SYSTEM_PROMPT,
        n_batch: int = 512,
        prefix_cache: bool = True,
        batch_size: int = 1,
        batch_n_ctx: int | None = None,
        weight_format: str = "file",
        cache_dir: str | Path | None = None,
        verbose: bool = False,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if batch_n_ctx is not None and batch_n_ctx < 2:
            raise ValueError(f"batch_n_ctx must be >= 2, got {batch_n_ctx}")
        path = Path(model_path) if model_path is not None else default_model_path()
        if not path.is_file():
            raise ModelNotFoundError(f"model file {path} does not exist")
        threads = n_threads if n_threads and n_threads > 0 else available_cpus()
        self.model_path = path
        self.weight_format = weight_format
        self.weights_path = model_in_format(path, weight_format, cache_dir)
        self.default_system_prompt = default_system_prompt
        self.prefix_cache = prefix_cache
        self.batch_size = batch_size
        self._llm: Llama | None = Llama(
            model_path=str(self.weights_path),
            n_ctx=n_ctx,
            n_batch=max(2, min(n_batch, n_ctx)),
            n_ubatch=max(2, min(n_batch, n_ctx)),
            n_threads=threads,
            n_threads_batch=threads,
            seed=seed,
            logits_all=False,
            verbose=verbose,
        )
        llm = self._llm
        self.n_ctx = llm.n_ctx()
        self.n_threads = threads
        self._n_batch = max(2, min(n_batch, n_ctx))
        self._batched_tokens = 0  # leading KV cells written by prompt batches
        self._n_vocab = llm.n_vocab()
        vocab = llama_cpp.llama_model_get_vocab(llm.model)
        self._add_bos = bool(llama_cpp.llama_vocab_get_add_bos(vocab))
        eog = {t for t in range(self._n_vocab) if llama_cpp.llama_vocab_is_eog(vocab, t)}
        eog.add(llm.token_eos())
        im_end = llm.tokenize(IM_END.encode(), add_bos=False, special=True)
        if len(im_end) == 1:
            eog.add(im_end[0])
        self.eog_token_ids: frozenset[int] = frozenset(eog)
        self._rng = np.random.default_rng(seed)
        self._lock = threading.Lock()  # the unbatched context
        self._vocab_lock = threading.Lock()  # tokenizing outside the lock vs. close() freeing the model
        self._closed = False
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="llama-engine")
        self._scheduler: BatchScheduler | None = None
        if batch_size > 1:
            try:
                slot_ctx = self.n_ctx if batch_n_ctx is None else min(batch_n_ctx, self.n_ctx)
                self._scheduler = BatchScheduler(
                    llm, batch_size, slot_ctx, n_batch=self._n_batch, prefix_cache=prefix_cache
                )
            except BaseException:
                self._executor.shutdown(wait=False)
                llm.close()
                raise

    # ------------------------------------------------------------------ helpers

    @property
    def model_name(self) -> str:
        return MODEL_NAME if self.model_path.name == MODEL_FILENAME else self.model_path.stem

    @property
    def llm(self) -> Llama:
        """The underlying ``llama_cpp.Llama`` (do not use its context while a generation runs)."""
        if self._llm is None:
            raise EngineClosedError("engine is closed")
        return self._llm

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def batch_stats(self) -> BatchStats | None:
        """What batched decoding has done so far; None when ``batch_size`` is 1."""
        return None if self._scheduler is None else self._scheduler.stats

    def render_prompt(self, messages: Sequence[dict], tools: Sequence[dict] | None = None) -> str:
        return render_prompt(messages, tools, default_system_prompt=self.default_system_prompt)

    def tokenize_prompt(self, prompt: str) -> list[int]:
        return self.llm.tokenize(prompt.encode("utf-8"), add_bos=self._add_bos, special=True)

    def _eval_prompt(self, llm: Llama, tokens: list[int]) -> None:
        """Decode prompt tokens in batches of >= 2 tokens (see ``_prefill``)."""
        for chunk in prompt_chunks(tokens, self._n_batch):
            llm.eval(chunk)

    def _prefill(self, llm: Llama, prompt_ids: list[int]) -> int:
        """Evaluate the prompt, reusing the cached KV prefix. Returns the reused count.

        llama.cpp computes a lone token (matrix-vector kernels) slightly
        differently from a token inside a multi-token batch (matrix-matrix
        kernels); the split of a batch does not matter otherwise.  To make the
        result independent of the cache state, only KV cells written by
        earlier *prompt* batches are reused (never those of generated tokens),
        at least the last two prompt tokens are always decoded again, and no
        prompt chunk is a single token.
        """
        reusable = min(llm.n_tokens, self._batched_tokens) if self.prefix_cache else 0
        common = reusable_prefix(llm.input_ids[:reusable], prompt_ids) if reusable > 0 else 0
        self._batched_tokens = 0
        if common == 0:
            llm.reset()
        else:
            llm.n_tokens = common  # Llama.eval drops the KV cells from here on
        self._eval_prompt(llm, prompt_ids[common:])
        self._batched_tokens = len(prompt_ids)
        return common

    def _logits(self, llm: Llama) -> np.ndarray:
        ptr = llama_cpp.llama_get_logits_ith(llm.ctx, -1)
        return np.ctypeslib.as_array(ptr, shape=(self._n_vocab,))

    # ------------------------------------------------------------------ generation

    def _prepare(
        self,
        messages: list[dict],
        *,
        tools: list[dict] | None = None,
        temperature: float = 0.7,
        top_p: float = 0.95,
        max_tokens: int = 512,
        stop: list[str] | str | None = None,
        seed: int | None = None,
        return_token_ids: bool = False,
        return_logprobs: bool = False,
        token_history: Sequence[int] | None = None,
        grammar: Grammar | None = None,
        top_logprobs: int = 0,
    ) -> Decoding:
        """Check a request, render and tokenize its prompt: its :class:`Decoding`, not started."""
        if temperature is None:
            temperature = 0.7
        if top_p is None:
            top_p = 0.95
        if not temperature >= 0.0:
            raise ValueError(f"temperature must be >= 0, got {temperature}")
        if not 0.0 < top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {top_p}")
        if max_tokens is None or max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
        if isinstance(stop, str):
            stop = [stop]
        stop_bytes = [s.encode("utf-8") for s in stop or [] if s]
        if token_history is None:
            prompt = self.render_prompt(messages, tools)
        else:
            history = list(token_history)
            self.check_token_ids(history, "token history")
            if not history:
                raise ValueError("the token history is empty")
            prompt = render_continuation(messages, close_assistant_turn=history[-1] not in self.eog_token_ids)
        with self._vocab_lock:
            if self._closed or self._llm is None:
                raise EngineClosedError("engine is closed")
            if token_history is None:
                prompt_ids = self.tokenize_prompt(prompt)
            else:
                prompt_ids = history + self._llm.tokenize(prompt.encode("utf-8"), add_bos=False, special=True)
        if len(prompt_ids) >= self.n_ctx:
            raise PromptTooLongError(f"prompt is {len(prompt_ids)} tokens; the context window is {self.n_ctx}")
        # seed=None: the engine's own generator, used only by the thread that decodes.
        rng = np.random.default_rng(seed) if seed is not None else self._rng
        constraint = None
        if grammar is not None:
            constraint = GrammarConstraint(llama_cpp.llama_model_get_vocab(self.llm.model), self._n_vocab, grammar)
        return Decoding(
            prompt_ids,
            n_ctx=self.n_ctx,
            eog_token_ids=self.eog_token_ids,
            detokenize=self.llm.detokenize,
            tools=tools,
            temperature=temperature,
            top_p=top_p,
            max_tokens=max_tokens,
            stop_bytes=stop_bytes,
            rng=rng,
            return_token_ids=return_token_ids,
            return_logprobs=return_logprobs,
            top_logprobs=top_logprobs,
            grammar=constraint,
        )

    def generate(
        self,
        messages: list[dict],
        *,
        tools: list[dict] | None = None,
        temperature: float = 0.7,
        top_p: float = 0.95,
        max_tokens: int = 512,
        stop: list[str] | str | None = None,
        seed: int | None = None,
        return_token_ids: bool = False,
        return_logprobs: bool = False,
        token_history: Sequence[int] | None = None,
        grammar: Grammar | None = None,
        top_logprobs: int = 0,
        cancel: threading.Event | None = None,
    ) -> Generation:
        """Blocking generation (thread-safe: serialized by an internal lock, or decoded beside
        other requests when ``batch_size`` > 1).

        ``token_history``: the token ids of the conversation so far (an earlier call's prompt ids
        followed by its generated ids), used verbatim as the start of the prompt; ``messages`` are
        then only the messages that came after it, rendered by :func:`render_continuation` and
        tokenized on their own, and ``tools`` only serve to parse tool calls (their description is
        in the history's system turn already).

        ``None`` for temperature/top_p means the default (0.7 / 0.95).  Raises
        ``ValueError`` (incl. :class:`PromptTooLongError`) for bad requests,
        :class:`EngineClosedError` after ``close()`` and
        :class:`GenerationCancelled` when ``cancel`` gets set.
        """
        decoding = self._prepare(
            messages,
            tools=tools,
            temperature=temperature,
            top_p=top_p,
            max_tokens=max_tokens,
            stop=stop,
            seed=seed,
            return_token_ids=return_token_ids,
            return_logprobs=return_logprobs,
            token_history=token_history,
            grammar=grammar,
            top_logprobs=top_logprobs,
        )
        if self._scheduler is not None and self._scheduler.fits(decoding):
            return self._scheduler.submit(decoding, cancel).result().generation()
        return self._generate_alone(decoding, cancel)

    def _generate_alone(self, decoding: Decoding, cancel: threading.Event | None) -> Generation:
        """Decode one prepared request on the unbatched context."""
        with self._lock:
            if self._closed or self._llm is None:
                raise EngineClosedError("engine is closed")
            llm = self._llm
            try:
                decoding.cached = self._prefill(llm, decoding.prompt_ids)
                while True:
                    if cancel is not None and cancel.is_set():
                        raise GenerationCancelled("generation cancelled")
                    token = decoding.step(self._logits(llm))
                    if token is None:
                        break
                    llm.eval([token])
            except BaseException:
                llm.reset()  # the cache may be half-written; start clean next time
                self._batched_tokens = 0
                raise
        return decoding.generation()

    def check_token_ids(self, ids: Sequence[int], what: str) -> None:
        """Raise ``ValueError`` unless every id is a token of the model's vocabulary."""
        bad = next(
            (t for t in ids if not isinstance(t, int) or isinstance(t, bool) or not 0 <= t < self._n_vocab), None
        )
        if bad is not None:
            raise ValueError(f"{what}: {bad!r} is not a token id of {self.model_name} (0 to {self._n_vocab - 1})")

    def log_probs(self, prompt_ids: Sequence[int], generation_ids: Sequence[int]) -> list[float]:
        """The model's log-probability of each of ``generation_ids`` after ``prompt_ids`` (teacher forcing).

        The tokens are evaluated exactly as :meth:`generate` evaluates them (the prompt in batches,
        then each generated token alone), so for a generation of this engine's model the result
        equals its ``generation_log_probs`` whatever the sampling settings were (batched or not:
        batched decoding computes every sequence's numbers as the unbatched engine does).
        """
        prompt, generated = list(prompt_ids), list(generation_ids)
        self.check_token_ids(prompt + generated, "log_probs")
        if len(prompt) < 2:
            raise ValueError("log_probs needs a prompt of at least two tokens")
        if len(prompt) + len(generated) > self.n_ctx:
            raise PromptTooLongError(f"{len(prompt) + len(generated)} tokens; the context window is {self.n_ctx}")
        with self._lock:
            if self._closed or self._llm is None:
                raise EngineClosedError("engine is closed")
            llm = self._llm
            out: list[float] = []
            try:
                self._prefill(llm, prompt)
                for index, token in enumerate(generated):
                    out.append(log_softmax_at(self._logits(llm), token))
                    if index + 1 < len(generated):
                        llm.eval([token])
            except BaseException:
                llm.reset()
                self._batched_tokens = 0
                raise
            return out

    async def agenerate(self, messages: list[dict], **kwargs: Any) -> Generation:
        """``generate`` off the event loop: FIFO on the engine's single worker thread, or, when
        ``batch_size`` > 1, decoded beside the other requests; never blocks the loop.

        Cancelling the awaiting task removes a queued request, or stops a running
        one before its next token (freeing its batch slot).
        """
        if self._closed:
            raise EngineClosedError("engine is closed")
        if self._scheduler is not None:
            return await self.arun(await self.aprepare(messages, **kwargs))
        cancel = threading.Event()
        return await self._run_alone(functools.partial(self.generate, messages, cancel=cancel, **kwargs), cancel)

    async def aprepare(self, messages: list[dict], **kwargs: Any) -> Decoding:
        """Check a request, render and tokenize its prompt, off the event loop (``generate``'s
        arguments; ``ValueError`` for a bad request): its :class:`Decoding`, for :meth:`arun`.

        Set the decoding's ``on_text`` before :meth:`arun` to have its text as it is decoded (called
        on the decoding thread: hand it to the event loop with ``loop.call_soon_threadsafe``)."""
        if self._closed:
            raise EngineClosedError("engine is closed")
        return await asyncio.to_thread(functools.partial(self._prepare, messages, **kwargs))

    async def arun(self, decoding: Decoding) -> Generation:
        """Decode a request :meth:`aprepare` prepared: beside the others when it fits a batch slot,
        else on the unbatched context. Cancelling the awaiting task drops a queued request, or stops
        a running one before its next token (freeing its slot)."""
        cancel = threading.Event()
        if self._scheduler is None or not self._scheduler.fits(decoding):
            return await self._run_alone(functools.partial(self._generate_alone, decoding, cancel), cancel)
        future = self._scheduler.submit(decoding, cancel)
        try:
            done = await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            cancel.set()  # a queued request is dropped by the cancelled future itself
            raise
        return done.generation()

    async def _run_alone(self, call: functools.partial, cancel: threading.Event) -> Generation:
        """Run ``call`` (an unbatched generation) on the engine's worker thread."""
        loop = asyncio.get_running_loop()
        try:
            future = loop.run_in_executor(self._executor, call)
        except RuntimeError as exc:  # executor shut down concurrently
            raise EngineClosedError("engine is closed") from exc
        try:
            return await future
        except asyncio.CancelledError:
            cancel.set()
            task = asyncio.current_task()
            if self._closed and task is not None and not task.cancelling():
                # close() dropped this queued request; the caller was not cancelled.
                raise EngineClosedError("engine closed before the request ran") from None
            raise

    # ------------------------------------------------------------------ lifecycle

    def close(self) -> None:
        """Free the model. Running generations finish first; queued ``agenerate``
        calls raise :class:`EngineClosedError`.

        Blocks until then: from async code use ``await engine.aclose()``.
        Idempotent.
        """
        if self._closed:
            return
        self._closed = True
        if self._scheduler is not None:
            self._scheduler.close()
        self._executor.shutdown(wait=True, cancel_futures=True)
        with self._lock, self._vocab_lock:
            llm, self._llm = self._llm, None
            if llm is not None:
                llm.close()

    async def aclose(self) -> None:
        await asyncio.to_thread(self.close)

    def __enter__(self) -> LlamaEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:  # pragma: no cover - best effort
        try:
            if not self._closed:
                self._executor.shutdown(wait=False, cancel_futures=True)
        except Exception:
            pass
