"""Task rows for the kit: reading them, the responses and tool calls their ``conformance`` field
asks for, and example tool arguments from a JSON schema."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    pass


def read_rows(source: str | Path | Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Task rows from a JSONL file (blank lines skipped), or a sequence of rows as they are."""
    if isinstance(source, (str, Path)):
        lines = Path(source).read_text().splitlines()
        return [json.loads(line) for line in lines if line.strip()]
    return [dict(row) for row in source]


def assistant_response(text: str) -> dict[str, Any]:
    """A Responses API response whose output is one assistant message with ``text``."""
    content = [{"type": "output_text", "text": text, "annotations": []}]
    return {"output": [{"type": "message", "role": "assistant", "status": "completed", "content": content}]}


def _conformance(row: Mapping[str, Any]) -> Mapping[str, Any]:
    spec = row.get("conformance")
    if spec is None:
        return {}
    if not isinstance(spec, Mapping):
        raise TypeError(f"a row's 'conformance' field must be an object, got {type(spec).__name__}")
    return spec


def conformance_response(row: Mapping[str, Any]) -> dict[str, Any]:
    """The response to verify ``row`` with: its ``conformance.response`` (text, or a whole Responses
    object), else its ``expected_answer`` in ``\\boxed{}``, else an empty assistant message."""
    response = _conformance(row).get("response")
    if isinstance(response, Mapping):
        return dict(response)
    if isinstance(response, str):
        return assistant_response(response)
    if "expected_answer" in row:
        return assistant_response(f"The answer is \\boxed{{{row['expected_answer']}}}.")
    return assistant_response("")


def conformance_tool_calls(row: Mapping[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """``(name, arguments)`` of the row's ``conformance.tool_calls`` (none when absent)."""
    return [(call["name"], dict(call.get("arguments") or {})) for call in _conformance(row).get("tool_calls") or []]


def conformance_reward(row: Mapping[str, Any]) -> float | None:
    """The row's ``conformance.reward``, or None (any reward in range will do)."""
    reward = _conformance(row).get("reward")
    return None if reward is None else float(reward)


def example_arguments(schema: Mapping[str, Any]) -> dict[str, Any]:
    """A small object valid against a tool's ``parameters`` schema: its required properties, each
    with the first value its schema allows (``const``, ``enum``, ``default``, or one of its type)."""
    defs = schema.get("$defs", {})
    value = _example(schema, defs, depth=0)
    return value if isinstance(value, dict) else {}


def _example(schema: Any, defs: Mapping[str, Any], depth: int) -> Any:
    if not isinstance(schema, Mapping) or depth > 20:
        return None
    if "$ref" in schema:
        return _example(defs.get(schema["$ref"].rsplit("/", 1)[-1], {}), defs, depth + 1)
    for key in ("const", "default"):
        if key in schema:
            return schema[key]
    if schema.get("enum"):
        return schema["enum"][0]
    for key in ("anyOf", "oneOf", "allOf"):
        if schema.get(key):
            options = [s for s in schema[key] if not (isinstance(s, Mapping) and s.get("type") == "null")]
            return _example((options or schema[key])[0], defs, depth + 1)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object" or (kind is None and "properties" in schema):
        properties = schema.get("properties", {})
        return {name: _example(properties.get(name, {}), defs, depth + 1) for name in schema.get("required", [])}
    if kind == "array":
        return [_example(schema.get("items", {}), defs, depth + 1) for _ in range(schema.get("minItems", 0))]
    if kind == "string":
        return "a" * max(1, schema.get("minLength", 1))
    if kind in ("integer", "number"):
        low = schema.get("minimum", schema.get("exclusiveMinimum", 0) + (1 if "exclusiveMinimum" in schema else 0))
        value = max(low, 1) if "maximum" not in schema else min(max(low, 1), schema["maximum"])
        return int(math.ceil(value)) if kind == "integer" else float(value)
    if kind == "boolean":
        return True
    return None


def _wrong_type(schema: Mapping[str, Any]) -> Any:
    """A value of a type ``schema`` does not allow, or a sentinel ``...`` when it allows any."""
    kinds = schema.get("type")
    if kinds is None:
        return ...
    kinds = set(kinds) if isinstance(kinds, list) else {kinds}
    if "object" not in kinds:
        return {"not": "of this type"}
    if "array" not in kinds:
        return ["not", "of this type"]
    return ...


# --- the kit --------------------------------------------------------------------------------------
