"""Conversion between the Responses API and chat completions, both ways.

Model servers implement one endpoint and derive the other through these functions; the
``openai_model`` plugin uses them to put a Responses API in front of chat-only backends.

Shape mapping:

- ``instructions`` ⇄ a leading system message;
- a message item ⇄ a chat message of the same role (parts joined into text, images kept as parts);
- consecutive ``function_call`` items ⇄ one assistant message with ``tool_calls`` (merged with the
  assistant text just before them, as chat APIs emit them);
- ``function_call_output`` ⇄ a ``tool`` message;
- ``reasoning`` ⇄ ``reasoning_content`` on the next assistant message;
- ``include: ["message.output_text.logprobs"]`` and ``top_logprobs`` ⇄ ``logprobs: true`` and
  ``top_logprobs``; a choice's ``logprobs.content`` ⇄ the output text's ``logprobs``;
- ``text.format`` ⇄ ``response_format`` (a JSON schema's ``name``, ``schema``, ``strict`` and
  ``description`` are nested under ``json_schema`` in chat), ``text.verbosity`` ⇄ ``verbosity``,
  ``reasoning.effort`` ⇄ ``reasoning_effort``.

A setting that is null or absent on one side stays unset on the other.
"""

from __future__ import annotations

from typing import Any

import msgspec
from msgspec import UNSET

from gym_core.schemas import (
    ChatChoice,
    ChatCompletion,
    ChatCompletionRequest,
    ChatMessage,
    ChatToolCall,
    ChatToolCallFunction,
    ChatUsage,
    FunctionCall,
    FunctionCallOutput,
    FunctionTool,
    IncompleteDetails,
    InputText,
    Message,
    OutputText,
    Reasoning,
    ReasoningConfig,
    Response,
    ResponseCreateParams,
    SummaryText,
    Usage,
    new_id,
)

__all__ = [
    "create_params_to_chat",
    "chat_to_create_params",
    "chat_completion_to_response",
    "response_to_chat_completion",
    "tools_to_chat",
    "text_format_to_response_format",
    "response_format_to_text_format",
    "echo_params",
]

_TRAINING_FIELDS = ("prompt_token_ids", "generation_token_ids", "generation_log_probs")
#: The Responses ``include`` entry that asks for the output text's log-probs.
LOGPROBS_INCLUDE = "message.output_text.logprobs"


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if content is None:
        return ""
    texts = []
    for index, part in enumerate(content):
        if isinstance(part, dict):
            text = part.get("text")
            if text is not None and not isinstance(text, str):
                raise msgspec.ValidationError(f"content[{index}].text must be a string, got {type(text).__name__}")
            texts.append(text or "")
        else:
            texts.append(getattr(part, "text", None) or getattr(part, "refusal", None) or "")
    return "".join(texts)


def _message_content_to_chat(content: Any) -> str | list[dict[str, Any]]:
    if isinstance(content, str):
        return content
    if any(getattr(p, "image_url", None) for p in content):
        parts: list[dict[str, Any]] = []
        for p in content:
            if getattr(p, "image_url", None):
                parts.append({"type": "image_url", "image_url": {"url": p.image_url}})
            else:
                parts.append({"type": "text", "text": _content_text([p])})
        return parts
    return _content_text(content)


def tools_to_chat(tools: list[FunctionTool]) -> list[dict[str, Any]]:
    """Responses function tools (flat) → chat tools (nested under ``function``)."""
    out = []
    for tool in tools:
        function: dict[str, Any] = {
            "name": tool.name,
            "parameters": tool.parameters or {"type": "object", "properties": {}},
        }
        if tool.description is not None:
            function["description"] = tool.description
        if tool.strict is not None:
            function["strict"] = tool.strict
        out.append({"type": "function", "function": function})
    return out


def _tool_choice_to_chat(choice: Any) -> Any:
    if isinstance(choice, dict) and choice.get("type") == "function" and "name" in choice:
        return {"type": "function", "function": {"name": choice["name"]}}
    return choice


def _tool_choice_from_chat(choice: Any) -> Any:
    if isinstance(choice, dict) and choice.get("type") == "function" and isinstance(choice.get("function"), dict):
        return {"type": "function", "name": choice["function"].get("name")}
    return choice


def text_format_to_response_format(fmt: dict[str, Any]) -> dict[str, Any]:
    """A Responses ``text.format`` as a chat ``response_format``: a JSON schema's settings move under ``json_schema``."""
    if fmt.get("type") != "json_schema":
        return fmt  # "text", "json_object": the same shape in both APIs
    return {"type": "json_schema", "json_schema": {k: v for k, v in fmt.items() if k != "type"}}


def response_format_to_text_format(fmt: dict[str, Any]) -> dict[str, Any]:
    """A chat ``response_format`` as a Responses ``text.format`` (the inverse of the above)."""
    schema = fmt.get("json_schema")
    if fmt.get("type") != "json_schema" or not isinstance(schema, dict):
        return fmt
    return {"type": "json_schema", **schema}


def create_params_to_chat(params: ResponseCreateParams) -> ChatCompletionRequest:
    """A ``/v1/responses`` body as the equivalent ``/v1/chat/completions`` body."""
    messages: list[ChatMessage] = []
    if isinstance(params.instructions, str) and params.instructions:
        messages.append(ChatMessage(role="system", content=params.instructions))
    pending_reasoning: str | None = None
    if isinstance(params.input, str):
        messages.append(ChatMessage(role="user", content=params.input))
    else:
        for item in params.input:
            if isinstance(item, Message):
                msg = ChatMessage(role=item.role, content=_message_content_to_chat(item.content))
                if item.role == "assistant" and pending_reasoning is not None:
                    msg.reasoning_content = pending_reasoning
                    pending_reasoning = None
                messages.append(msg)
            elif isinstance(item, FunctionCall):
                call = ChatToolCall(
                    id=item.call_id, function=ChatToolCallFunction(name=item.name, arguments=item.arguments)
                )
                last = messages[-1] if messages else None
                if last is not None and last.role == "assistant":
                    last.tool_calls = [*(last.tool_calls or []), call]
                else:
                    msg = ChatMessage(role="assistant", content=None, tool_calls=[call])
                    if pending_reasoning is not None:
                        msg.reasoning_content = pending_reasoning
                        pending_reasoning = None
                    messages.append(msg)
            elif isinstance(item, FunctionCallOutput):
                messages.append(ChatMessage(role="tool", tool_call_id=item.call_id, content=_content_text(item.output)))
            elif isinstance(item, Reasoning):
                text = "".join(s.text for s in item.summary) or _content_text(item.content or [])
                pending_reasoning = (pending_reasoning or "") + text
    request = ChatCompletionRequest(messages=messages)
    request.model = params.model
    if params.tools:
        request.tools = tools_to_chat(params.tools)
    request.tool_choice = _tool_choice_to_chat(params.tool_choice)
    request.temperature = params.temperature
    request.top_p = params.top_p
    request.max_tokens = params.max_output_tokens
    request.parallel_tool_calls = params.parallel_tool_calls
    request.metadata = params.metadata
    request.seed = params.seed
    if isinstance(params.text, dict):
        if isinstance(params.text.get("format"), dict):
            request.response_format = text_format_to_response_format(params.text["format"])
        request.verbosity = params.text.get("verbosity")
    if params.reasoning is not None:
        request.reasoning_effort = params.reasoning.effort
    if LOGPROBS_INCLUDE in (params.include or []) or params.top_logprobs is not None:
        request.logprobs = True
        request.top_logprobs = params.top_logprobs
    request.return_token_ids = params.return_token_ids
    return request


def _chat_tool(index: int, tool: dict[str, Any]) -> FunctionTool:
    """A chat ``{"type": "function", "function": {...}}`` tool as a Responses function tool."""
    function = tool.get("function")
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        raise msgspec.ValidationError(f"tools[{index}]: a function tool needs `function` with a string `name`")
    try:
        return msgspec.convert(
            {
                "name": function["name"],
                "parameters": function.get("parameters"),
                "description": function.get("description"),
                "strict": function.get("strict"),
            },
            FunctionTool,
        )
    except msgspec.ValidationError as exc:
        raise msgspec.ValidationError(f"tools[{index}].function: {exc}") from None


def chat_to_create_params(request: ChatCompletionRequest) -> ResponseCreateParams:
    """A ``/v1/chat/completions`` body as the equivalent ``/v1/responses`` body."""
    items: list[Any] = []
    for msg in request.messages:
        if msg.role == "tool":
            items.append(FunctionCallOutput(call_id=msg.tool_call_id or "", output=_content_text(msg.content)))
            continue
        if msg.role == "assistant" and msg.reasoning_content:
            items.append(Reasoning(id=new_id("rs"), summary=[SummaryText(text=msg.reasoning_content)]))
        text = _content_text(msg.content)
        if text or not msg.tool_calls:
            role = msg.role if msg.role in ("user", "assistant", "system", "developer") else "user"
            if role == "assistant":
                items.append(Message(role="assistant", content=[OutputText(text=text)]))
            elif isinstance(msg.content, list):
                items.append(Message(role=role, content=[InputText(text=_content_text([p])) for p in msg.content]))
            else:
                items.append(Message(role=role, content=text))
        for call in msg.tool_calls or []:
            items.append(FunctionCall(call_id=call.id, name=call.function.name, arguments=call.function.arguments))
    params = ResponseCreateParams(input=items)
    params.model = request.model
    if request.tools:
        params.tools = [
            _chat_tool(i, t) for i, t in enumerate(request.tools) if t.get("type", "function") == "function"
        ]
    params.tool_choice = _tool_choice_from_chat(request.tool_choice)
    params.temperature = request.temperature
    params.top_p = request.top_p
    max_tokens = request.max_completion_tokens if request.max_completion_tokens is not None else request.max_tokens
    params.max_output_tokens = max_tokens
    params.parallel_tool_calls = request.parallel_tool_calls
    params.metadata = request.metadata
    params.seed = request.seed
    text_options: dict[str, Any] = {}
    if isinstance(request.response_format, dict):
        text_options["format"] = response_format_to_text_format(request.response_format)
    if request.verbosity is not None:
        text_options["verbosity"] = request.verbosity
    params.text = text_options or None
    if request.reasoning_effort is not None:
        params.reasoning = ReasoningConfig(effort=request.reasoning_effort)
    if request.logprobs is True:
        params.include = [LOGPROBS_INCLUDE]
        params.top_logprobs = request.top_logprobs
    params.return_token_ids = request.return_token_ids
    return params


def chat_completion_to_response(completion: ChatCompletion, params: ResponseCreateParams | None = None) -> Response:
    """The first choice of a chat completion as a Responses API response.

    Token ids and log-probs, when present, are attached to the last generated item.
    """
    output: list[Any] = []
    choice = completion.choices[0] if completion.choices else None
    finish_reason = choice.finish_reason if choice else "stop"
    if choice is not None:
        msg = choice.message
        if msg.reasoning_content:
            output.append(Reasoning(id=new_id("rs"), summary=[SummaryText(text=msg.reasoning_content)]))
        text = _content_text(msg.content)
        if text or not msg.tool_calls:
            part = OutputText(text=text)
            if isinstance(choice.logprobs, dict) and isinstance(choice.logprobs.get("content"), list):
                part.logprobs = choice.logprobs["content"]  # the same entries: token, logprob, bytes, top_logprobs
            output.append(Message(id=new_id("msg"), role="assistant", status="completed", content=[part]))
        for call in msg.tool_calls or []:
            output.append(
                FunctionCall(
                    id=new_id("fc"),
                    call_id=call.id,
                    name=call.function.name,
                    arguments=call.function.arguments,
                    status="completed",
                )
            )
        if output and msg.generation_token_ids not in (UNSET, None):
            last = output[-1]
            for name in _TRAINING_FIELDS:
                value = getattr(msg, name)
                setattr(last, name, None if value is UNSET else value)
    usage = None
    if completion.usage is not None:
        usage = Usage(
            input_tokens=completion.usage.prompt_tokens,
            output_tokens=completion.usage.completion_tokens,
            total_tokens=completion.usage.total_tokens,
        )
    response = Response(model=completion.model, output=output, usage=usage)
    if finish_reason == "length":
        response.status = "incomplete"
        response.incomplete_details = IncompleteDetails(reason="max_output_tokens")
    if params is not None:
        echo_params(response, params)
    return response


def echo_params(response: Response, params: ResponseCreateParams) -> None:
    """OpenAI echoes the request's settings in the response; clients read them back."""
    if isinstance(params.instructions, str):
        response.instructions = params.instructions
    if isinstance(params.metadata, dict):
        response.metadata = params.metadata
    if isinstance(params.temperature, float | int):
        response.temperature = float(params.temperature)
    if isinstance(params.top_p, float | int):
        response.top_p = float(params.top_p)
    if isinstance(params.tools, list):
        response.tools = params.tools
    if params.tool_choice is not None:
        response.tool_choice = params.tool_choice
    if isinstance(params.parallel_tool_calls, bool):
        response.parallel_tool_calls = params.parallel_tool_calls
    if isinstance(params.max_output_tokens, int):
        response.max_output_tokens = params.max_output_tokens


def response_to_chat_completion(response: Response) -> ChatCompletion:
    """A Responses API response as a one-choice chat completion."""
    texts: list[str] = []
    reasoning: list[str] = []
    calls: list[ChatToolCall] = []
    training: dict[str, Any] = {}
    for item in response.output:
        if isinstance(item, Message):
            texts.append(_content_text(item.content))
        elif isinstance(item, FunctionCall):
            calls.append(
                ChatToolCall(id=item.call_id, function=ChatToolCallFunction(name=item.name, arguments=item.arguments))
            )
        elif isinstance(item, Reasoning):
            reasoning.append("".join(s.text for s in item.summary) or _content_text(item.content or []))
        if getattr(item, "generation_token_ids", None) is not None:
            training = {name: value for name in _TRAINING_FIELDS if (value := getattr(item, name)) is not None}
    message = ChatMessage(role="assistant", content="".join(texts) if texts or not calls else None, **training)
    if calls:
        message.tool_calls = calls
    if reasoning:
        message.reasoning_content = "".join(reasoning)
    if calls:
        finish_reason = "tool_calls"
    elif response.status == "incomplete":
        finish_reason = "length"
    else:
        finish_reason = "stop"
    usage = None
    if response.usage is not None:
        usage = ChatUsage(
            prompt_tokens=response.usage.input_tokens,
            completion_tokens=response.usage.output_tokens,
            total_tokens=response.usage.total_tokens,
        )
    return ChatCompletion(
        id=response.id.replace("resp_", "chatcmpl_", 1),
        created=int(response.created_at),
        model=response.model,
        choices=[ChatChoice(index=0, message=message, finish_reason=finish_reason)],
        usage=usage,
    )
