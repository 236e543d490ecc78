"""Registers the ``vllm_model`` model server through gym's hooks.

This module imports only gym_core and the config: `gym plugin list` loads it in every process that
lists plugins, so the server (and whatever heavy library it needs) is named by a string and imported
only by the process that runs it.
"""

from gym_core import hookimpl

from gym_vllm_model.config import VllmModelConfig


@hookimpl
def gym_register_servers(register):
    register(
        name="vllm_model",
        kind="model",
        server="gym_vllm_model.server:VllmModel",
        config=VllmModelConfig,
        description="vLLM OpenAI-compatible servers (one or more replicas, session-affine) with reasoning items and token ids for training",
    )
