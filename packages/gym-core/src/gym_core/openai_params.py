"""The OpenAI request parameters a gym model server is sent: their ranges, and which it honours.

One place for every model server: :class:`gym_core.servers.ModelServer`'s routes and the proxies'
raw-body routes (:func:`gym_core.upstream.raw_body_routes`) call :func:`check_ranges` on the body as
sent, before the server sees it, and ``ModelServer`` calls :func:`refuse_unsupported` with the
parameters its class :attr:`~gym_core.servers.ModelServer.honours`. Both answer a 400 whose message
names the field, as OpenAI does, so a parameter is honoured or refused, never silently ignored.

- :func:`check_ranges`: a number out of the range OpenAI accepts (``temperature`` 0-2, ``top_p``
  0-1, the penalties -2-2, ``n`` 1-128, ``top_logprobs`` 0-20, token limits >= 1, ``logit_bias``
  values -100-100) or a non-number where a number belongs.
- :func:`refuse_unsupported`: a parameter set to anything but its neutral value (the value that
  asks for nothing: ``n`` 1, ``stream`` false, ``tool_choice`` ``"auto"``, a text format of type
  ``"text"``...) that the server does not honour, and any top-level field OpenAI does not define
  (a misspelt ``temprature`` is refused, not dropped). Responses parameters are named by their
  chat completions equivalents in :attr:`honours` (``max_output_tokens`` is ``max_tokens``,
  ``text.format`` is ``response_format``, ``include: ["message.output_text.logprobs"]`` is
  ``logprobs``, ``reasoning.effort`` is ``reasoning_effort``, ``text.verbosity`` is ``verbosity``),
  so one set serves both endpoints.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping
from typing import Any, Literal

from litestar.exceptions import HTTPException

__all__ = [
    "ACCEPTED",
    "RANGES",
    "ParamError",
    "check_ranges",
    "refuse_unsupported",
    "requested_params",
]

Api = Literal["chat", "responses"]

# (low, high) inclusive; None: unbounded on that side.
RANGES: dict[str, tuple[float | None, float | None]] = {
    "temperature": (0.0, 2.0),
    "top_p": (0.0, 1.0),
    "presence_penalty": (-2.0, 2.0),
    "frequency_penalty": (-2.0, 2.0),
    "n": (1, 128),
    "top_logprobs": (0, 20),
    "max_tokens": (1, None),
    "max_completion_tokens": (1, None),
    "max_output_tokens": (1, None),
    "max_tool_calls": (1, None),
}
_INTEGERS = frozenset({"n", "top_logprobs", "max_tokens", "max_completion_tokens", "max_output_tokens", "seed"})

# Fields every gym model server accepts whatever their value: they ask nothing of generation
# (``model``: gym model servers know their model; ``store``: nothing is stored; ``metadata``,
# ``user``... are the caller's own; ``return_token_ids``: gym's training extension, honoured or
# answered without ids by the server).
ACCEPTED = frozenset(
    {
        "messages",
        "input",
        "instructions",
        "model",
        "store",
        "metadata",
        "user",
        "service_tier",
        "prompt_cache_key",
        "prompt_cache_retention",
        "safety_identifier",
        "stream_options",
        "return_token_ids",
    }
)


def _is(value: Any) -> Callable[[Any], bool]:
    return lambda v: v == value and type(v) is type(value)


def _text_format(value: Any) -> bool:
    return isinstance(value, Mapping) and value.get("type") == "text"


# The parameters a server may honour, by their chat completions name; for each: is a value neutral.
_NEUTRAL: dict[str, Callable[[Any], bool]] = {
    "temperature": lambda v: False,
    "top_p": lambda v: False,
    "max_tokens": lambda v: False,
    "stop": lambda v: v == [] or v == "",
    "seed": lambda v: False,
    "n": _is(1),
    "stream": _is(False),
    "logprobs": _is(False),
    "top_logprobs": _is(0),
    "tools": lambda v: v == [],
    "tool_choice": lambda v: v == "auto",
    "parallel_tool_calls": _is(True),
    "response_format": _text_format,
    "presence_penalty": lambda v: v == 0,
    "frequency_penalty": lambda v: v == 0,
    "logit_bias": lambda v: v == {},
    "reasoning_effort": lambda v: False,
    "verbosity": lambda v: v == "medium",
    "modalities": lambda v: v == ["text"],
    "audio": lambda v: False,
    "prediction": lambda v: False,
    "web_search_options": lambda v: False,
    "functions": lambda v: v == [],
    "function_call": lambda v: v == "auto",
    "truncation": lambda v: v == "disabled",
    "background": _is(False),
    "max_tool_calls": lambda v: False,
    "previous_response_id": lambda v: False,
    "conversation": lambda v: False,
    "prompt": lambda v: False,
    "include": lambda v: v == [],
}
# Chat completions field -> canonical name (the same, except the alias).
_CHAT_NAMES = {name: name for name in _NEUTRAL if name not in ("truncation", "background", "max_tool_calls",
                                                                "previous_response_id", "conversation", "prompt",
                                                                "include")}  # fmt: skip
_CHAT_NAMES["max_completion_tokens"] = "max_tokens"
_RESPONSES_NAMES = {
    name: name
    for name in (
        "temperature", "top_p", "seed", "stream", "top_logprobs", "tools", "tool_choice", "parallel_tool_calls",
        "truncation", "background", "max_tool_calls", "previous_response_id", "conversation", "prompt",
    )
}  # fmt: skip
_RESPONSES_NAMES["max_output_tokens"] = "max_tokens"
_LOGPROBS_INCLUDE = "message.output_text.logprobs"


class ParamError(HTTPException):
    """A request parameter out of range or not honoured by this server: a 400 naming it."""

    status_code = 400

    def __init__(self, param: str, message: str) -> None:
        super().__init__(status_code=400, detail=message)
        self.param = param


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def check_ranges(body: Any, owner: str) -> None:
    """Raise :class:`ParamError` for a parameter of ``body`` (a request as sent) outside OpenAI's range."""
    if not isinstance(body, Mapping):
        return
    for name, value in body.items():
        if value is None:
            continue
        if name in RANGES or name in _INTEGERS:
            integer = name in _INTEGERS
            if not _number(value) or (integer and not float(value).is_integer()) or not math.isfinite(value):
                kind = "an integer" if integer else "a number"
                raise ParamError(name, f"{owner}: '{name}' must be {kind}, got {value!r}")
            low, high = RANGES.get(name, (None, None))
            if (low is not None and value < low) or (high is not None and value > high):
                span = f"from {low:g} to {high:g}" if high is not None else f">= {low:g}"
                raise ParamError(name, f"{owner}: '{name}' must be {span}, got {value!r}")
    bias = body.get("logit_bias")
    if isinstance(bias, Mapping):
        for value in bias.values():
            if not _number(value) or not -100 <= value <= 100:
                raise ParamError("logit_bias", f"{owner}: 'logit_bias' values must be from -100 to 100, got {value!r}")


def requested_params(body: Mapping[str, Any], api: Api) -> dict[str, tuple[str, Any]]:
    """The parameters ``body`` asks for: canonical name -> (the field as sent, its value), neutral
    values and :data:`ACCEPTED` fields left out; a field OpenAI does not define maps to itself."""
    names = _CHAT_NAMES if api == "chat" else _RESPONSES_NAMES
    asked: dict[str, tuple[str, Any]] = {}
    for field, value in body.items():
        if value is None or field in ACCEPTED:
            continue
        if api == "responses" and field == "text" and isinstance(value, Mapping):
            for key, sub in value.items():
                canonical = {"format": "response_format", "verbosity": "verbosity"}.get(key, f"text.{key}")
                if sub is not None and not (canonical in _NEUTRAL and _NEUTRAL[canonical](sub)):
                    asked[canonical] = (f"text.{key}", sub)
            continue
        if api == "responses" and field == "reasoning" and isinstance(value, Mapping):
            for key, sub in value.items():
                if sub is not None:
                    asked["reasoning_effort" if key == "effort" else f"reasoning.{key}"] = (f"reasoning.{key}", sub)
            continue
        if api == "responses" and field == "include" and isinstance(value, list):
            for entry in value:
                if entry == _LOGPROBS_INCLUDE:
                    asked["logprobs"] = ("include", entry)
                else:
                    asked[f"include:{entry}"] = ("include", entry)
            continue
        canonical = names.get(field)
        if canonical is None:
            asked[field] = (field, value)  # not an OpenAI parameter of this endpoint
        elif not _NEUTRAL[canonical](value):
            asked[canonical] = (field, value)
    return asked


def refuse_unsupported(body: Any, api: Api, honours: Collection[str], owner: str) -> None:
    """Raise :class:`ParamError` for the first parameter of ``body`` (a request as sent to the
    ``api`` endpoint) set to a non-neutral value that is not in ``honours`` (canonical names)."""
    if not isinstance(body, Mapping):
        return
    for canonical, (field, value) in requested_params(body, api).items():
        if canonical in honours:
            continue
        if canonical not in _NEUTRAL and not canonical.startswith(("include:", "text.", "reasoning.")):
            raise ParamError(field, f"{owner}: unknown parameter '{field}' (not an OpenAI {_API[api]} parameter)")
        shown = f"{field}={value!r}" if field in ("include",) or "." in field else f"'{field}'"
        raise ParamError(
            field,
            f"{owner}: {shown} is not supported by this server (it honours: {', '.join(sorted(honours)) or 'none'});"
            " leave it out",
        )


_API = {"chat": "chat completions", "responses": "Responses API"}
