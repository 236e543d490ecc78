"""Registers the ``openai_model`` model server type through gym's hooks.

The server is named by its ``"module:Class"`` path, so listing plugins imports no server code.
"""

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
