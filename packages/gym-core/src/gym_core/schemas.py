"""Wire schemas: the OpenAI Responses API as rollouts use it, chat completions, and rollout bodies.

Every body that crosses HTTP between gym servers is one of these ``msgspec.Struct`` types.
Decoding is lenient by design: fields we do not model are ignored, never rejected, so any valid
OpenAI object can be sent to a gym server. Output items carry optional training fields
(``prompt_token_ids``, ``generation_token_ids``, ``generation_log_probs``) that RL trainers need.

Messages in the Responses API may omit ``"type": "message"`` (the "easy input message" form);
:func:`decode_create_params` and :func:`decode_response` add it before typed decoding.

Nulls: every field that OpenAI allows to be null, or that the ``openai`` SDK's ``model_dump()``
writes as null, accepts ``null`` in the typed decoder itself (no second pass). In request bodies
and items an optional field defaults to ``None``, so that ``null`` and absent mean the same and
neither is sent on (``omit_defaults``): a gym server never forwards a null it was given. Structs
that always emit their fields (:class:`OutputText`, :class:`ChatMessage`, :class:`Response`) keep
``UNSET`` for the fields they emit only when set, and read ``None`` there as unset too.
"""

from __future__ import annotations

import random
import time
from typing import Any, Generic, Literal, TypeVar

import msgspec
from msgspec import UNSET, Struct, UnsetType, field

__all__ = [
    "InputText",
    "OutputText",
    "Refusal",
    "InputImage",
    "InputFile",
    "SummaryText",
    "ReasoningText",
    "ContentPart",
    "Message",
    "FunctionCall",
    "FunctionCallOutput",
    "Reasoning",
    "ItemReference",
    "OtherItem",
    "Item",
    "FunctionTool",
    "ReasoningConfig",
    "ResponseCreateParams",
    "Usage",
    "IncompleteDetails",
    "Response",
    "ChatToolCallFunction",
    "ChatToolCall",
    "ChatMessage",
    "ChatCompletionRequest",
    "ChatChoice",
    "ChatUsage",
    "ChatCompletion",
    "VerifyRequest",
    "VerifyResponse",
    "SeedSessionRequest",
    "RunRequest",
    "RolloutRecord",
    "LenientDecoder",
    "decode_create_params",
    "decode_response",
    "new_id",
    "response_text",
    "output_text",
    "assistant_text",
    "last_assistant_text",
    "last_user_text",
    "message_text",
    "function_calls",
]


T = TypeVar("T")


class _Wire(Struct, omit_defaults=True, kw_only=True):
    """Base of wire structs: unknown fields are ignored, defaults are not re-emitted."""


def new_id(prefix: str) -> str:
    """An id in OpenAI's style, e.g. ``msg_3f2a...``: 128 random bits, not for security.

    ``random`` instead of ``uuid4``: no system call per id, and responses need several ids each.
    """
    return f"{prefix}_{random.getrandbits(128):032x}"


# --- content parts ------------------------------------------------------------------------------


class InputText(_Wire, tag_field="type", tag="input_text", kw_only=True):
    text: str


class OutputText(_Wire, tag_field="type", tag="output_text", kw_only=True, omit_defaults=False):
    text: str
    annotations: list[Any] | None = field(default_factory=list)  # null: none (OpenAI sends [])
    logprobs: list[Any] | None | UnsetType = UNSET


class Refusal(_Wire, tag_field="type", tag="refusal", kw_only=True):
    refusal: str


class InputImage(_Wire, tag_field="type", tag="input_image", kw_only=True):
    image_url: str | None = None
    file_id: str | None = None
    detail: str = "auto"


class InputFile(_Wire, tag_field="type", tag="input_file", kw_only=True):
    file_id: str | None = None
    file_data: str | None = None
    file_url: str | None = None
    filename: str | None = None


class SummaryText(_Wire, tag_field="type", tag="summary_text", kw_only=True):
    text: str


class ReasoningText(_Wire, tag_field="type", tag="reasoning_text", kw_only=True):
    text: str


ContentPart = InputText | OutputText | Refusal | InputImage | InputFile | ReasoningText


# --- items --------------------------------------------------------------------------------------


class _TrainingFields(_Wire, kw_only=True):
    """Token-level data a trainer needs, present on generated items only when asked for."""

    prompt_token_ids: list[int] | None = None
    generation_token_ids: list[int] | None = None
    generation_log_probs: list[float] | None = None


class Message(_TrainingFields, tag_field="type", tag="message", kw_only=True):
    role: Literal["user", "assistant", "system", "developer"]
    content: str | list[ContentPart]
    id: str | None = None
    status: str | None = None


class FunctionCall(_TrainingFields, tag_field="type", tag="function_call", kw_only=True):
    call_id: str
    name: str
    arguments: str
    id: str | None = None
    status: str | None = None


class FunctionCallOutput(_Wire, tag_field="type", tag="function_call_output", kw_only=True):
    call_id: str | None = None  # OpenAI's current types allow it to be null
    output: str | list[ContentPart]
    id: str | None = None
    status: str | None = None


class Reasoning(_TrainingFields, tag_field="type", tag="reasoning", kw_only=True):
    summary: list[SummaryText] = field(default_factory=list)
    id: str | None = None
    content: list[ReasoningText] | None = None
    encrypted_content: str | None = None
    status: str | None = None


class ItemReference(_Wire, tag_field="type", tag="item_reference", kw_only=True):
    id: str


class OtherItem(_Wire, tag_field="type", tag="other", kw_only=True):
    """Stands in for a Responses API item type gym does not model (web search calls, MCP, ...).

    :func:`decode_create_params` maps unknown item types here, keeping the original type name
    and fields in ``data`` so that the item is carried along rather than rejected.
    """

    original_type: str
    data: dict[str, Any] = field(default_factory=dict)


Item = Message | FunctionCall | FunctionCallOutput | Reasoning | ItemReference | OtherItem
_ITEM_TYPES = {"message", "function_call", "function_call_output", "reasoning", "item_reference"}
_PART_TYPES = {"input_text", "output_text", "refusal", "input_image", "input_file", "reasoning_text"}


class FunctionTool(_Wire, tag_field="type", tag="function", kw_only=True):
    """A function tool in the Responses API's flat shape."""

    name: str
    parameters: dict[str, Any] | None = None
    description: str | None = None
    strict: bool | None = None


class ReasoningConfig(_Wire, kw_only=True):
    effort: str | None = None
    summary: str | None = None


class ResponseCreateParams(_Wire, kw_only=True):
    """``POST /v1/responses`` body. ``model`` is optional: gym model servers know their model.

    Every setting is ``None`` when absent or null (OpenAI reads both as "the default").
    """

    input: str | list[Item] = field(default_factory=list)
    model: str | None = None
    instructions: str | None = None
    tools: list[FunctionTool] | None = None
    tool_choice: str | dict[str, Any] | None = None
    temperature: float | None = None
    top_p: float | None = None
    max_output_tokens: int | None = None
    parallel_tool_calls: bool | None = None
    metadata: dict[str, str] | None = None
    reasoning: ReasoningConfig | None = None
    stream: bool | None = None
    store: bool | None = None
    seed: int | None = None
    # Output format: ``{"format": {"type": "json_schema", "name": ..., "schema": ...}, "verbosity": ...}``
    # (chat completions' ``response_format`` and ``verbosity``).
    text: dict[str, Any] | None = None
    # Extra output: ``"message.output_text.logprobs"`` asks for the output text's log-probs, with
    # ``top_logprobs`` alternatives at each token (chat completions' ``logprobs``/``top_logprobs``).
    include: list[str] | None = None
    top_logprobs: int | None = None
    # gym extension: ask generated items for token ids and log-probs (training).
    return_token_ids: bool | None = None


class InputTokensDetails(_Wire, kw_only=True, omit_defaults=False):
    cached_tokens: int = 0
    cache_write_tokens: int = 0  # required by current OpenAI clients' Response type


class OutputTokensDetails(_Wire, kw_only=True, omit_defaults=False):
    reasoning_tokens: int = 0


class Usage(_Wire, kw_only=True, omit_defaults=False):
    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0
    input_tokens_details: InputTokensDetails = field(default_factory=InputTokensDetails)
    output_tokens_details: OutputTokensDetails = field(default_factory=OutputTokensDetails)

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            total_tokens=self.total_tokens + other.total_tokens,
            input_tokens_details=InputTokensDetails(
                cached_tokens=self.input_tokens_details.cached_tokens + other.input_tokens_details.cached_tokens,
                cache_write_tokens=self.input_tokens_details.cache_write_tokens
                + other.input_tokens_details.cache_write_tokens,
            ),
            output_tokens_details=OutputTokensDetails(
                reasoning_tokens=self.output_tokens_details.reasoning_tokens
                + other.output_tokens_details.reasoning_tokens
            ),
        )


class IncompleteDetails(_Wire, kw_only=True):
    reason: str | None = None


class Response(Struct, kw_only=True):
    """A Responses API response object. Fields are always emitted: OpenAI clients require them."""

    id: str = field(default_factory=lambda: new_id("resp"))
    object: str = "response"
    created_at: float = field(default_factory=lambda: float(int(time.time())))
    model: str = ""
    output: list[Item] = field(default_factory=list)
    usage: Usage | None = None
    status: str | None = "completed"
    incomplete_details: IncompleteDetails | None = None
    error: dict[str, Any] | None = None
    instructions: str | list[Any] | None = None  # OpenAI echoes a prompt template's as input items
    metadata: dict[str, str] | None = None
    parallel_tool_calls: bool = True
    temperature: float | None = None
    top_p: float | None = None
    tool_choice: str | dict[str, Any] = "auto"
    tools: list[FunctionTool] = field(default_factory=list)
    max_output_tokens: int | None = None


# --- chat completions ---------------------------------------------------------------------------


class ChatToolCallFunction(_Wire, kw_only=True, omit_defaults=False):
    name: str
    arguments: str


class ChatToolCall(_Wire, kw_only=True, omit_defaults=False):
    id: str
    function: ChatToolCallFunction
    type: str = "function"


class ChatMessage(_Wire, kw_only=True, omit_defaults=False):
    """A chat message. ``content`` is always emitted; the rest only when set (``None`` reads as unset)."""

    role: str
    content: str | list[dict[str, Any]] | None = None
    name: str | None | UnsetType = UNSET
    tool_calls: list[ChatToolCall] | None | UnsetType = UNSET
    tool_call_id: str | None | UnsetType = UNSET
    reasoning_content: str | None | UnsetType = UNSET
    refusal: str | None | UnsetType = UNSET
    # gym extension, mirrors the Responses training fields.
    prompt_token_ids: list[int] | None | UnsetType = UNSET
    generation_token_ids: list[int] | None | UnsetType = UNSET
    generation_log_probs: list[float] | None | UnsetType = UNSET


class ChatCompletionRequest(_Wire, kw_only=True):
    """``POST /v1/chat/completions`` body. Every setting is ``None`` when absent or null."""

    messages: list[ChatMessage]
    model: str | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    stop: str | list[str] | None = None
    n: int | None = None
    seed: int | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = None
    parallel_tool_calls: bool | None = None
    metadata: dict[str, str] | None = None
    stream: bool | None = None
    # Output format and effort: the Responses API's ``text.format``, ``text.verbosity``, ``reasoning.effort``.
    response_format: dict[str, Any] | None = None
    verbosity: str | None = None
    reasoning_effort: str | None = None
    return_token_ids: bool | None = None


class ChatChoice(Struct, kw_only=True):
    index: int
    message: ChatMessage
    finish_reason: str | None = "stop"
    logprobs: dict[str, Any] | None = None


class ChatUsage(_Wire, kw_only=True, omit_defaults=False):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0


class ChatCompletion(Struct, kw_only=True):
    id: str = field(default_factory=lambda: new_id("chatcmpl"))
    object: str = "chat.completion"
    created: int = field(default_factory=lambda: int(time.time()))
    model: str = ""
    choices: list[ChatChoice] = field(default_factory=list)
    usage: ChatUsage | None = None


# --- rollout bodies -----------------------------------------------------------------------------


class SeedSessionRequest(_Wire, kw_only=True):
    """``POST /seed_session``: the task row. Resources servers subclass it with their task fields."""


class RunRequest(_Wire, kw_only=True):
    """``POST /run`` on an agent: one task row. Other fields of the row reach seed_session and verify."""

    responses_create_params: ResponseCreateParams


class VerifyRequest(_Wire, kw_only=True):
    """``POST /verify``: the task's create params and the model's final response, plus task fields.

    Resources servers subclass it with the task fields they need (``expected_answer``...).
    """

    responses_create_params: ResponseCreateParams
    response: Response


class VerifyResponse(_Wire, kw_only=True):
    """The verdict. Subclasses add their own fields (an extracted answer, a judge's reasoning...)."""

    reward: float


class RolloutRecord(Struct, kw_only=True):
    """What a rollout records about itself, the same fields for every agent, so that ``gym profile``
    can group rollouts by agent or model and report turns and tokens per rollout.

    An agent makes one per rollout (:meth:`gym_core.servers.AgentServer.rollout_record`), feeds it
    as the rollout goes (:meth:`add_model_response` for each model response, :meth:`add_tool_calls`
    for tool calls) and returns :meth:`fields` with its result. ``AgentServer`` adds
    ``environment`` and ``resources_server``.

    - ``agent``: the agent instance; ``model_server``: the model instance it called;
      ``model``: the model name the last response reported;
    - ``num_model_calls``: model responses received (turns);
    - ``num_tool_calls``: the rollout's tool calls: those executed (by the agent, or by the
      environment in a step) or, for an agent that executes none, those the model made;
    - ``usage``: the responses' usage summed (``None`` when no response reported any);
      ``usage_per_turn``: each response's usage in order (``None`` where it reported none).
    """

    agent: str | None = None
    model_server: str | None = None
    model: str | None = None
    num_model_calls: int = 0
    num_tool_calls: int = 0
    usage: Usage | None = None
    usage_per_turn: list[Usage | None] = field(default_factory=list)

    def add_model_response(self, response: Response) -> None:
        """Count one model call: its model name and usage."""
        self.num_model_calls += 1
        if response.model:
            self.model = response.model
        self.usage_per_turn.append(response.usage)
        if response.usage is not None:
            self.usage = response.usage if self.usage is None else self.usage + response.usage

    def add_tool_calls(self, count: int = 1) -> None:
        """Count ``count`` tool calls."""
        self.num_tool_calls += count

    def fields(self) -> dict[str, Any]:
        """The record as the fields of a rollout result."""
        return msgspec.structs.asdict(self)


# --- decoding with normalisation ----------------------------------------------------------------


def _normalise_part(part: Any) -> Any:
    kind = part.get("type") if isinstance(part, dict) else None
    if isinstance(part, dict) and (kind is None or isinstance(kind, str)) and kind not in _PART_TYPES:
        # Unknown or missing part type: keep its text, if any, as input text rather than reject it.
        text = part.get("text")
        return {"type": "input_text", "text": text if isinstance(text, str) else msgspec.json.encode(part).decode()}
    return part


def _normalise_item(item: Any) -> Any:
    if not isinstance(item, dict):
        return item
    kind = item.get("type")
    if kind is None:
        # OpenAI allows both without a type (or with "type": null): a message has a role, a
        # reference only an id.
        if "role" in item:
            kind = "message"
        elif "id" in item and item.keys() <= {"id", "type"}:
            kind = "item_reference"
        if kind is not None:
            item = {**item, "type": kind}
    if not isinstance(kind, (str, type(None))):
        return item  # a type that is an object or a list: the typed decoder says what is wrong (422)
    if kind not in _ITEM_TYPES:
        return {"type": "other", "original_type": str(kind), "data": item}
    if kind == "message" and isinstance(item.get("content"), list):
        item = {**item, "content": [_normalise_part(p) for p in item["content"]]}
    return item


def _normalise_items(obj: dict[str, Any], key: str) -> dict[str, Any]:
    items = obj.get(key)
    if isinstance(items, list):
        obj = {**obj, key: [_normalise_item(i) for i in items]}
    return obj


def _normalise_payload(obj: dict[str, Any]) -> dict[str, Any]:
    """Add what typed decoding needs to the places Responses items appear in gym bodies."""
    obj = _normalise_items(obj, "input")
    obj = _normalise_items(obj, "output")
    for key in ("responses_create_params", "response"):
        nested = obj.get(key)
        if isinstance(nested, dict):
            obj = {**obj, key: _normalise_items(_normalise_items(nested, "input"), "output")}
    return obj


class LenientDecoder(Generic[T]):
    """A JSON decoder for a gym body type that accepts every shape OpenAI accepts.

    The typed decoder runs first (the common case costs one pass); only bodies it rejects are
    normalised (messages without ``type``, unknown item types) and converted. A body that is
    still invalid raises the typed decoder's ``msgspec.ValidationError``.
    """

    def __init__(self, type: type[T]):
        self.type = type
        self._decoder = msgspec.json.Decoder(type)

    def decode(self, data: bytes | str) -> T:
        try:
            return self._decoder.decode(data)
        except msgspec.ValidationError as first:
            obj = msgspec.json.decode(data)
            if not isinstance(obj, dict):
                raise first from None
            return self.convert(obj)

    def convert(self, obj: dict[str, Any]) -> T:
        """Convert an already-parsed body: typed first, normalised only when that fails."""
        try:
            return msgspec.convert(obj, self.type)
        except msgspec.ValidationError:
            return msgspec.convert(_normalise_payload(obj), self.type)


_create_params_decoder = LenientDecoder(ResponseCreateParams)
_response_decoder = LenientDecoder(Response)


def decode_create_params(data: bytes | str | dict[str, Any]) -> ResponseCreateParams:
    """Decode a ``/v1/responses`` body (bytes or an already-parsed dict), leniently."""
    if isinstance(data, dict):
        return _create_params_decoder.convert(data)
    return _create_params_decoder.decode(data)


def decode_response(data: bytes | str | dict[str, Any]) -> Response:
    """Decode a Responses API response object, leniently."""
    if isinstance(data, dict):
        return _response_decoder.convert(data)
    return _response_decoder.decode(data)


# --- reading responses --------------------------------------------------------------------------


def _part_text(part: Any) -> str:
    return getattr(part, "text", None) or getattr(part, "refusal", None) or ""


def response_text(response: Response) -> str:
    """The text of the assistant messages of a response, joined by newlines."""
    texts = []
    for item in response.output:
        if isinstance(item, Message) and item.role == "assistant":
            if isinstance(item.content, str):
                texts.append(item.content)
            else:
                texts.extend(_part_text(p) for p in item.content)
    return "\n".join(t for t in texts if t)


def output_text(response: Response) -> str:
    """Every ``output_text`` part of every message of the output, concatenated with no separator
    (the OpenAI SDK's ``Response.output_text``; the environments spec's OUTPUT_TEXT). Reasoning,
    refusals and function calls are left out; a message whose content is a plain string counts."""
    texts = []
    for item in response.output:
        if isinstance(item, Message):
            if isinstance(item.content, str):
                texts.append(item.content)
            else:
                texts.extend(part.text for part in item.content if isinstance(part, OutputText))
    return "".join(texts)


def _assistant_parts(message: Message) -> list[str]:
    if isinstance(message.content, str):
        return [message.content]
    return [text for part in message.content if isinstance(text := getattr(part, "text", None), str)]


def assistant_text(response: Response) -> str:
    """Each text part of every assistant message, joined by ``"\n"`` and stripped (the environments
    spec's ASSISTANT_TEXT_NL). Refusals, reasoning and function calls are left out."""
    parts = [
        text
        for item in response.output
        if isinstance(item, Message) and item.role == "assistant"
        for text in _assistant_parts(item)
    ]
    return "\n".join(parts).strip()


def last_assistant_text(response: Response) -> str:
    """:func:`assistant_text` of the last assistant message only (LAST_ASSISTANT_TEXT)."""
    for item in reversed(response.output):
        if isinstance(item, Message) and item.role == "assistant":
            return "\n".join(_assistant_parts(item)).strip()
    return ""


def message_text(message: Message) -> str:
    """A message's string content, or its text-bearing parts joined by ``"\n"``."""
    if isinstance(message.content, str):
        return message.content
    return "\n".join(text for part in message.content if isinstance(text := getattr(part, "text", None), str))


def last_user_text(params: ResponseCreateParams) -> str:
    """The request a task asks, as judges and graders read it: a string ``input`` itself, else the
    last ``user`` message's :func:`message_text`; stripped, ``""`` when there is none."""
    if isinstance(params.input, str):
        return params.input.strip()
    for item in reversed(params.input):
        if isinstance(item, Message) and item.role == "user":
            return message_text(item).strip()
    return ""


def function_calls(response: Response) -> list[FunctionCall]:
    """The function calls a response asks for, in order."""
    return [item for item in response.output if isinstance(item, FunctionCall)]
