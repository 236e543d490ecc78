"""Options of a ``{{ cookiecutter.__plugin_name }}`` server instance, validated when a config is loaded.

Kept apart from the server so that registering the plugin imports nothing heavy.
"""

from __future__ import annotations

from gym_core import {% if cookiecutter.kind == "agent" %}ModelRef, ResourcesRef, {% endif %}ServerConfig


class {{ cookiecutter.__class_prefix }}Config(ServerConfig, kw_only=True):
{%- if cookiecutter.kind == "model" %}
    # Put before every reply (an example option: `policy: {plugin: {{ cookiecutter.__plugin_name }}, prefix: "echo: "}`).
    prefix: str = ""
    model_name: str = "{{ cookiecutter.__plugin_name }}"
{%- elif cookiecutter.kind == "resources" %}
    # Compare the answer with `expected_answer` ignoring case.
    ignore_case: bool = True
{%- else %}
    # Names of other server instances of the config; `gym run` checks they exist and have this kind.
    model_server: ModelRef
    resources_server: ResourcesRef
{%- endif %}
