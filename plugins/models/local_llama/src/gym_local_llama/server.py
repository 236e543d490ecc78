"""The ``local_llama`` model server: the embedded default model, no network, no GPU, no API key.

It implements ``/v1/chat/completions`` on :class:`~gym_local_llama.engine.LlamaEngine`;
``/v1/responses`` is derived by gym-core's converter. Generation runs on the engine's single
worker thread, so the event loop keeps serving (health checks, queued requests) while it works;
concurrent requests queue in arrival order.
"""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec
from litestar.exceptions import HTTPException

from gym_core import ModelServer
from gym_core.schemas import (
    ChatChoice,
    ChatCompletion,
    ChatCompletionRequest,
    ChatMessage,
    ChatToolCall,
    ChatToolCallFunction,
    ChatUsage,
    new_id,
)

from gym_local_llama.config import LocalLlamaConfig


def _given(value: Any, default: Any) -> Any:
    return default if value is None else value  # absent and null alike


class LocalLlamaModel(ModelServer):
    config: LocalLlamaConfig

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.engine: Any = None

    async def startup(self) -> None:
        from gym_local_llama.engine import LlamaEngine

        cfg = self.config
        self.engine = await asyncio.to_thread(
            LlamaEngine, cfg.model_path, n_ctx=cfg.n_ctx, n_threads=cfg.n_threads, seed=cfg.seed
        )
        self.model_name = self.engine.model_name
        self.log.info("loaded %s (%d threads)", self.engine.model_path.name, self.engine.n_threads)

    async def shutdown(self) -> None:
        if self.engine is not None:
            await self.engine.aclose()  # waits for a running generation: off the event loop

    async def chat_completions(self, request: ChatCompletionRequest) -> ChatCompletion:
        cfg = self.config
        stop = _given(request.stop, None)
        want_ids = request.return_token_ids is True
        want_logprobs = request.logprobs is True or want_ids
        try:
            generation = await self.engine.agenerate(
                msgspec.to_builtins(request.messages),
                tools=_given(request.tools, None),
                temperature=_given(request.temperature, cfg.temperature),
                top_p=_given(request.top_p, cfg.top_p),
                max_tokens=_given(request.max_completion_tokens, _given(request.max_tokens, cfg.max_tokens)),
                stop=[stop] if isinstance(stop, str) else stop,
                seed=_given(request.seed, None),
                return_token_ids=want_ids or want_logprobs,
                return_logprobs=want_logprobs,
            )
        except ValueError as exc:  # the engine's checks of the request (sampling values, content, prompt length)
            raise HTTPException(status_code=400, detail=f"{self.name}: {exc}") from exc
        message = ChatMessage(role="assistant", content=generation.text if generation.text or not generation.tool_calls else None)
        if generation.tool_calls:
            message.tool_calls = [
                ChatToolCall(id=new_id("call"), function=ChatToolCallFunction(name=c.name, arguments=c.arguments))
                for c in generation.tool_calls
            ]
        if want_ids:
            message.prompt_token_ids = generation.prompt_token_ids
            message.generation_token_ids = generation.generation_token_ids
            message.generation_log_probs = generation.generation_log_probs
        logprobs = None
        if request.logprobs is True and generation.generation_token_ids is not None:
            logprobs = {"content": self._logprob_entries(generation.generation_token_ids, generation.generation_log_probs)}
        return ChatCompletion(
            model=self.model_name,
            choices=[ChatChoice(index=0, message=message, finish_reason=generation.finish_reason, logprobs=logprobs)],
            usage=ChatUsage(
                prompt_tokens=generation.prompt_tokens,
                completion_tokens=generation.completion_tokens,
                total_tokens=generation.prompt_tokens + generation.completion_tokens,
            ),
        )

    def _logprob_entries(self, token_ids: list[int], logprobs: list[float] | None) -> list[dict[str, Any]]:
        entries = []
        for token_id, logprob in zip(token_ids, logprobs or [0.0] * len(token_ids)):
            piece = self.engine.llm.detokenize([token_id])
            entries.append(
                {"token": piece.decode("utf-8", errors="replace"), "logprob": logprob, "bytes": list(piece), "top_logprobs": []}
            )
        return entries
