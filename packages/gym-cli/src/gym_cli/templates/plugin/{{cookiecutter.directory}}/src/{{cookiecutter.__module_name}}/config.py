"""Options of a ``{{ cookiecutter.__plugin_name }}`` server instance, validated when a config is loaded.

Kept apart from the server so that registering the plugin imports nothing heavy. Each option's
description (``Meta(description=...)``) is what `gym plugin show {{ cookiecutter.__plugin_name }}` prints.
"""

from __future__ import annotations

from typing import Annotated

from msgspec import Meta

from gym_core import {% if cookiecutter.kind == "agent" %}ModelRef, ResourcesRef, {% endif %}ServerConfig

__all__ = ["{{ cookiecutter.__class_prefix }}Config"]


class {{ cookiecutter.__class_prefix }}Config(ServerConfig, kw_only=True):
{%- if cookiecutter.kind == "model" %}
    prefix: Annotated[str, Meta(description="put before every reply (e.g. prefix: 'echo: ')")] = ""
    model_name: Annotated[str, Meta(description="the model's name in answers and GET /v1/models")] = "{{ cookiecutter.__plugin_name }}"
{%- elif cookiecutter.kind == "resources" %}
    ignore_case: Annotated[bool, Meta(description="compare the answer with expected_answer ignoring case")] = True
{%- else %}
    model_server: Annotated[ModelRef, Meta(description="the model server instance that plays the policy")]
    resources_server: Annotated[ResourcesRef, Meta(description="the environment: seeded, then verify scores the answer")]
{%- endif %}
