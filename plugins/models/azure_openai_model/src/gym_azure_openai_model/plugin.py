"""Registers the ``azure_openai_model`` model server through gym's hooks.

This module imports only gym_core and the config: `gym plugin list` loads it in every process that
lists plugins, so the server is named by a string and imported only by the process that runs it.
"""

from gym_core import hookimpl

from gym_azure_openai_model.config import AzureOpenAIModelConfig


@hookimpl
def gym_register_servers(register):
    register(
        name="azure_openai_model",
        kind="model",
        server="gym_azure_openai_model.server:AzureOpenAIModel",
        config=AzureOpenAIModelConfig,
        description="An Azure OpenAI deployment (chat completions, api-key header) behind gym's model API",
    )
