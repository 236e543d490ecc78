"""Registers the ``local_vllm_model`` model server through gym's hooks.

This module imports only gym_core and the config: `gym plugin list` loads it in every process that
lists plugins, so the server (and Ray) is named by a string and imported only by the process that runs it.
"""

from gym_core import hookimpl

from gym_local_vllm.config import LocalVllmModelConfig


@hookimpl
def gym_register_servers(register):
    register(
        name="local_vllm_model",
        kind="model",
        server="gym_local_vllm.server:LocalVllmModel",
        config=LocalVllmModelConfig,
        description="vLLM launched by gym on Ray (a placement group per data-parallel engine, tensor/pipeline"
        " parallel inside), served through vllm_model with session-affine routing across the engines",
        needs_ray=True,
    )
