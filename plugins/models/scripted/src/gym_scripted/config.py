"""Options of the ``scripted`` model server (light: imported when plugins are listed)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

from gym_core import ServerConfig

__all__ = ["ScriptedModelConfig", "ScriptedTurn", "ScriptedToolCall"]


class ScriptedToolCall(msgspec.Struct, forbid_unknown_fields=True):
    name: str
    arguments: dict[str, Any] = msgspec.field(default_factory=dict)


class ScriptedTurn(msgspec.Struct, forbid_unknown_fields=True):
    text: str | None = None
    tool_calls: list[ScriptedToolCall] = msgspec.field(default_factory=list)


class ScriptedModelConfig(ServerConfig, kw_only=True):
    turns: Annotated[
        list[ScriptedTurn],
        Meta(description="the script: one turn per model call, {text: ...} and/or {tool_calls: [{name, arguments}]}"),
    ] = msgspec.field(default_factory=lambda: [ScriptedTurn(text="Hello from the scripted model.")])
    after_last: Annotated[
        Literal["last", "cycle"], Meta(description="after the last turn: repeat it (last) or start again (cycle)")
    ] = "last"
    delay_s: Annotated[float, Meta(ge=0, description="wait this long before each answer (simulates a slow model)")] = 0.0
    model_name: Annotated[str, Meta(description="the model name in answers and /v1/models")] = "scripted"
