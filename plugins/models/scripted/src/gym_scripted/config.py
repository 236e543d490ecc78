"""Options of the ``scripted`` model server (light: imported when plugins are listed)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

from gym_core import ServerConfig

__all__ = ["ScriptedModelConfig", "ScriptedTurn", "ScriptedToolCall", "ScriptedRule"]


class ScriptedToolCall(msgspec.Struct, forbid_unknown_fields=True):
    name: str
    arguments: dict[str, Any] = msgspec.field(default_factory=dict)


class ScriptedTurn(msgspec.Struct, forbid_unknown_fields=True):
    text: str | None = None
    tool_calls: list[ScriptedToolCall] = msgspec.field(default_factory=list)


class ScriptedRule(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """A reply chosen by the request's content: for judges, graders, and failure drills."""

    match: str  # a regular expression, searched in the text of the request's input messages
    text: str | None = None
    tool_calls: list[ScriptedToolCall] = msgspec.field(default_factory=list)
    error_status: Annotated[int, Meta(ge=400, le=599)] | None = None  # answer this HTTP error instead
    # text is a template over the match's groups (\1, \g<name>: re.Match.expand), e.g. a judge that
    # quotes the candidate answer before it rules, as LLM judges often do
    expand: bool = False


class ScriptedModelConfig(ServerConfig, kw_only=True):
    turns: Annotated[
        list[ScriptedTurn],
        Meta(description="the script: one turn per model call, {text: ...} and/or {tool_calls: [{name, arguments}]}"),
    ] = msgspec.field(default_factory=lambda: [ScriptedTurn(text="Hello from the scripted model.")])
    rules: Annotated[
        list[ScriptedRule],
        Meta(
            description="replies chosen by content, tried before the script: the first rule whose regex 'match' "
            "occurs in the input messages' text (joined by newlines) answers {text, tool_calls}, or the HTTP error "
            "error_status; with expand: true, text may quote the match's groups (\\1, \\g<name>)"
        ),
    ] = msgspec.field(default_factory=list)
    after_last: Annotated[
        Literal["last", "cycle"], Meta(description="after the last turn: repeat it (last) or start again (cycle)")
    ] = "last"
    delay_s: Annotated[float, Meta(ge=0, description="wait this long before each answer (simulates a slow model)")] = (
        0.0
    )
    model_name: Annotated[str, Meta(description="the model name in answers and /v1/models")] = "scripted"

    def __post_init__(self) -> None:
        import re

        for i, rule in enumerate(self.rules):
            try:
                pattern = re.compile(rule.match)
            except re.error as exc:
                raise ValueError(f"rules[{i}].match is not a valid regular expression: {exc}") from None
            if rule.expand and rule.text is not None:
                for number, name in re.findall(r"\\(\d+)|\\g<(\w+)>", rule.text):
                    group = int(number or name) if (number or name).isdigit() else name
                    known = group <= pattern.groups if isinstance(group, int) else group in pattern.groupindex
                    if not known:
                        raise ValueError(
                            f"rules[{i}].text quotes group {group!r}, which rules[{i}].match does not have"
                        )
