"""Registers the ``{{ cookiecutter.__plugin_name }}`` {{ cookiecutter.kind }} server through gym's hooks.

This module imports only gym_core and the config: `gym plugin list` loads it in every process that
lists plugins, so the server (and whatever heavy library it needs) is named by a string and imported
only by the process that runs it.
"""

from gym_core import hookimpl

from {{ cookiecutter.__module_name }}.config import {{ cookiecutter.__class_prefix }}Config


@hookimpl
def gym_register_servers(register):
    register(
        name="{{ cookiecutter.__plugin_name }}",
        kind="{{ cookiecutter.kind }}",
        server="{{ cookiecutter.__module_name }}.server:{{ cookiecutter.__server_class }}",
        config={{ cookiecutter.__class_prefix }}Config,
        description="{{ cookiecutter.description }}",
    )
