"""Responses API ⇄ chat completions, both ways, for every shape gym maps."""

from __future__ import annotations

import msgspec
from msgspec import UNSET

from gym_core.convert import (
    chat_completion_to_response,
    chat_to_create_params,
    create_params_to_chat,
    response_to_chat_completion,
    tools_to_chat,
)
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
    InputImage,
    InputText,
    Message,
    OutputText,
    Reasoning,
    ReasoningConfig,
    Response,
    ResponseCreateParams,
    SummaryText,
    Usage,
    decode_create_params,
)

PARAMS = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}


def call(call_id: str, name: str, arguments: str) -> ChatToolCall:
    return ChatToolCall(id=call_id, function=ChatToolCallFunction(name=name, arguments=arguments))


def conversation_params() -> ResponseCreateParams:
    """A Responses conversation using every mapped item shape."""
    return ResponseCreateParams(
        model="m",
        instructions="You are terse.",
        input=[
            Message(role="user", content="Add 1 and 2, then 3 and 4."),
            Reasoning(summary=[SummaryText(text="Two additions")]),
            Message(role="assistant", content=[OutputText(text="Calling add twice.")]),
            FunctionCall(call_id="call_1", name="add", arguments='{"a": 1}'),
            FunctionCall(call_id="call_2", name="add", arguments='{"a": 3}'),
            FunctionCallOutput(call_id="call_1", output="3"),
            FunctionCallOutput(call_id="call_2", output="7"),
            Message(role="assistant", content=[OutputText(text="3 and 7.")]),
        ],
        tools=[FunctionTool(name="add", parameters=PARAMS, description="Add", strict=True)],
        tool_choice={"type": "function", "name": "add"},
        max_output_tokens=128,
        temperature=0.3,
        top_p=0.9,
        parallel_tool_calls=True,
        metadata={"k": "v"},
        seed=5,
        return_token_ids=True,
    )


# --- Responses → chat → Responses -----------------------------------------------------------------


def test_create_params_to_chat_maps_every_shape():
    chat = create_params_to_chat(conversation_params())
    roles = [m.role for m in chat.messages]
    assert roles == ["system", "user", "assistant", "tool", "tool", "assistant"]
    system, user, assistant, tool1, tool2, final = chat.messages
    assert system.content == "You are terse."
    assert user.content == "Add 1 and 2, then 3 and 4."
    # Assistant text then two function calls: ONE assistant message with two tool calls.
    assert assistant.content == "Calling add twice."
    assert assistant.tool_calls == [call("call_1", "add", '{"a": 1}'), call("call_2", "add", '{"a": 3}')]
    assert assistant.reasoning_content == "Two additions"
    assert (tool1.tool_call_id, tool1.content) == ("call_1", "3")
    assert (tool2.tool_call_id, tool2.content) == ("call_2", "7")
    assert final.content == "3 and 7." and final.reasoning_content is UNSET
    assert chat.tools == [
        {"type": "function", "function": {"name": "add", "parameters": PARAMS, "description": "Add", "strict": True}}
    ]
    assert chat.tool_choice == {"type": "function", "function": {"name": "add"}}
    assert chat.max_tokens == 128
    assert (chat.temperature, chat.top_p, chat.seed, chat.parallel_tool_calls) == (0.3, 0.9, 5, True)
    assert chat.metadata == {"k": "v"} and chat.model == "m" and chat.return_token_ids is True


def test_responses_to_chat_to_responses_keeps_the_conversation():
    original = conversation_params()
    back = chat_to_create_params(create_params_to_chat(original))
    items = back.input
    assert [type(i).__name__ for i in items] == [
        "Message",
        "Message",
        "Reasoning",
        "Message",
        "FunctionCall",
        "FunctionCall",
        "FunctionCallOutput",
        "FunctionCallOutput",
        "Message",
    ]
    system, user, reasoning, text, call1, call2, out1, out2, final = items
    assert (system.role, system.content) == ("system", "You are terse.")
    assert (user.role, user.content) == ("user", "Add 1 and 2, then 3 and 4.")
    assert reasoning.summary == [SummaryText(text="Two additions")]
    assert text.role == "assistant" and text.content == [OutputText(text="Calling add twice.")]
    assert (call1.call_id, call1.name, call1.arguments) == ("call_1", "add", '{"a": 1}')
    assert (call2.call_id, call2.arguments) == ("call_2", '{"a": 3}')
    assert (out1.call_id, out1.output, out2.call_id, out2.output) == ("call_1", "3", "call_2", "7")
    assert final.content == [OutputText(text="3 and 7.")]
    assert back.tools == original.tools
    assert back.tool_choice == original.tool_choice
    assert back.max_output_tokens == 128
    assert (back.temperature, back.top_p, back.seed, back.parallel_tool_calls) == (0.3, 0.9, 5, True)
    assert back.metadata == {"k": "v"} and back.model == "m" and back.return_token_ids is True


def test_function_calls_without_preceding_text_start_an_assistant_message():
    params = ResponseCreateParams(
        input=[
            Message(role="user", content="go"),
            Reasoning(summary=[SummaryText(text="think")]),
            FunctionCall(call_id="a", name="f", arguments="{}"),
            FunctionCall(call_id="b", name="g", arguments="{}"),
        ]
    )
    messages = create_params_to_chat(params).messages
    assert [m.role for m in messages] == ["user", "assistant"]
    assert messages[1].content is None
    assert [c.id for c in messages[1].tool_calls] == ["a", "b"]
    assert messages[1].reasoning_content == "think"


def test_string_input_and_image_parts():
    assert [(m.role, m.content) for m in create_params_to_chat(ResponseCreateParams(input="hello")).messages] == [
        ("user", "hello")
    ]
    params = ResponseCreateParams(
        input=[Message(role="user", content=[InputText(text="what is it?"), InputImage(image_url="https://x/cat.png")])]
    )
    content = create_params_to_chat(params).messages[0].content
    assert content == [
        {"type": "text", "text": "what is it?"},
        {"type": "image_url", "image_url": {"url": "https://x/cat.png"}},
    ]


def test_unset_settings_stay_unset():
    chat = create_params_to_chat(ResponseCreateParams(input="x"))
    assert chat.tools is None and chat.tool_choice is None
    assert chat.max_tokens is None and chat.temperature is None and chat.model is None
    assert msgspec.json.decode(msgspec.json.encode(chat)) == {"messages": [{"role": "user", "content": "x"}]}


def test_tool_choice_string_shapes_pass_through():
    for choice in ("auto", "none", "required"):
        chat = create_params_to_chat(ResponseCreateParams(input="x", tool_choice=choice))
        assert chat.tool_choice == choice
        assert chat_to_create_params(chat).tool_choice == choice


def test_tools_to_chat_fills_missing_parameters():
    assert tools_to_chat([FunctionTool(name="ping")]) == [
        {"type": "function", "function": {"name": "ping", "parameters": {"type": "object", "properties": {}}}}
    ]


# --- chat → Responses → chat -----------------------------------------------------------------------


def chat_request() -> ChatCompletionRequest:
    return ChatCompletionRequest(
        model="m",
        messages=[
            ChatMessage(role="system", content="sys"),
            ChatMessage(role="user", content="q"),
            ChatMessage(
                role="assistant",
                content="calling",
                reasoning_content="plan",
                tool_calls=[call("c1", "f", '{"a": 1}'), call("c2", "g", "{}")],
            ),
            ChatMessage(role="tool", tool_call_id="c1", content="one"),
            ChatMessage(role="tool", tool_call_id="c2", content=[{"type": "text", "text": "two"}]),
            ChatMessage(role="assistant", content="done"),
        ],
        tools=[{"type": "function", "function": {"name": "f", "parameters": PARAMS, "description": "F"}}],
        tool_choice={"type": "function", "function": {"name": "f"}},
        max_completion_tokens=50,
        max_tokens=999,
        temperature=0.1,
        return_token_ids=True,
    )


def test_chat_to_create_params_maps_every_shape():
    params = chat_to_create_params(chat_request())
    kinds = [type(i).__name__ for i in params.input]
    assert kinds == [
        "Message",
        "Message",
        "Reasoning",
        "Message",
        "FunctionCall",
        "FunctionCall",
        "FunctionCallOutput",
        "FunctionCallOutput",
        "Message",
    ]
    assert params.input[2].summary == [SummaryText(text="plan")]
    assert params.input[3].content == [OutputText(text="calling")]
    assert params.input[7] == FunctionCallOutput(call_id="c2", output="two")
    assert params.tools == [FunctionTool(name="f", parameters=PARAMS, description="F")]
    assert params.tool_choice == {"type": "function", "name": "f"}
    assert params.max_output_tokens == 50  # max_completion_tokens wins over the legacy max_tokens
    assert params.temperature == 0.1 and params.return_token_ids is True


def test_max_tokens_is_used_without_max_completion_tokens():
    request = ChatCompletionRequest(messages=[ChatMessage(role="user", content="x")], max_tokens=12)
    assert chat_to_create_params(request).max_output_tokens == 12
    request.max_completion_tokens = None
    assert chat_to_create_params(request).max_output_tokens == 12


def test_chat_to_responses_to_chat_keeps_the_conversation():
    back = create_params_to_chat(chat_to_create_params(chat_request()))
    assert [m.role for m in back.messages] == ["system", "user", "assistant", "tool", "tool", "assistant"]
    assistant = back.messages[2]
    assert assistant.content == "calling" and assistant.reasoning_content == "plan"
    assert assistant.tool_calls == [call("c1", "f", '{"a": 1}'), call("c2", "g", "{}")]
    assert [(m.tool_call_id, m.content) for m in back.messages[3:5]] == [("c1", "one"), ("c2", "two")]
    assert back.messages[5].content == "done"
    assert back.tools == [{"type": "function", "function": {"name": "f", "parameters": PARAMS, "description": "F"}}]
    assert back.tool_choice == {"type": "function", "function": {"name": "f"}}
    assert back.max_tokens == 50


def test_openai_style_body_converts_after_lenient_decoding():
    params = decode_create_params(
        {
            "instructions": "be nice",
            "input": [
                {"role": "user", "content": "hi"},
                {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c", "output": "ok"},
            ],
        }
    )
    chat = create_params_to_chat(params)
    assert [m.role for m in chat.messages] == ["system", "user", "assistant", "tool"]


# --- completions ⇄ responses --------------------------------------------------------------------------


def completion(message: ChatMessage, finish_reason: str = "stop") -> ChatCompletion:
    return ChatCompletion(
        id="chatcmpl_x",
        model="m",
        choices=[ChatChoice(index=0, message=message, finish_reason=finish_reason)],
        usage=ChatUsage(prompt_tokens=5, completion_tokens=6, total_tokens=11),
    )


def test_chat_completion_to_response_with_reasoning_text_and_calls():
    message = ChatMessage(
        role="assistant",
        content="sure",
        reasoning_content="why",
        tool_calls=[call("c1", "f", "{}"), call("c2", "g", '{"x": 2}')],
    )
    response = chat_completion_to_response(completion(message, "tool_calls"))
    kinds = [type(i).__name__ for i in response.output]
    assert kinds == ["Reasoning", "Message", "FunctionCall", "FunctionCall"]
    assert response.output[0].summary == [SummaryText(text="why")]
    assert response.output[1].content == [OutputText(text="sure")] and response.output[1].id.startswith("msg_")
    assert [(c.call_id, c.name, c.arguments) for c in response.output[2:]] == [
        ("c1", "f", "{}"),
        ("c2", "g", '{"x": 2}'),
    ]
    assert response.status == "completed" and response.incomplete_details is None
    assert response.usage == Usage(input_tokens=5, output_tokens=6, total_tokens=11)
    assert response.model == "m"

    chat = response_to_chat_completion(response)
    choice = chat.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content == "sure" and choice.message.reasoning_content == "why"
    assert choice.message.tool_calls == message.tool_calls
    assert chat.usage == ChatUsage(prompt_tokens=5, completion_tokens=6, total_tokens=11)


def test_only_tool_calls_gives_no_empty_message():
    message = ChatMessage(role="assistant", content=None, tool_calls=[call("c1", "f", "{}")])
    response = chat_completion_to_response(completion(message, "tool_calls"))
    assert [type(i).__name__ for i in response.output] == ["FunctionCall"]
    assert response_to_chat_completion(response).choices[0].message.content is None


def test_finish_reason_length_is_status_incomplete_and_back():
    response = chat_completion_to_response(completion(ChatMessage(role="assistant", content="cut of"), "length"))
    assert response.status == "incomplete"
    assert response.incomplete_details is not None and response.incomplete_details.reason == "max_output_tokens"
    assert response_to_chat_completion(response).choices[0].finish_reason == "length"
    stopped = chat_completion_to_response(completion(ChatMessage(role="assistant", content="done"), "stop"))
    assert stopped.status == "completed"
    assert response_to_chat_completion(stopped).choices[0].finish_reason == "stop"


def test_training_fields_are_carried_both_ways():
    message = ChatMessage(
        role="assistant",
        content="x",
        tool_calls=[call("c1", "f", "{}")],
        prompt_token_ids=[1, 2],
        generation_token_ids=[3, 4, 5],
        generation_log_probs=[-0.1, -0.2, -0.3],
    )
    response = chat_completion_to_response(completion(message, "tool_calls"))
    last = response.output[-1]
    assert isinstance(last, FunctionCall)
    assert (last.prompt_token_ids, last.generation_token_ids, last.generation_log_probs) == (
        [1, 2],
        [3, 4, 5],
        [-0.1, -0.2, -0.3],
    )
    assert response.output[0].generation_token_ids is None  # only the last generated item
    back = response_to_chat_completion(response).choices[0].message
    assert (back.prompt_token_ids, back.generation_token_ids, back.generation_log_probs) == (
        [1, 2],
        [3, 4, 5],
        [-0.1, -0.2, -0.3],
    )


def test_no_training_fields_when_none_were_generated():
    response = chat_completion_to_response(completion(ChatMessage(role="assistant", content="x")))
    assert response.output[0].generation_token_ids is None
    assert response_to_chat_completion(response).choices[0].message.generation_token_ids is UNSET


def test_request_settings_are_echoed_in_the_response():
    params = conversation_params()
    response = chat_completion_to_response(completion(ChatMessage(role="assistant", content="x")), params)
    assert response.instructions == "You are terse."
    assert response.tools == params.tools
    assert response.tool_choice == {"type": "function", "name": "add"}
    assert response.max_output_tokens == 128
    assert (response.temperature, response.top_p, response.parallel_tool_calls) == (0.3, 0.9, True)
    assert response.metadata == {"k": "v"}


def test_response_to_chat_completion_ids_and_text():
    response = Response(
        id="resp_123",
        created_at=17.0,
        model="m",
        output=[Message(role="assistant", content=[OutputText(text="a"), OutputText(text="b")])],
    )
    chat = response_to_chat_completion(response)
    assert chat.id == "chatcmpl_123" and chat.created == 17 and chat.model == "m"
    assert chat.choices[0].message.content == "ab" and chat.choices[0].message.tool_calls is UNSET
    assert chat.usage is None


def test_completion_without_choices_gives_no_output():
    response = chat_completion_to_response(ChatCompletion(model="m", choices=[]))
    assert response.output == [] and response.status == "completed"


# --- output format and effort -----------------------------------------------------------------------

_SCHEMA = {"type": "object", "properties": {"answer": {"type": "integer"}}}
_TEXT_FORMAT = {"type": "json_schema", "name": "answer", "schema": _SCHEMA, "strict": True, "description": "d"}
_RESPONSE_FORMAT = {
    "type": "json_schema",
    "json_schema": {"name": "answer", "schema": _SCHEMA, "strict": True, "description": "d"},
}


def test_text_format_becomes_response_format_and_back():
    params = ResponseCreateParams(input="hi", text={"format": _TEXT_FORMAT, "verbosity": "low"})
    params.reasoning = ReasoningConfig(effort="high")
    request = create_params_to_chat(params)
    assert request.response_format == _RESPONSE_FORMAT
    assert request.verbosity == "low" and request.reasoning_effort == "high"
    back = chat_to_create_params(request)
    assert back.text == {"format": _TEXT_FORMAT, "verbosity": "low"}
    assert back.reasoning == ReasoningConfig(effort="high")


def test_simple_output_formats_keep_their_shape():
    for fmt in ({"type": "json_object"}, {"type": "text"}):
        request = create_params_to_chat(ResponseCreateParams(input="hi", text={"format": fmt}))
        assert request.response_format == fmt
        assert chat_to_create_params(request).text == {"format": fmt}


def test_no_output_format_stays_unset_both_ways():
    request = create_params_to_chat(ResponseCreateParams(input="hi"))
    assert request.response_format is None and request.verbosity is None and request.reasoning_effort is None
    assert b"response_format" not in msgspec.json.encode(request)
    params = chat_to_create_params(request)
    assert params.text is None and params.reasoning is None


def test_logprobs_requests_and_results_convert_both_ways():
    params = decode_create_params({"input": "x", "include": ["message.output_text.logprobs"], "top_logprobs": 2})
    chat = create_params_to_chat(params)
    assert (chat.logprobs, chat.top_logprobs) == (True, 2)
    back = chat_to_create_params(chat)
    assert (back.include, back.top_logprobs) == (["message.output_text.logprobs"], 2)
    entries = [{"token": "hi", "logprob": -0.5, "bytes": [104, 105], "top_logprobs": []}]
    completion = ChatCompletion(
        choices=[
            ChatChoice(index=0, message=ChatMessage(role="assistant", content="hi"), logprobs={"content": entries})
        ]
    )
    part = chat_completion_to_response(completion).output[0].content[0]
    assert isinstance(part, OutputText) and part.logprobs == entries
