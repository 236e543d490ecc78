"""Batched decoding (``batch_size`` > 1): up to that many requests decoded together.

Requests are decoded together: a second llama context holds ``batch_size``
sequences, one KV-cache stream each (``kv_unified`` off), each ``batch_n_ctx``
tokens (default ``n_ctx``; 23 KB a token for SmolLM2-135M).  A request whose
prompt plus token budget does not fit in a slot is decoded on the unbatched
context instead (same result).  One scheduler thread owns the batch context; at
each step boundary it admits queued requests into free slots (first-in
first-out; the free slot whose cached prompt shares the longest prefix), drops
cancelled ones, decodes one prompt chunk of the oldest request still reading its
prompt (alone), then one token for every request that has one in a single
``llama_decode``, and samples each sequence with its own sampler state.  A
finished request leaves at once; its generated KV cells are removed, its
prompt's kept for the prefix cache (same rules as above).  Before a request
decodes a prompt chunk, a longer prefix of its prompt held by another slot
(busy or free) is copied into its stream instead (at least 16 tokens more than
its own slot holds): the repeats of one task arrive together, and the first to
read the prompt reads it for all of them.

Results are identical to the unbatched engine, bit for bit (tokens, text,
log-probs; seeded sampling too): with one stream per sequence each sequence's
attention sees only its own cells, in the same order, and every other operation
is computed row by row, so a token decoded beside others gets the same numbers
as one decoded alone; prompt chunks are decoded alone and split as the
unbatched engine splits them.  ``seed=None`` draws from the engine's generator
in the order the scheduler samples, so only a fixed *sequence* of requests
(not concurrent ones) repeats.  :meth:`~gym_local_llama.engine.LlamaEngine.log_probs` runs on the
unbatched context and gives the same numbers.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import llama_cpp
import numpy as np
from llama_cpp import Llama

from gym_local_llama.decoding import Decoding, prompt_chunks, reusable_prefix
from gym_local_llama.errors import EngineClosedError, GenerationCancelled

__all__ = ["BatchScheduler", "BatchStats"]


@dataclass
class BatchStats:
    """Counters of the batch scheduler, updated as it works (read them as a snapshot)."""

    batch_size: int  # sequences decoded together at most (slots)
    steps: int = 0  # decode steps: one token for each sequence that had one
    tokens: int = 0  # tokens decoded by those steps
    max_sequences: int = 0  # the most sequences one step decoded
    prompt_chunks: int = 0  # prompt chunks decoded (one per step boundary at most)
    shared_prompt_tokens: int = 0  # prompt tokens copied from another slot's cells instead of decoded
    busy_slots: int = 0  # slots holding a request now
    queued: int = 0  # requests waiting for a slot now


@dataclass(eq=False)
class _Job:
    decoding: Decoding
    cancel: threading.Event | None
    future: Future
    number: int  # admission order: the oldest prompt is decoded first
    chunks: list[list[int]] = field(default_factory=list)  # prompt chunks still to decode
    pos: int = 0  # the position of the next token to evaluate
    token: int | None = None  # the token to evaluate at the next step


@dataclass(eq=False)
class _Slot:
    seq_id: int
    prompt_ids: list[int] = field(default_factory=list)  # the prompt tokens in this sequence's KV cells
    job: _Job | None = None


_IDLE_WAIT_S = 1.0  # how long the idle scheduler sleeps between checks that it is not closing
# Fewest prompt tokens worth copying another slot's KV stream for (a copy moves the whole stream:
# ~24 MB at 1,024 tokens for SmolLM2-135M, a few ms; decoding a token of prompt costs about 1 ms here).
_SHARE_MIN_TOKENS = 16


def _resolve(future: Future, result: Any = None, error: BaseException | None = None) -> None:
    if future.done():
        return
    if error is None:
        future.set_result(result)
    else:
        future.set_exception(error)


class BatchScheduler:
    """Decodes up to ``batch_size`` requests together, each in its own sequence of a context of its own.

    One thread owns the context. At each step boundary it admits queued requests into free slots,
    drops cancelled ones, decodes one prompt chunk (of the oldest request still reading its prompt)
    and then one token for every request that has one, all in one ``llama_decode``. A finished
    request leaves its slot at once; its prompt's KV cells stay for a later prompt with the same
    prefix (the generated ones are removed).
    """

    def __init__(self, llm: Llama, batch_size: int, slot_ctx: int, *, n_batch: int, prefix_cache: bool) -> None:
        self.slot_ctx = slot_ctx
        self._prefix_cache = prefix_cache
        self._n_vocab = llm.n_vocab()
        self._chunk = n_batch
        # The unbatched context's settings (same kernels, same numbers), with one KV stream per
        # sequence (kv_unified off): a sequence's attention then never sees another's cells, and
        # each stream holds slot_ctx tokens.
        params = llama_cpp.llama_context_params.from_buffer_copy(llm.context_params)
        params.n_ctx = slot_ctx * batch_size
        params.n_batch = params.n_ubatch = max(self._chunk, batch_size)
        params.n_seq_max = batch_size
        params.kv_unified = False
        self._ctx = llama_cpp.llama_init_from_model(llm.model, params)
        if not self._ctx:
            raise RuntimeError(f"llama.cpp could not create a context for {batch_size} sequences of {slot_ctx} tokens")
        if llama_cpp.llama_n_ctx_seq(self._ctx) < slot_ctx:  # pragma: no cover - llama.cpp rounding
            llama_cpp.llama_free(self._ctx)
            raise RuntimeError(f"llama.cpp gave each of {batch_size} sequences fewer than {slot_ctx} tokens")
        self._memory = llama_cpp.llama_get_memory(self._ctx)
        self._batch = llama_cpp.llama_batch_init(params.n_batch, 0, 1)
        self._slots = [_Slot(seq_id) for seq_id in range(batch_size)]
        self._queue: deque[_Job] = deque()
        self._admitted = 0
        self._cond = threading.Condition()
        self._closing = False
        self._failure: BaseException | None = None
        self.stats = BatchStats(batch_size=batch_size)
        self._thread = threading.Thread(target=self._run, name="llama-batch", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ callers' side

    def fits(self, decoding: Decoding) -> bool:
        """Whether the request's prompt and its whole token budget fit in a slot."""
        return len(decoding.prompt_ids) + decoding.budget <= self.slot_ctx

    def submit(self, decoding: Decoding, cancel: threading.Event | None) -> Future:
        """Queue a request (one that :meth:`fits`); the future's result is its finished :class:`Decoding`."""
        future: Future = Future()
        with self._cond:
            if self._closing:
                reason = f": the batch scheduler failed ({self._failure!r})" if self._failure else ""
                raise EngineClosedError(f"engine is closed{reason}")
            self._queue.append(_Job(decoding, cancel, future, number=0))
            self.stats.queued = len(self._queue)
            self._cond.notify()
        return future

    def close(self) -> None:
        """Fail the queued requests, let the running ones finish, free the context."""
        with self._cond:
            self._closing = True
            self._fail_queued(EngineClosedError("engine closed before the request ran"))
            self._cond.notify_all()
        self._thread.join()  # bounded: every running request ends within its token budget
        llama_cpp.llama_batch_free(self._batch)
        llama_cpp.llama_free(self._ctx)
        self._ctx = None

    # ------------------------------------------------------------------ the scheduler thread

    def _run(self) -> None:
        try:
            while True:
                with self._cond:
                    while not self._queue and not self._busy() and not self._closing:
                        self._cond.wait(timeout=_IDLE_WAIT_S)
                    if self._closing and not self._busy():
                        return
                    self._admit()
                self._drop_cancelled()
                self._prefill_chunk()
                self._decode_step()
        except BaseException as exc:  # pragma: no cover - a llama.cpp or Python failure: fail every request
            with self._cond:
                self._closing = True
                self._failure = exc
                self._fail_queued(EngineClosedError(f"the batch scheduler failed: {exc!r}"))
            for slot in self._slots:
                if slot.job is not None:
                    _resolve(slot.job.future, error=exc)
                    slot.job = None

    def _busy(self) -> bool:
        return any(slot.job is not None for slot in self._slots)

    def _fail_queued(self, error: BaseException) -> None:
        while self._queue:
            job = self._queue.popleft()
            if job.future.set_running_or_notify_cancel():
                job.future.set_exception(error)
        self.stats.queued = 0

    def _admit(self) -> None:
        """Move queued requests into free slots (under the condition's lock)."""
        free = [slot for slot in self._slots if slot.job is None]
        while self._queue and free and not self._closing:
            job = self._queue.popleft()
            if not job.future.set_running_or_notify_cancel():
                continue  # its caller stopped waiting while it queued
            prompt = job.decoding.prompt_ids
            reuse = self._prefix_cache
            # The free slot whose cached prompt shares the longest prefix with this one.
            slot = max(free, key=lambda s: reusable_prefix(s.prompt_ids, prompt) if reuse else 0)
            free.remove(slot)
            common = reusable_prefix(slot.prompt_ids, prompt) if reuse else 0
            llama_cpp.llama_memory_seq_rm(self._memory, slot.seq_id, common, -1)
            slot.prompt_ids = slot.prompt_ids[:common]
            self._admitted += 1
            job.number = self._admitted
            job.decoding.cached = common
            job.chunks = prompt_chunks(prompt[common:], self._chunk)
            job.pos = common
            slot.job = job
        self.stats.queued = len(self._queue)
        self.stats.busy_slots = sum(slot.job is not None for slot in self._slots)

    def _drop_cancelled(self) -> None:
        for slot in self._slots:
            job = slot.job
            if job is not None and job.cancel is not None and job.cancel.is_set():
                self._finish(slot, GenerationCancelled("generation cancelled"))

    def _fill(
        self, tokens: Sequence[int], positions: Sequence[int], seq_ids: Sequence[int], outputs: Sequence[bool]
    ) -> None:
        batch = self._batch
        batch.n_tokens = len(tokens)
        for i, (token, pos, seq_id, output) in enumerate(zip(tokens, positions, seq_ids, outputs)):
            batch.token[i] = token
            batch.pos[i] = pos
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = seq_id
            batch.logits[i] = output

    def _logits(self, index: int) -> np.ndarray:
        ptr = llama_cpp.llama_get_logits_ith(self._ctx, index)
        return np.ctypeslib.as_array(ptr, shape=(self._n_vocab,))

    def _prefill_chunk(self) -> None:
        """Decode the next prompt chunk of the oldest request still reading its prompt, alone.

        Alone: a prompt chunk decoded beside other sequences' tokens would be split by llama.cpp
        into steps of equal tokens per sequence, not evaluated as the unbatched engine does.
        """
        waiting = [slot for slot in self._slots if slot.job is not None and slot.job.chunks]
        if not waiting:
            return
        slot = min(waiting, key=lambda s: s.job.number)
        job = slot.job
        if self._prefix_cache:
            self._share_prefix(slot)
        chunk = job.chunks.pop(0)
        last = not job.chunks
        self._fill(
            chunk,
            range(job.pos, job.pos + len(chunk)),
            [slot.seq_id] * len(chunk),
            [last and i == len(chunk) - 1 for i in range(len(chunk))],
        )
        status = llama_cpp.llama_decode(self._ctx, self._batch)
        if status != 0:
            self._finish(slot, RuntimeError(f"llama_decode failed with status {status} on a prompt chunk"))
            return
        self.stats.prompt_chunks += 1
        job.pos += len(chunk)
        slot.prompt_ids = job.decoding.prompt_ids[: job.pos]
        if last:
            self._advance(slot, self._logits(len(chunk) - 1))

    def _share_prefix(self, slot: _Slot) -> None:
        """Start ``slot``'s prompt from another slot's cells when they hold a longer prefix of it than
        its own: the repeats of a task (``gym collect --repeats``, a GRPO group) arrive together, and
        each would otherwise decode the same prompt in a stream of its own.

        llama.cpp copies a sequence across streams whole (cells and buffers, at the next decode);
        the cells past the shared prefix (the other request's own prompt or generated tokens) are
        removed at once. The copied cells are prompt cells decoded in chunks, as the slot's own
        would be, so results do not change."""
        job = slot.job
        prompt = job.decoding.prompt_ids
        best, donor = job.pos, None
        for other in self._slots:
            if other is not slot and other.prompt_ids:
                common = reusable_prefix(other.prompt_ids, prompt)
                if common > best:
                    best, donor = common, other
        if donor is None or best - job.pos < _SHARE_MIN_TOKENS:
            return
        llama_cpp.llama_memory_seq_cp(self._memory, donor.seq_id, slot.seq_id, -1, -1)
        llama_cpp.llama_memory_seq_rm(self._memory, slot.seq_id, best, -1)
        self.stats.shared_prompt_tokens += best - job.pos
        job.pos = job.decoding.cached = best
        job.chunks = prompt_chunks(prompt[best:], self._chunk)
        slot.prompt_ids = prompt[:best]

    def _decode_step(self) -> None:
        """One token for every request that has one, in one ``llama_decode``."""
        ready = [slot for slot in self._slots if slot.job is not None and slot.job.token is not None]
        if not ready:
            return
        jobs = [slot.job for slot in ready]
        self._fill(
            [job.token for job in jobs], [job.pos for job in jobs], [slot.seq_id for slot in ready], [True] * len(ready)
        )
        status = llama_cpp.llama_decode(self._ctx, self._batch)
        if status != 0:
            for slot in ready:
                self._finish(slot, RuntimeError(f"llama_decode failed with status {status}"))
            return
        stats = self.stats
        stats.steps += 1
        stats.tokens += len(ready)
        stats.max_sequences = max(stats.max_sequences, len(ready))
        for index, slot in enumerate(ready):
            slot.job.pos += 1
            slot.job.token = None
            self._advance(slot, self._logits(index))

    def _advance(self, slot: _Slot, logits: np.ndarray) -> None:
        job = slot.job
        if job.cancel is not None and job.cancel.is_set():
            self._finish(slot, GenerationCancelled("generation cancelled"))
            return
        token = job.decoding.step(logits)
        if token is None:
            self._finish(slot)
        else:
            job.token = token

    def _finish(self, slot: _Slot, error: BaseException | None = None) -> None:
        """Free the slot: keep its prompt cells (complete ones) for the prefix cache, drop the rest."""
        job, slot.job = slot.job, None
        if isinstance(error, RuntimeError):  # a failed decode may leave cells half-written
            slot.prompt_ids = []
        llama_cpp.llama_memory_seq_rm(self._memory, slot.seq_id, len(slot.prompt_ids), -1)
        self.stats.busy_slots = sum(s.job is not None for s in self._slots)
        if job is not None:
            _resolve(job.future, job.decoding, error)
