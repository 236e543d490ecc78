"""Registers the ``openai_model`` model server through gym's hooks."""

from gym_core import hookimpl

from gym_openai_model.config import OpenAIModelConfig


@hookimpl
def gym_register_servers(register):
    register(
        name="openai_model",
        kind="model",
        server="gym_openai_model.server:OpenAIModel",
        config=OpenAIModelConfig,
        description="Any OpenAI-compatible endpoint (vLLM, llama.cpp, SGLang, OpenAI...) behind gym's model API",
    )
