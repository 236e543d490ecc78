"""Registers the ``genrm_model`` model server through gym's hooks.

This module imports only gym_core and the config: `gym plugin list` loads it in every process that
lists plugins, so the server is named by a string and imported only by the process that runs it.
"""

from gym_core import hookimpl

from gym_genrm_model.config import GenrmModelConfig


@hookimpl
def gym_register_servers(register):
    register(
        name="genrm_model",
        kind="model",
        server="gym_genrm_model.server:GenrmModel",
        config=GenrmModelConfig,
        description="A generative reward model comparing metadata.response_1 and response_2 (native GenRM roles "
        "or a text prompt), behind a gym model server or an OpenAI-compatible endpoint",
    )
