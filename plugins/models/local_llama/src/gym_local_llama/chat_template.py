"""SmolLM2's chat template: OpenAI chat messages and tools rendered as a ChatML prompt.

Prompt format (ChatML, rendered by :func:`render_prompt`)
---------------------------------------------------------
Every turn is ``<|im_start|>{role}\\n{content}<|im_end|>\\n`` and the prompt
always ends with the generation header ``<|im_start|>assistant\\n``.

* System turn: the first message, if its role is ``system`` or ``developer``,
  supplies the system text; otherwise SmolLM2's own default system prompt
  (:data:`DEFAULT_SYSTEM_PROMPT`, the one in the model's chat template) is
  used.  When ``tools`` are given, a tools section (see
  :func:`render_tools_section`) is appended to the system text after a blank
  line.  Later ``system``/``developer`` messages become ``system`` turns in place.
* ``user`` messages: ``user`` turns with their text.
* ``assistant`` messages: their text, then one line per tool call, each
  ``<tool_call>{"name": NAME, "arguments": {...}}</tool_call>`` (the same
  markup the model is asked to produce), lines joined with ``\\n``.
* ``tool`` messages (and legacy ``function`` messages): a run of consecutive
  tool results becomes ONE ``user`` turn holding, per result,
  ``<tool_response>\\n{content}\\n</tool_response>`` (joined with ``\\n``).
  The 135M model only knows the system/user/assistant roles.
* Message content may be a string, ``None`` or a list of OpenAI content parts
  (the ``text`` of text parts is concatenated).

The tools section is::

    # Tools
    You can call these tools (JSON: name, description, JSON-schema parameters):
    {"name": "get_weather", "description": "...", "parameters": {...}}
    To call a tool, answer with one line per call, exactly like this:
    <tool_call>{"name": "tool_name", "arguments": {"argument_name": "value"}}</tool_call>
    Tool results are sent back inside <tool_response></tool_response>.

After an earlier model turn (the engine's token history), :func:`render_continuation` renders only
the new messages, to be tokenized on their own and appended to that turn's token ids.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

__all__ = [
    "DEFAULT_SYSTEM_PROMPT",
    "IM_END",
    "IM_START",
    "TOOL_CALL_CLOSE",
    "TOOL_CALL_OPEN",
    "TOOL_RESPONSE_CLOSE",
    "TOOL_RESPONSE_OPEN",
    "render_continuation",
    "render_prompt",
    "render_tools_section",
    "tool_names",
]

DEFAULT_SYSTEM_PROMPT = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"

IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
TOOL_CALL_OPEN = "<tool_call>"
TOOL_CALL_CLOSE = "</tool_call>"
TOOL_RESPONSE_OPEN = "<tool_response>"
TOOL_RESPONSE_CLOSE = "</tool_response>"

_SYSTEM_ROLES = frozenset({"system", "developer"})
_TOOL_ROLES = frozenset({"tool", "function"})


def _content_text(content: Any) -> str:
    """Text of an OpenAI message ``content`` (string, None or list of parts)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts: list[str] = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, dict):
                if part.get("type", "text") in ("text", "input_text", "output_text"):
                    parts.append(str(part.get("text", "")))
                else:
                    raise ValueError(f"unsupported content part type {part.get('type')!r}")
            else:
                raise ValueError(f"unsupported content part {part!r}")
        return "".join(parts)
    raise ValueError(f"unsupported message content {content!r}")


def _tool_function(tool: dict) -> dict:
    """The ``function`` object of an OpenAI tool dict (bare function dicts accepted)."""
    if not isinstance(tool, dict):
        raise ValueError(f"tool must be an object, got {tool!r}")
    if "function" in tool:
        if tool.get("type", "function") != "function":
            raise ValueError(f"unsupported tool type {tool.get('type')!r}")
        fn = tool["function"]
    else:
        fn = tool
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
        raise ValueError(f"tool has no function name: {tool!r}")
    return fn


def tool_names(tools: Iterable[dict] | None) -> set[str]:
    return {_tool_function(t)["name"] for t in tools or []}


def render_tools_section(tools: Sequence[dict]) -> str:
    """The tools section appended to the system text (see module docstring)."""
    lines = [
        "# Tools",
        "You can call these tools (JSON: name, description, JSON-schema parameters):",
    ]
    for tool in tools:
        fn = _tool_function(tool)
        spec: dict[str, Any] = {"name": fn["name"]}
        if fn.get("description"):
            spec["description"] = fn["description"]
        spec["parameters"] = fn.get("parameters") or {"type": "object", "properties": {}}
        lines.append(json.dumps(spec, ensure_ascii=False))
    lines += [
        "To call a tool, answer with one line per call, exactly like this:",
        TOOL_CALL_OPEN + '{"name": "tool_name", "arguments": {"argument_name": "value"}}' + TOOL_CALL_CLOSE,
        f"Tool results are sent back inside {TOOL_RESPONSE_OPEN}{TOOL_RESPONSE_CLOSE}.",
    ]
    return "\n".join(lines)


def _render_tool_call(call: dict) -> str:
    fn = call.get("function", call) if isinstance(call, dict) else None
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
        raise ValueError(f"malformed assistant tool call {call!r}")
    args: Any = fn.get("arguments")
    if args is None or args == "":
        args = {}
    elif isinstance(args, str):
        try:
            args = json.loads(args)
        except json.JSONDecodeError:
            pass  # keep the raw text, rendered as a JSON string
    payload = json.dumps({"name": fn["name"], "arguments": args}, ensure_ascii=False)
    return f"{TOOL_CALL_OPEN}{payload}{TOOL_CALL_CLOSE}"


def _turn(role: str, text: str) -> str:
    return f"{IM_START}{role}\n{text}{IM_END}\n"


def render_prompt(
    messages: Sequence[dict],
    tools: Sequence[dict] | None = None,
    *,
    default_system_prompt: str | None = DEFAULT_SYSTEM_PROMPT,
) -> str:
    """Render OpenAI chat messages (+ tools) as a ChatML prompt ending in the assistant header."""
    if not messages:
        raise ValueError("messages must not be empty")
    msgs = list(messages)
    for m in msgs:
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise ValueError(f"malformed message {m!r}")

    if msgs[0]["role"] in _SYSTEM_ROLES:
        system_text: str | None = _content_text(msgs[0].get("content"))
        msgs = msgs[1:]
    else:
        system_text = default_system_prompt
    if tools:
        section = render_tools_section(tools)
        system_text = f"{system_text}\n\n{section}" if system_text else section

    out: list[str] = []
    if system_text is not None:
        out.append(_turn("system", system_text))
    out.append(_render_turns(msgs))
    out.append(f"{IM_START}assistant\n")
    return "".join(out)


def _render_turns(msgs: Sequence[dict]) -> str:
    """The ChatML turns of ``msgs`` (no system prompt, no generation header)."""
    out: list[str] = []
    pending_results: list[str] = []

    def flush_results() -> None:
        if pending_results:
            out.append(_turn("user", "\n".join(pending_results)))
            pending_results.clear()

    for m in msgs:
        role = m["role"]
        if role in _TOOL_ROLES:
            text = _content_text(m.get("content"))
            pending_results.append(f"{TOOL_RESPONSE_OPEN}\n{text}\n{TOOL_RESPONSE_CLOSE}")
            continue
        flush_results()
        if role in _SYSTEM_ROLES:
            out.append(_turn("system", _content_text(m.get("content"))))
        elif role == "user":
            out.append(_turn("user", _content_text(m.get("content"))))
        elif role == "assistant":
            pieces = []
            text = _content_text(m.get("content"))
            if text:
                pieces.append(text)
            pieces += [_render_tool_call(c) for c in m.get("tool_calls") or []]
            out.append(_turn("assistant", "\n".join(pieces)))
        else:
            raise ValueError(f"unsupported message role {role!r}")
    flush_results()
    return "".join(out)


def render_continuation(messages: Sequence[dict], *, close_assistant_turn: bool) -> str:
    """The text that follows an earlier model turn's tokens: the new ``messages`` as ChatML turns, then
    the generation header.

    ``close_assistant_turn``: the earlier generation did not end with the end-of-turn token (it hit
    ``max_tokens`` or a stop string), so ``<|im_end|>`` closes it first. After ``<|im_end|>`` comes the
    newline that ends every turn. ``messages`` may be empty (the model continues after its own turn).
    """
    for m in messages:
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise ValueError(f"malformed message {m!r}")
    head = f"{IM_END}\n" if close_assistant_turn else "\n"
    return f"{head}{_render_turns(messages)}{IM_START}assistant\n"
