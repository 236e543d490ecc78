"""Checking a model's structured output (JSON, YAML, XML, TOML, CSV, or a tool call's arguments)
against a JSON Schema.

Public API:

- :func:`strict_schema` — a copy of a schema where every object with ``properties`` requires all of
  them and allows no others;
- :func:`parse_document` — text → data by format (``json``, ``yaml``, ``xml``, ``toml``, ``csv``);
- :func:`coerce_xml`, :func:`coerce_csv` — string leaves converted to the types the schema declares;
- :func:`check_text` — the whole text-mode check (parse, coerce, validate) → :class:`Verdict`;
- :func:`check_tool_arguments` — the tool-call-mode check of one call's arguments → :class:`Verdict`;
- :func:`make_checker_pool` — the :class:`~gym_core.workers.WorkerPool` the server runs the two
  checks in, under a time and memory limit (hostile documents: deep nesting, YAML alias bombs,
  schemas with catastrophic ``pattern`` regexes).

A :class:`Verdict` has ``error_type`` None when the output is valid, else one of the codes in
:data:`ERROR_TYPES`; ``error_message`` says why, in at most :data:`MAX_MESSAGE_CHARS` characters.

The functions here take plain strings and return plain data, so that they can run in a worker
process. They never raise on bad input: a bad document or schema is a verdict.
"""

from __future__ import annotations

import copy
import csv
import functools
import io
import json
import os
from dataclasses import dataclass
from typing import Any

from gym_core.workers import WorkerPool

__all__ = [
    "ERROR_TYPES",
    "FORMATS",
    "MAX_MESSAGE_CHARS",
    "Verdict",
    "strict_schema",
    "parse_document",
    "coerce_xml",
    "coerce_csv",
    "check_text",
    "check_tool_arguments",
    "make_checker_pool",
]

FORMATS = ("json", "yaml", "xml", "toml", "csv")

ERROR_TYPES = (
    # the spec's codes
    "schema_error",
    "empty_response",
    "parse_error",
    "validation_error",
    "api_error",
    "missing_tool_call",
    "multiple_tool_calls",
    "wrong_tool_name",
    "tool_arguments_parse_error",
    "missing_tool_payload_key",
    # ours: the check itself did not finish (a pathological document)
    "timeout",
    "memory_limit",
    "verifier_error",
)

MAX_MESSAGE_CHARS = 200


@dataclass(frozen=True)
class Verdict:
    """The outcome of a check: valid when ``error_type`` is None."""

    error_type: str | None = None
    error_message: str | None = None

    @property
    def valid(self) -> bool:
        return self.error_type is None

    @classmethod
    def error(cls, error_type: str, message: str) -> Verdict:
        return cls(error_type, message[:MAX_MESSAGE_CHARS])


VALID = Verdict()


# --------------------------------------------------------------------------------------------
# Schema
# --------------------------------------------------------------------------------------------


def strict_schema(schema: Any) -> Any:
    """A deep copy of ``schema`` where every object (at any depth, ``$defs`` and combinators
    included) that has a ``properties`` mapping gets ``required`` = all its property names and
    ``additionalProperties: false``. Optional properties thus become mandatory; a nullable type
    (``["string", "null"]``) still accepts null.

    The walk is deliberately blind to what a key means, as the reference's is: a property *named*
    ``properties`` is treated like the keyword.
    """
    schema = copy.deepcopy(schema)
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if isinstance(node.get("properties"), dict):
                node["required"] = list(node["properties"])
                node["additionalProperties"] = False
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return schema


@dataclass(frozen=True)
class _Schema:
    raw: Any = None  # the schema as written (coercion reads its types)
    validator: Any = None  # a Draft 2020-12 validator of its strict form
    error: str | None = None  # why it is unusable


@functools.lru_cache(maxsize=256)
def _compile(schema_str: str) -> _Schema:
    """Parse, make strict and check a schema once per worker (datasets repeat schemas)."""
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError

    try:
        raw = json.loads(schema_str)
    except (ValueError, RecursionError) as exc:
        return _Schema(error=f"schema_str is not valid JSON: {exc}")
    strict = strict_schema(raw)
    try:
        Draft202012Validator.check_schema(strict)
    except SchemaError as exc:
        return _Schema(error=f"invalid JSON Schema: {exc.message}")
    except RecursionError:
        return _Schema(error="invalid JSON Schema: nested too deeply")
    # No format checker: `format` is an annotation only, as in the reference.
    return _Schema(raw=raw, validator=Draft202012Validator(strict))


def _validate(data: Any, schema: _Schema) -> Verdict:
    from jsonschema.exceptions import ValidationError

    try:
        schema.validator.validate(data)
    except ValidationError as exc:
        where = exc.json_path if exc.path else "$"
        return Verdict.error("validation_error", f"{where}: {exc.message}")
    except RecursionError:
        return Verdict.error("validation_error", "the document is nested too deeply to validate")
    except Exception as exc:  # noqa: BLE001 - e.g. a $ref that cannot be resolved (never fetched)
        return Verdict.error("schema_error", f"cannot validate with this schema: {type(exc).__name__}: {exc}")
    return VALID


# --------------------------------------------------------------------------------------------
# Parsing
# --------------------------------------------------------------------------------------------


def parse_document(text: str, schema_type: str) -> Any:
    """``text`` parsed as ``schema_type``; raises (ValueError and friends) when it does not parse.

    - ``json``: :func:`json.loads`;
    - ``yaml``: PyYAML ``safe_load`` (YAML 1.1: an unquoted date becomes a ``date``);
    - ``toml``: :mod:`tomllib` (TOML 1.0; dates become date objects);
    - ``xml``: :func:`xmltodict.parse`: ``{root_tag: {...}}``, attributes as ``@name``, mixed
      text as ``#text``, repeated children as lists, leaves as strings, empty elements as None.
      Entity declarations are refused (no XML bomb, no external entity);
    - ``csv``: :class:`csv.DictReader`: a list of ``{header: cell}`` dicts.

    No code fence is removed: a fenced answer does not parse (as in the reference).
    """
    if schema_type == "json":
        return json.loads(text)
    if schema_type == "yaml":
        import yaml

        return yaml.safe_load(text)
    if schema_type == "toml":
        import tomllib

        return tomllib.loads(text)
    if schema_type == "xml":
        import xmltodict

        return xmltodict.parse(text, disable_entities=True)
    if schema_type == "csv":
        return list(csv.DictReader(io.StringIO(text)))
    raise ValueError(f"unknown schema_type {schema_type!r}; expected one of {', '.join(FORMATS)}")


# --------------------------------------------------------------------------------------------
# Coercion of string leaves (XML and CSV carry only strings)
# --------------------------------------------------------------------------------------------

_FAILED = object()


def _convert(value: str, kind: Any) -> Any:
    """``value`` as a JSON Schema scalar type, or ``_FAILED``."""
    try:
        if kind == "integer":
            return int(value)
        if kind == "number":
            return float(value)
    except (ValueError, OverflowError):
        return _FAILED
    if kind == "boolean":
        lowered = value.lower()
        if lowered in ("true", "1"):
            return True
        if lowered in ("false", "0"):
            return False
        return _FAILED
    if kind == "string":
        return value
    return _FAILED


def coerce_xml(value: Any, schema: Any) -> Any:
    """``value`` (xmltodict output) walked alongside ``schema``, its leaves converted to the
    declared types. Acts on a schema's single ``type`` only (a type list leaves a value as it is):

    - ``object``: recurse into the declared properties present; other keys unchanged;
    - ``array``: a dict with a single key is unwrapped to its value (xmltodict's wrapper element),
      None becomes ``[]``, any other non-list ``[value]``; then each item against ``items``;
    - ``string``: None (an empty element) becomes ``""``;
    - ``integer`` / ``number`` / ``boolean``: a string becomes ``int()`` / ``float()`` /
      ``true``/``1`` or ``false``/``0`` (any case); a value that does not convert stays as it is.
    """
    if not isinstance(schema, dict):
        return value
    kind = schema.get("type")
    if kind == "object":
        properties = schema.get("properties")
        if isinstance(value, dict) and isinstance(properties, dict):
            for name, sub in properties.items():
                if name in value:
                    value[name] = coerce_xml(value[name], sub)
        return value
    if kind == "array":
        if isinstance(value, dict) and len(value) == 1:
            value = next(iter(value.values()))
        if value is None:
            value = []
        elif not isinstance(value, list):
            value = [value]
        items = schema.get("items")
        return [coerce_xml(item, items) for item in value]
    if kind == "string":
        return "" if value is None else value
    if kind in ("integer", "number", "boolean") and isinstance(value, str):
        converted = _convert(value, kind)
        return value if converted is _FAILED else converted
    return value


def _csv_cell(cell: Any, kind: Any) -> Any:
    if not isinstance(cell, str):  # a short row's missing cell (None) or a long row's extras (a list)
        return cell
    if isinstance(kind, list):
        if cell == "" and "null" in kind:
            return None
        for option in kind:
            if option == "null":
                continue
            converted = _convert(cell, option)
            if converted is not _FAILED:
                return converted
        return cell
    if cell == "":
        return cell
    converted = _convert(cell, kind)
    return cell if converted is _FAILED else converted


def coerce_csv(rows: list[dict[Any, Any]], schema: Any) -> list[dict[Any, Any]]:
    """CSV rows with each cell converted to its column's type: ``items.properties[col].type``, or
    the schema's own ``properties`` (default ``string``). A type list turns an empty cell into
    None when it allows ``null``, else the first type that converts wins (``string`` always
    does). Empty cells of a single type stay ``""``."""
    properties: Any = None
    if isinstance(schema, dict):
        items = schema.get("items")
        if isinstance(items, dict) and isinstance(items.get("properties"), dict):
            properties = items["properties"]
        elif isinstance(schema.get("properties"), dict):
            properties = schema["properties"]
    if not properties:
        properties = {}
    out = []
    for row in rows:
        coerced = {}
        for column, cell in row.items():
            sub = properties.get(column) if isinstance(column, str) else None
            kind = sub.get("type", "string") if isinstance(sub, dict) else "string"
            coerced[column] = _csv_cell(cell, kind)
        out.append(coerced)
    return out


# --------------------------------------------------------------------------------------------
# The two checks (run in a worker)
# --------------------------------------------------------------------------------------------


def check_text(text: str, schema_str: str, schema_type: str = "json", xml_coerce_types: bool = True) -> Verdict:
    """Text mode: ``text`` (OUTPUT_TEXT, not stripped) parsed as ``schema_type``, coerced (XML
    when ``xml_coerce_types``, CSV always) and validated against the strict form of
    ``schema_str``. Codes, in order: ``empty_response``, ``parse_error``, ``schema_error``,
    ``validation_error``."""
    if not text or not text.strip():
        return Verdict.error("empty_response", "the response has no output text")
    try:
        data = parse_document(text, schema_type)
    except RecursionError:
        return Verdict.error("parse_error", f"{schema_type} parse error: nested too deeply")
    except Exception as exc:  # noqa: BLE001 - every parser has its own error types
        return Verdict.error("parse_error", f"{schema_type} parse error: {type(exc).__name__}: {exc}")
    schema = _compile(schema_str)
    if schema.error is not None:
        return Verdict.error("schema_error", schema.error)
    try:
        if schema_type == "xml" and xml_coerce_types:
            data = coerce_xml(data, schema.raw)
        elif schema_type == "csv":
            data = coerce_csv(data, schema.raw)
    except RecursionError:
        return Verdict.error("validation_error", "the document is nested too deeply to validate")
    return _validate(data, schema)


def check_tool_arguments(
    arguments: str | dict[str, Any], schema_str: str, tool_payload_key: str | None = None
) -> Verdict:
    """Tool-call mode, once the one call is found: its ``arguments`` (a JSON string, or an object
    as is) parsed, ``arguments[tool_payload_key]`` taken when a key is given, and validated against
    the strict form of ``schema_str``. Codes: ``tool_arguments_parse_error``,
    ``missing_tool_payload_key``, ``schema_error``, ``validation_error``."""
    if isinstance(arguments, dict):
        payload: Any = arguments
    else:
        try:
            payload = json.loads(arguments)
        except (ValueError, RecursionError) as exc:
            return Verdict.error("tool_arguments_parse_error", f"the arguments are not valid JSON: {exc}")
    if tool_payload_key:
        if not isinstance(payload, dict) or tool_payload_key not in payload:
            return Verdict.error("missing_tool_payload_key", f"the arguments have no key {tool_payload_key!r}")
        payload = payload[tool_payload_key]
    schema = _compile(schema_str)
    if schema.error is not None:
        return Verdict.error("schema_error", schema.error)
    return _validate(payload, schema)


# --------------------------------------------------------------------------------------------
# Worker processes
# --------------------------------------------------------------------------------------------


def _warm_up() -> None:
    """Run in the pool's zygote before workers fork: every parser and the validator imported."""
    schema = '{"type": "object", "properties": {"a": {"type": "integer"}}}'
    for text, kind in (
        ('{"a": 1}', "json"),
        ("a: 1", "yaml"),
        ("a = 1", "toml"),
        ("<r><a>1</a></r>", "xml"),
        ("a\n1", "csv"),
    ):
        check_text(text, schema, kind)
    _compile.cache_clear()


def make_checker_pool(
    size: int | None = None, *, time_limit_s: float = 10.0, memory_limit_mb: int | None = 2048
) -> WorkerPool:
    """Warm worker processes (parsers and validator imported) for :func:`check_text` and
    :func:`check_tool_arguments`, each capped at ``memory_limit_mb`` of address space.
    ``size`` defaults to ``$GYM_STRUCTURED_OUTPUTS_WORKERS`` or ``min(4, CPUs)``."""
    if size is None:
        env = os.environ.get("GYM_STRUCTURED_OUTPUTS_WORKERS")
        size = int(env) if env else min(4, os.cpu_count() or 1)
    return WorkerPool(size, time_limit_s=time_limit_s, memory_limit_mb=memory_limit_mb, initializer=_warm_up)
