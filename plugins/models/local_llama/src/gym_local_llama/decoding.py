"""One request's decoding, the same on the unbatched and the batched context: its sampler state, the
checks that end it, its :class:`Generation`; and the rules both contexts follow to reuse KV cells.

Generation, token ids and logprobs
----------------------------------
* ``generation_token_ids`` are exactly the sampled tokens, *including* the
  terminating end-of-generation token (``<|im_end|>``, ``<|endoftext|>`` ...)
  when generation ended on one, and including the token that completed a
  ``stop`` string.  ``completion_tokens == len(generation_token_ids)``.
* ``text`` is the detokenized output without the end-of-generation token
  (special tokens render as nothing, so ``llm.detokenize(ids)`` equals the
  raw text) and truncated before the first ``stop`` string.  Tool-call markup
  is then removed (:mod:`gym_local_llama.tool_calls`).
* ``generation_log_probs[i]`` is the log-probability of token ``i`` under the
  model's *raw* next-token distribution (log-softmax of the logits, before
  temperature and top-p) -- the usual convention for RL importance ratios.
* ``generation_top_logprobs[i]`` (with ``top_logprobs`` > 0): the ``top_logprobs`` most likely
  tokens at step ``i`` under that raw distribution, as ``(token id, log-prob)``, most likely first.
* With a grammar (:mod:`gym_local_llama.grammar`) tokens are sampled from the masked logits; the
  reported log-probs are still the raw distribution's.
* ``finish_reason``: ``"tool_calls"`` if any call parsed, else ``"stop"``
  (end-of-generation token or stop string), else ``"length"`` (``max_tokens``
  reached, or the context window is full).

Text as it is decoded
---------------------
With ``on_text`` set, :meth:`Decoding.step` passes it each piece of the reply's text once it is
settled, on the thread that decodes: the bytes decoded so far, less the last ``len(longest stop) - 1``
(a stop string may yet begin there), decoded incrementally (a character whose bytes span tokens
waits for its last byte; invalid bytes become U+FFFD as in ``text``). The pieces concatenated are
thus always a prefix of the raw reply (before tool-call parsing); the step that ends the generation
passes nothing (the caller takes the rest from ``text``).
"""

from __future__ import annotations

import codecs
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from gym_local_llama.grammar import GrammarConstraint
from gym_local_llama.sampling import log_softmax_at, sample, top_log_probs
from gym_local_llama.tool_calls import GeneratedToolCall, parse_tool_calls

__all__ = ["Decoding", "Generation", "prompt_chunks", "reusable_prefix"]


@dataclass
class Generation:
    text: str
    tool_calls: list[GeneratedToolCall] = field(default_factory=list)
    finish_reason: str = "stop"  # "stop" | "length" | "tool_calls"
    prompt_tokens: int = 0
    completion_tokens: int = 0
    prompt_token_ids: list[int] | None = None
    generation_token_ids: list[int] | None = None
    generation_log_probs: list[float] | None = None
    generation_top_logprobs: list[list[tuple[int, float]]] | None = None
    cached_prompt_tokens: int = 0  # prompt tokens served from the prefix cache


def prompt_chunks(tokens: list[int], size: int) -> list[list[int]]:
    """``tokens`` in chunks of at most ``size``, none of them a lone token (see ``gym_local_llama.engine.LlamaEngine._prefill``)."""
    chunks = [tokens[i : i + size] for i in range(0, len(tokens), size)]
    if len(chunks) > 1 and len(chunks[-1]) == 1:
        chunks[-2], chunks[-1] = chunks[-2][:-1], chunks[-2][-1:] + chunks[-1]
    return chunks


def reusable_prefix(cached: Sequence[int], prompt_ids: list[int]) -> int:
    """How many KV cells of ``cached`` (prompt tokens decoded in batches) ``prompt_ids`` can reuse:
    their common prefix, leaving at least the last two prompt tokens to evaluate again."""
    n = min(len(cached), len(prompt_ids))
    if n == 0:
        return 0
    old = np.asarray(cached[:n])
    diff = np.nonzero(old != np.asarray(prompt_ids[:n], dtype=old.dtype))[0]
    common = int(diff[0]) if diff.size else n
    return max(0, min(common, len(prompt_ids) - 2))


class Decoding:
    """One request's generation: its sampler, the tokens so far and the checks that end it.

    The unbatched engine and the batch scheduler drive it alike: :meth:`step` with the logits after the prompt, then after each
    token it returned was evaluated; it returns the next token to evaluate, or None when done.
    """

    def __init__(
        self,
        prompt_ids: list[int],
        *,
        n_ctx: int,
        eog_token_ids: frozenset[int],
        detokenize: Callable[[list[int]], bytes],
        tools: list[dict] | None,
        temperature: float,
        top_p: float,
        max_tokens: int,
        stop_bytes: list[bytes],
        rng: np.random.Generator,
        return_token_ids: bool,
        return_logprobs: bool,
        top_logprobs: int = 0,
        grammar: GrammarConstraint | None = None,
    ) -> None:
        self.prompt_ids = prompt_ids
        self.grammar = grammar
        self.top_logprobs = top_logprobs
        self.top: list[list[tuple[int, float]]] = []
        self.tools = tools
        self.temperature = temperature
        self.top_p = top_p
        self.rng = rng
        self.budget = min(int(max_tokens), n_ctx - len(prompt_ids))
        self.stop_bytes = stop_bytes
        self.max_stop = max((len(s) for s in stop_bytes), default=0)
        self.return_token_ids = return_token_ids
        self.return_logprobs = return_logprobs
        self.eog = eog_token_ids
        self.detokenize = detokenize
        self.out_ids: list[int] = []
        self.logprobs: list[float] = []
        self.buf = bytearray()
        self.cut: int | None = None
        self.finish = "length"
        self.cached = 0  # prompt tokens whose KV cells were reused
        self.on_text: Callable[[str], None] | None = None  # settled text, piece by piece (module docstring)
        self._text_decoder: codecs.IncrementalDecoder | None = None
        self._settled = 0  # bytes of buf passed to the text decoder

    def step(self, logits: np.ndarray) -> int | None:
        """Sample the next token from ``logits``; the token to evaluate next, or None when finished."""
        scores = logits if self.grammar is None else self.grammar.mask(logits)
        token = sample(scores, self.temperature, self.top_p, self.rng)
        if self.return_logprobs:
            self.logprobs.append(log_softmax_at(logits, token))
        if self.top_logprobs:
            self.top.append(top_log_probs(logits, self.top_logprobs))
        self.out_ids.append(token)
        if token in self.eog:
            self.finish = "stop"
            return None
        if self.grammar is not None:
            self.grammar.accept(token)
        start = max(0, len(self.buf) - self.max_stop + 1)
        self.buf += self.detokenize([token])
        if self.stop_bytes:
            hits = [i for i in (self.buf.find(s, start) for s in self.stop_bytes) if i >= 0]
            if hits:
                self.cut = min(hits)
                self.finish = "stop"
                return None
        if len(self.out_ids) >= self.budget:
            return None
        if self.on_text is not None:
            self._pass_text()
        return token

    def _pass_text(self) -> None:
        """Pass ``on_text`` the text settled since the last call (none that a stop string may cut)."""
        settled = len(self.buf) - self.max_stop + 1 if self.max_stop else len(self.buf)
        if settled <= self._settled:
            return
        if self._text_decoder is None:
            self._text_decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        text = self._text_decoder.decode(bytes(self.buf[self._settled : settled]))
        self._settled = settled
        if text and self.on_text is not None:
            self.on_text(text)

    def generation(self) -> Generation:
        if self.grammar is not None:
            self.grammar.close()
        raw = bytes(self.buf if self.cut is None else self.buf[: self.cut]).decode("utf-8", errors="replace")
        text, calls = parse_tool_calls(raw, self.tools)
        return Generation(
            text=text,
            tool_calls=calls,
            finish_reason="tool_calls" if calls else self.finish,
            prompt_tokens=len(self.prompt_ids),
            completion_tokens=len(self.out_ids),
            prompt_token_ids=list(self.prompt_ids) if self.return_token_ids else None,
            generation_token_ids=self.out_ids if self.return_token_ids else None,
            generation_log_probs=self.logprobs if self.return_logprobs else None,
            generation_top_logprobs=self.top if self.top_logprobs else None,
            cached_prompt_tokens=self.cached,
        )
