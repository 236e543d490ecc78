"""Constrained decoding: llama.cpp grammars that a reply must follow, token by token.

* ``response_format`` ``{"type": "json_schema", "json_schema": {"schema": ...}}`` (the Responses
  API's ``text.format``): the reply is JSON valid against the schema (:func:`json_schema_grammar`,
  llama-cpp-python's JSON-schema-to-GBNF converter); ``{"type": "json_object"}``: any JSON object.
* ``tool_choice`` ``"required"`` or a named function: the reply is exactly one call in the markup
  the chat template asks for, ``<tool_call>{"name": NAME, "arguments": {...}}</tool_call>``, its
  name one of the tools (or the named one) and its arguments valid against that tool's
  ``parameters`` (:func:`tool_call_grammar`).

:class:`GrammarConstraint` applies a grammar to one request's decoding: before each sample it sets
the logits of the tokens the grammar does not allow next to ``-inf`` (llama.cpp's grammar sampler
on the whole vocabulary), after it the sampled token advances the grammar. Once the grammar is
complete only end-of-generation tokens are allowed. Each request has its own grammar state, so
constrained and free requests are decoded side by side in one batch. Reported log-probabilities
stay those of the model's raw distribution (before the mask, as before temperature and top-p).
"""

from __future__ import annotations

import ctypes
import json
import weakref
from collections.abc import Sequence
from typing import Any

import llama_cpp
import numpy as np
from llama_cpp.llama_grammar import json_schema_to_gbnf

from gym_local_llama.chat_template import TOOL_CALL_CLOSE, TOOL_CALL_OPEN

__all__ = ["Grammar", "GrammarConstraint", "json_schema_grammar", "tool_call_grammar"]

# A grammar: its GBNF text and the name of its root rule.
Grammar = tuple[str, str]

_TOKEN_DATA = np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)])


def _literal(text: str) -> str:
    return json.dumps(text)  # a GBNF string literal: JSON's escapes are GBNF's


def json_schema_grammar(schema: Any, what: str = "response_format") -> Grammar:
    """The grammar of JSON valid against ``schema`` (a JSON Schema object); ``ValueError`` naming
    ``what`` for a schema the converter cannot read."""
    if not isinstance(schema, dict):
        raise ValueError(f"{what}: the JSON schema must be an object, got {type(schema).__name__}")
    try:
        return json_schema_to_gbnf(json.dumps(schema)), "root"
    except Exception as exc:  # the converter's own errors: an unsupported or malformed schema
        raise ValueError(f"{what}: cannot constrain decoding to this JSON schema: {exc}") from exc


def tool_call_grammar(tools: Sequence[dict], name: str | None = None) -> Grammar:
    """The grammar of one tagged call of ``name`` (or of any of ``tools``), its arguments valid
    against the tool's parameters. ``tools``: chat completions tools."""
    functions = [t.get("function", t) for t in tools if isinstance(t, dict)]
    calls = []
    for function in functions:
        if name is not None and function.get("name") != name:
            continue
        parameters = function.get("parameters") or {"type": "object", "properties": {}}
        calls.append(
            {
                "type": "object",
                "properties": {"name": {"const": function.get("name")}, "arguments": parameters},
                "required": ["name", "arguments"],
                "additionalProperties": False,
            }
        )
    if not calls:
        raise ValueError(f"tool_choice: no tool named {name!r} among the tools" if name else "tool_choice: no tools")
    gbnf, root = json_schema_grammar(calls[0] if len(calls) == 1 else {"anyOf": calls}, "tools")
    rule = f"tagged-call ::= {_literal(TOOL_CALL_OPEN)} {root} {_literal(TOOL_CALL_CLOSE)}"
    return f"{gbnf}\n{rule}", "tagged-call"


class GrammarConstraint:
    """One request's grammar state (see the module docstring). Use from one thread at a time."""

    def __init__(self, vocab: Any, n_vocab: int, grammar: Grammar) -> None:
        gbnf, root = grammar
        sampler = llama_cpp.llama_sampler_init_grammar(vocab, gbnf.encode(), root.encode())
        if not sampler:
            raise ValueError("llama.cpp could not parse the grammar built for this request")
        self._sampler = sampler
        self._finalizer = weakref.finalize(self, llama_cpp.llama_sampler_free, sampler)
        self._data = np.zeros(n_vocab, dtype=_TOKEN_DATA)
        self._ids = np.arange(n_vocab, dtype=np.int32)
        self._array = llama_cpp.llama_token_data_array(
            data=self._data.ctypes.data_as(llama_cpp.llama_token_data_p), size=n_vocab, selected=-1, sorted=False
        )
        self._pointer = ctypes.byref(self._array)
        self._n_vocab = n_vocab

    def mask(self, logits: np.ndarray) -> np.ndarray:
        """``logits`` with the tokens the grammar does not allow next at ``-inf`` (a copy)."""
        self._data["id"] = self._ids
        self._data["logit"] = logits
        self._array.data = self._data.ctypes.data_as(llama_cpp.llama_token_data_p)
        self._array.size, self._array.selected, self._array.sorted = self._n_vocab, -1, False
        llama_cpp.llama_sampler_apply(self._sampler, self._pointer)
        size = self._array.size
        if size == self._n_vocab and self._array.data is not None:
            data = self._data
        else:  # pragma: no cover - a sampler that moved or shrank the array
            data = np.ctypeslib.as_array(self._array.data, shape=(size,)).view(_TOKEN_DATA)
        masked = np.full(self._n_vocab, -np.inf, dtype=np.float32)
        masked[data["id"]] = data["logit"]
        return masked

    def accept(self, token: int) -> None:
        llama_cpp.llama_sampler_accept(self._sampler, token)

    def close(self) -> None:
        self._finalizer()
