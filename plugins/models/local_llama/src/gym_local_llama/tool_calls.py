"""Tool calls parsed out of the model's reply (the ``<tool_call>`` markup the chat template asks for).

Tool-call parsing (:func:`parse_tool_calls`)
--------------------------------------------
* Every ``<tool_call>JSON</tool_call>`` whose JSON is an object with a string
  ``name`` and an object (or JSON-object text) ``arguments`` -- or
  ``parameters`` -- becomes a :class:`GeneratedToolCall`; a missing
  arguments key means ``{}``.  Markdown code fences around the JSON are
  tolerated.  The arguments are re-serialized as compact JSON object text.
* A final ``<tool_call>`` that was never closed (the model stopped right after
  the JSON) is accepted when the rest of the text is such an object.
* A JSON *list* of such objects inside one tag gives several calls.
* Anything malformed stays in the text verbatim.
* Only when ``tools`` were given and no tagged call was found: a reply that is
  nothing but a JSON object (or list of objects) of that shape whose name(s)
  are among the given tools is taken as tool call(s).
* Parsed markup is removed from the text; when any call was parsed the rest
  of the text is stripped and ``finish_reason`` is ``"tool_calls"``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gym_local_llama.chat_template import TOOL_CALL_CLOSE, TOOL_CALL_OPEN, tool_names

__all__ = ["GeneratedToolCall", "parse_tool_calls", "settled_text"]


@dataclass
class GeneratedToolCall:
    name: str
    arguments: str  # JSON object text (compact)


_TOOL_CALL_RE = re.compile(re.escape(TOOL_CALL_OPEN) + r"(.*?)" + re.escape(TOOL_CALL_CLOSE), re.DOTALL)
_FENCE_RE = re.compile(r"^```[A-Za-z0-9_-]*\s*\n?(.*?)\n?\s*```$", re.DOTALL)


def _load_json(text: str) -> Any:
    text = text.strip()
    fenced = _FENCE_RE.match(text)
    if fenced:
        text = fenced.group(1).strip()
    try:
        return json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        return None


def _call_from_object(obj: Any) -> GeneratedToolCall | None:
    """A tool call from ``{"name": ..., "arguments"|"parameters": {...}}``, else None."""
    if not isinstance(obj, dict):
        return None
    if isinstance(obj.get("function"), dict) and "name" not in obj:  # OpenAI-shaped
        obj = obj["function"]
    name = obj.get("name")
    if not isinstance(name, str) or not name.strip():
        return None
    if "arguments" in obj:
        args = obj["arguments"]
    else:
        args = obj.get("parameters")
    if args is None:
        args = {}
    elif isinstance(args, str):
        args = _load_json(args) if args.strip() else {}
    if not isinstance(args, dict):
        return None
    return GeneratedToolCall(name=name.strip(), arguments=json.dumps(args, ensure_ascii=False, separators=(",", ":")))


def _calls_from_json(obj: Any) -> list[GeneratedToolCall] | None:
    """Calls from one call object or a non-empty list of them; None if anything is off."""
    objs = obj if isinstance(obj, list) and obj else [obj]
    calls = [_call_from_object(o) for o in objs]
    if any(c is None for c in calls):
        return None
    return [c for c in calls if c is not None]


def parse_tool_calls(text: str, tools: Sequence[dict] | None = None) -> tuple[str, list[GeneratedToolCall]]:
    """Split model output into (remaining text, tool calls). See the module docstring."""
    calls: list[GeneratedToolCall] = []
    kept: list[str] = []
    pos = 0
    for match in _TOOL_CALL_RE.finditer(text):
        found = _calls_from_json(_load_json(match.group(1)))
        if found is not None:
            kept.append(text[pos : match.start()])
            calls += found
            pos = match.end()
    kept.append(text[pos:])
    rest = "".join(kept)

    # A last <tool_call> that was never closed.
    start = rest.rfind(TOOL_CALL_OPEN)
    if start >= 0 and TOOL_CALL_CLOSE not in rest[start:]:
        found = _calls_from_json(_load_json(rest[start + len(TOOL_CALL_OPEN) :]))
        if found is not None:
            calls += found
            rest = rest[:start]

    # Bare JSON reply naming one of the given tools.
    if not calls and tools:
        names = tool_names(tools)
        found = _calls_from_json(_load_json(rest))
        if found and all(c.name in names for c in found):
            calls = found
            rest = ""

    if calls:
        rest = rest.strip()
    return rest, calls


def settled_text(raw: str, tools: Sequence[dict] | None = None) -> str:
    """The part of ``raw`` (the reply so far, before parsing) that :func:`parse_tool_calls` of any
    continuation of it keeps, unchanged, at the start of its text: what may be streamed now.

    Nothing while the reply begins with whitespace (stripped if a call is parsed later) or, with
    ``tools``, with ``{``, ``[`` or a code fence (it may be a bare JSON call); else the text before
    the first ``<tool_call>`` (or before a tail that may become one), less trailing whitespace
    (stripped if a call follows). Each result begins the results for longer ``raw``.
    """
    if not raw or raw[0].isspace() or (tools and raw.lstrip().startswith(("{", "[", "`"))):
        return ""
    end = raw.find(TOOL_CALL_OPEN)
    if end < 0:
        end = len(raw)
        for start in range(max(0, len(raw) - len(TOOL_CALL_OPEN) + 1), len(raw)):
            if TOOL_CALL_OPEN.startswith(raw[start:]):
                end = start
                break
    return raw[:end].rstrip()
