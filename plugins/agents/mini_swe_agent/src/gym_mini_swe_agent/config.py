"""Options of a ``mini_swe_agent`` server instance, validated when a config is loaded.

Kept apart from the server so that registering the plugin imports nothing heavy (the harness and
litellm are imported only by the process that runs the server). Each option's description
(``Meta(description=...)``) is what `gym plugin show mini_swe_agent` prints.
"""

from __future__ import annotations

from typing import Annotated

from msgspec import Meta

from gym_core import ModelRef, ResourcesRef, ServerConfig

__all__ = ["MiniSweAgentConfig"]


class MiniSweAgentConfig(ServerConfig, kw_only=True):
    model_server: Annotated[
        ModelRef, Meta(description="the model server instance the harness calls, through the capturing proxy")
    ]
    resources_server: Annotated[
        ResourcesRef,
        Meta(description="the environment: seeded, its command tool runs the harness's commands, then verify"),
    ]
    step_limit: Annotated[
        int, Meta(ge=1, description="most model calls of the harness in one rollout (its step_limit)")
    ] = 20
    harness_timeout_s: Annotated[
        float,
        Meta(gt=0, description="wall time of the harness's whole run; past it the rollout fails (harness_timeout)"),
    ] = 600.0
    call_timeout_s: Annotated[
        float, Meta(gt=0, description="wall time of one model call or one command the harness makes, s")
    ] = 300.0
    command_tool: Annotated[str, Meta(description="the environment's tool that runs a shell command")] = "run_command"
    command_argument: Annotated[str, Meta(description="the name of that tool's command argument")] = "command"
    require_token_ids: Annotated[
        bool,
        Meta(
            description="fail the rollout when a model call returns no token ids (true), or record the calls "
            "without them (false)"
        ),
    ] = True
    harness_config: Annotated[
        str,
        Meta(
            description="the harness's own config (a file of mini-swe-agent's config directory, or a path) whose "
            "agent templates and model settings are used"
        ),
    ] = "mini_textbased.yaml"
