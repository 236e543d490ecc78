"""Wire schemas against the ``openai`` package's own types: what OpenAI clients send and accept."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pydantic
import pytest
from openai.types.chat import ChatCompletion as OpenAIChatCompletion
from openai.types.chat import ChatCompletionMessage
from openai.types.chat.chat_completion import Choice
from openai.types.chat.chat_completion_message_function_tool_call import ChatCompletionMessageFunctionToolCall, Function
from openai.types.completion_usage import CompletionUsage
from openai.types.responses import (
    Response as OpenAIResponse,
)
from openai.types.responses import (
    ResponseCreateParams as OpenAICreateParams,
)
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseInputItemParam,
    ResponseOutputMessage,
    ResponseOutputRefusal,
    ResponseOutputText,
    ResponseReasoningItem,
    ResponseUsage,
)
from openai.types.responses.response_create_params import ResponseCreateParamsNonStreaming
from openai.types.responses.response_reasoning_item import Summary
from openai.types.responses.response_usage import InputTokensDetails as OpenAIInputDetails
from openai.types.responses.response_usage import OutputTokensDetails as OpenAIOutputDetails

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
    InputImage,
    InputText,
    InputTokensDetails,
    Message,
    OtherItem,
    OutputText,
    OutputTokensDetails,
    Reasoning,
    Refusal,
    Response,
    SummaryText,
    Usage,
    VerifyRequest,
    decode_create_params,
    decode_response,
    function_calls,
    response_text,
)

CREATE_PARAMS_ADAPTER = pydantic.TypeAdapter(ResponseCreateParamsNonStreaming)


def roundtrip_json(obj: Any) -> dict[str, Any]:
    """What a gym server puts on the wire, as the JSON object a client parses."""
    return json.loads(msgspec.json.encode(obj))


def openai_response(**overrides: Any) -> OpenAIResponse:
    fields: dict[str, Any] = dict(
        id="resp_abc",
        object="response",
        created_at=1_700_000_000.0,
        model="gpt-test",
        parallel_tool_calls=True,
        tool_choice="auto",
        tools=[],
        status="completed",
        output=[
            ResponseReasoningItem(
                id="rs_1", type="reasoning", summary=[Summary(type="summary_text", text="I should call f")]
            ),
            ResponseOutputMessage(
                id="msg_1",
                type="message",
                role="assistant",
                status="completed",
                content=[
                    ResponseOutputText(type="output_text", text="Calling tools.", annotations=[]),
                    ResponseOutputRefusal(type="refusal", refusal="not that one"),
                ],
            ),
            ResponseFunctionToolCall(
                type="function_call", id="fc_1", call_id="call_1", name="f", arguments='{"x": 1}', status="completed"
            ),
            ResponseFunctionToolCall(
                type="function_call", id="fc_2", call_id="call_2", name="g", arguments="{}", status="completed"
            ),
        ],
        usage=ResponseUsage(
            input_tokens=10,
            output_tokens=5,
            total_tokens=15,
            input_tokens_details=OpenAIInputDetails(cached_tokens=4, cache_write_tokens=1),
            output_tokens_details=OpenAIOutputDetails(reasoning_tokens=2),
        ),
    )
    fields.update(overrides)
    return OpenAIResponse(**fields)


# --- Response ------------------------------------------------------------------------------------


@pytest.mark.parametrize("as_bytes", [False, True])
def test_openai_response_roundtrips_through_gym(as_bytes):
    original = openai_response()
    dumped = original.model_dump(mode="json")  # every optional field present, most of them null
    gym = decode_response(json.dumps(dumped).encode() if as_bytes else dumped)

    assert [type(i) for i in gym.output] == [Reasoning, Message, FunctionCall, FunctionCall]
    assert gym.output[0].summary == [SummaryText(text="I should call f")]
    assert response_text(gym) == "Calling tools.\nnot that one"
    assert [(c.call_id, c.name, c.arguments) for c in function_calls(gym)] == [
        ("call_1", "f", '{"x": 1}'),
        ("call_2", "g", "{}"),
    ]
    assert gym.usage is not None and gym.usage.input_tokens_details.cached_tokens == 4

    back = OpenAIResponse.model_validate(roundtrip_json(gym))
    assert back.id == "resp_abc" and back.model == "gpt-test" and back.created_at == original.created_at
    assert back.output_text == original.output_text
    assert [item.type for item in back.output] == [item.type for item in original.output]
    assert back.output[2].call_id == "call_1" and back.output[2].arguments == '{"x": 1}'
    assert back.output[0].summary[0].text == "I should call f"
    assert back.usage == original.usage


def test_gym_response_validates_as_an_openai_response():
    gym = Response(
        model="gym-model",
        output=[
            Reasoning(id="rs_1", summary=[SummaryText(text="thinking")]),
            Message(id="msg_1", role="assistant", status="completed", content=[OutputText(text="The answer is 4.")]),
            FunctionCall(id="fc_1", call_id="call_9", name="lookup", arguments='{"q": "x"}', status="completed"),
        ],
        usage=Usage(input_tokens=7, output_tokens=3, total_tokens=10),
        tools=[
            FunctionTool(
                name="lookup",
                parameters={"type": "object", "properties": {"q": {"type": "string"}}},
                description="Look up",
            )
        ],
        max_output_tokens=64,
        temperature=0.5,
    )
    parsed = OpenAIResponse.model_validate(roundtrip_json(gym))
    assert parsed.output_text == "The answer is 4."
    assert parsed.id.startswith("resp_") and parsed.object == "response" and parsed.status == "completed"
    assert parsed.usage.input_tokens == 7 and parsed.usage.total_tokens == 10
    assert parsed.usage.input_tokens_details.cached_tokens == 0
    assert parsed.usage.output_tokens_details.reasoning_tokens == 0
    assert parsed.output[2].name == "lookup" and parsed.output[2].call_id == "call_9"
    assert parsed.tools[0].name == "lookup" and parsed.tools[0].description == "Look up"
    assert parsed.max_output_tokens == 64 and parsed.temperature == 0.5


def test_incomplete_gym_response_validates_as_an_openai_response():
    gym = Response(
        output=[Message(id="msg_1", role="assistant", status="incomplete", content=[OutputText(text="cut")])],
        status="incomplete",
        incomplete_details=IncompleteDetails(reason="max_output_tokens"),
    )
    parsed = OpenAIResponse.model_validate(roundtrip_json(gym))
    assert parsed.status == "incomplete"
    assert parsed.incomplete_details.reason == "max_output_tokens"
    assert parsed.usage is None


def test_default_response_is_a_valid_openai_response_with_fresh_ids():
    first, second = Response(), Response()
    assert first.id != second.id
    parsed = OpenAIResponse.model_validate(roundtrip_json(first))
    assert parsed.output == [] and parsed.tool_choice == "auto"


@pytest.mark.parametrize(
    "item",
    [
        {"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {"type": "search", "query": "x"}},
        {"type": "file_search_call", "id": "fs_1", "status": "completed", "queries": ["q"], "results": None},
        {"type": "mcp_call", "id": "mcp_1", "name": "t", "server_label": "s", "arguments": "{}"},
    ],
)
def test_unknown_output_item_types_are_carried_not_rejected(item):
    dumped = openai_response().model_dump(mode="json")
    dumped["output"].insert(1, item)
    for data in (dumped, json.dumps(dumped)):
        gym = decode_response(data)
        assert len(gym.output) == 5
        other = gym.output[1]
        assert isinstance(other, OtherItem)
        assert other.original_type == item["type"]
        assert other.data == item
        # The modelled items around it are decoded as usual.
        assert [c.call_id for c in function_calls(gym)] == ["call_1", "call_2"]


def test_response_with_null_status_and_instruction_items_is_accepted():
    instructions = [{"type": "message", "role": "developer", "content": "be nice"}]
    dumped = openai_response(status=None, instructions=instructions).model_dump(mode="json")
    gym = decode_response(json.dumps(dumped))
    assert gym.status is None
    assert gym.instructions == dumped["instructions"]  # kept as sent
    back = OpenAIResponse.model_validate(roundtrip_json(gym))
    assert back.status is None and back.instructions[0].content == "be nice"


def test_unknown_fields_are_ignored_everywhere():
    dumped = openai_response().model_dump(mode="json")
    dumped["some_future_field"] = {"nested": [1, 2]}
    dumped["output"][1]["phase"] = "final_answer"
    dumped["output"][1]["content"][0]["future_part_field"] = 1
    dumped["usage"]["input_tokens_details"]["future_detail"] = 3
    gym = decode_response(json.dumps(dumped))
    assert response_text(gym).startswith("Calling tools.")
    assert gym.usage is not None and gym.usage.total_tokens == 15


# --- create params -------------------------------------------------------------------------------

WEB_SEARCH_ITEM: ResponseInputItemParam = {
    "type": "web_search_call",
    "id": "ws_1",
    "status": "completed",
    "action": {"type": "search", "query": "weather"},
}
FILE_SEARCH_ITEM: ResponseInputItemParam = {
    "type": "file_search_call",
    "id": "fs_1",
    "status": "completed",
    "queries": ["q"],
}
KNOWN_ITEMS: list[ResponseInputItemParam] = [
    {"role": "developer", "content": "Be brief."},  # easy input message: no "type"
    {"role": "user", "content": "What is 2+2?"},
    {
        "type": "message",
        "role": "user",
        "content": [
            {"type": "input_text", "text": "And this picture?"},
            {"type": "input_image", "image_url": "https://example.com/cat.png", "detail": "low"},
        ],
    },
    {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "add"}]},
    {"type": "function_call", "call_id": "call_1", "name": "add", "arguments": '{"a": 2, "b": 2}'},
    {"type": "function_call_output", "call_id": "call_1", "output": "4"},
    {
        "type": "message",
        "role": "assistant",
        "id": "msg_1",
        "status": "completed",
        "content": [{"type": "output_text", "text": "4", "annotations": []}],
    },
]


def create_params(items: list[ResponseInputItemParam]) -> OpenAICreateParams:
    params: OpenAICreateParams = {
        "model": "gpt-test",
        "input": items,
        "instructions": "You add numbers.",
        "tools": [
            {
                "type": "function",
                "name": "add",
                "description": "Add two numbers",
                "parameters": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}},
                "strict": True,
            }
        ],
        "tool_choice": {"type": "function", "name": "add"},
        "temperature": 0.2,
        "max_output_tokens": 100,
        "parallel_tool_calls": False,
        "reasoning": {"effort": "low", "summary": "auto"},
        "metadata": {"task": "7"},
        "store": False,
        # Fields gym does not model: accepted and ignored.
        "truncation": "auto",
        "text": {"format": {"type": "text"}},
        "prompt_cache_key": "k",
        "stream": None,
    }
    CREATE_PARAMS_ADAPTER.validate_python(params)  # the test input is what OpenAI accepts
    return params


@pytest.mark.parametrize("as_bytes", [False, True])
def test_openai_create_params_decode(as_bytes):
    params = create_params([*KNOWN_ITEMS, WEB_SEARCH_ITEM, FILE_SEARCH_ITEM])
    gym = decode_create_params(json.dumps(params).encode() if as_bytes else params)

    assert gym.model == "gpt-test" and gym.instructions == "You add numbers."
    assert [type(i).__name__ for i in gym.input] == [
        "Message",
        "Message",
        "Message",
        "Reasoning",
        "FunctionCall",
        "FunctionCallOutput",
        "Message",
        "OtherItem",
        "OtherItem",
    ]
    developer, user, picture = gym.input[0], gym.input[1], gym.input[2]
    assert developer.role == "developer" and developer.content == "Be brief."
    assert user.role == "user" and user.content == "What is 2+2?"
    assert picture.content == [
        InputText(text="And this picture?"),
        InputImage(image_url="https://example.com/cat.png", detail="low"),
    ]
    assert gym.input[4] == FunctionCall(call_id="call_1", name="add", arguments='{"a": 2, "b": 2}')
    assert gym.input[5] == FunctionCallOutput(call_id="call_1", output="4")
    assert [i.original_type for i in gym.input[7:]] == ["web_search_call", "file_search_call"]
    assert gym.input[7].data == WEB_SEARCH_ITEM and gym.input[8].data == FILE_SEARCH_ITEM
    assert gym.tools == [
        FunctionTool(
            name="add",
            description="Add two numbers",
            parameters=params["tools"][0]["parameters"],
            strict=True,
        )
    ]
    assert gym.tool_choice == {"type": "function", "name": "add"}
    assert gym.temperature == 0.2 and gym.max_output_tokens == 100 and gym.parallel_tool_calls is False
    assert gym.reasoning.effort == "low" and gym.metadata == {"task": "7"}
    assert gym.stream is None


def test_create_params_reencode_as_valid_openai_params():
    params = create_params(KNOWN_ITEMS)
    gym = decode_create_params(json.dumps(params))
    encoded = roundtrip_json(gym)
    validated = CREATE_PARAMS_ADAPTER.validate_python(encoded)
    assert validated["model"] == "gpt-test"
    assert len(validated["input"]) == len(KNOWN_ITEMS)
    assert encoded["input"][0] == {"type": "message", "role": "developer", "content": "Be brief."}
    assert encoded["input"][4] == {"type": "function_call", **KNOWN_ITEMS[4]}
    assert encoded["input"][5] == KNOWN_ITEMS[5]
    assert encoded["tools"] == params["tools"]
    assert encoded["tool_choice"] == params["tool_choice"]
    # Decoding what gym encoded gives the same struct.
    assert decode_create_params(msgspec.json.encode(gym)) == gym


def test_string_input_and_empty_body():
    assert decode_create_params(b'{"input": "hi"}').input == "hi"
    empty = decode_create_params(b"{}")
    assert empty.input == [] and empty.model is None
    assert roundtrip_json(empty) == {}  # unset fields are not sent


def test_unknown_content_part_keeps_its_text():
    gym = decode_create_params(
        {
            "input": [
                {"role": "user", "content": [{"type": "input_audio", "text": "hello"}, {"type": "mystery", "x": 1}]}
            ]
        }
    )
    parts = gym.input[0].content
    assert parts[0] == InputText(text="hello")
    assert isinstance(parts[1], InputText) and json.loads(parts[1].text) == {"type": "mystery", "x": 1}


def test_invalid_body_still_raises_a_validation_error():
    with pytest.raises(msgspec.ValidationError, match="call_id"):
        decode_create_params(b'{"input": [{"type": "function_call", "name": "f", "arguments": "{}"}]}')
    with pytest.raises(msgspec.ValidationError):
        decode_create_params(b'{"input": 3}')
    with pytest.raises(msgspec.DecodeError):
        decode_create_params(b"{not json")


def test_nested_bodies_are_normalised():
    body = {
        "responses_create_params": {"input": [{"role": "user", "content": "q"}, WEB_SEARCH_ITEM]},
        "response": openai_response().model_dump(mode="json"),
        "expected_answer": "4",
    }
    from gym_core.schemas import LenientDecoder

    decoded = LenientDecoder(VerifyRequest).decode(json.dumps(body))
    assert isinstance(decoded.responses_create_params.input[0], Message)
    assert isinstance(decoded.responses_create_params.input[1], OtherItem)
    assert function_calls(decoded.response)[0].name == "f"


# --- training fields -----------------------------------------------------------------------------


def test_training_fields_survive_a_roundtrip():
    item = FunctionCall(
        call_id="c",
        name="f",
        arguments="{}",
        prompt_token_ids=[1, 2, 3],
        generation_token_ids=[4, 5],
        generation_log_probs=[-0.5, -1.25],
    )
    message = Message(
        id="msg_1",
        role="assistant",
        status="completed",
        content=[OutputText(text="x")],
        generation_token_ids=[9],
        generation_log_probs=[-0.1],
    )
    response = Response(output=[message, item])
    encoded = roundtrip_json(response)
    assert encoded["output"][1]["prompt_token_ids"] == [1, 2, 3]
    assert encoded["output"][1]["generation_log_probs"] == [-0.5, -1.25]
    decoded = decode_response(msgspec.json.encode(response))
    assert decoded.output == [message, item]
    # OpenAI clients accept the extra fields.
    assert OpenAIResponse.model_validate(encoded).output[1].call_id == "c"


def test_training_fields_are_omitted_when_unset():
    encoded = roundtrip_json(
        Response(
            output=[
                Message(role="assistant", content="x"),
                FunctionCall(call_id="c", name="f", arguments="{}"),
                Reasoning(),
            ]
        )
    )
    for item in encoded["output"]:
        for key in ("prompt_token_ids", "generation_token_ids", "generation_log_probs"):
            assert key not in item
    chat = roundtrip_json(ChatMessage(role="assistant", content="x"))
    assert chat == {"role": "assistant", "content": "x"}


# --- helpers ---------------------------------------------------------------------------------------


def test_response_text_reads_only_assistant_messages():
    response = Response(
        output=[
            Message(role="user", content="not me"),
            Reasoning(summary=[SummaryText(text="nor me")]),
            Message(role="assistant", content="first"),
            FunctionCall(call_id="c", name="f", arguments="{}"),
            Message(role="assistant", content=[OutputText(text="sec"), OutputText(text="ond"), Refusal(refusal="no")]),
            Message(role="assistant", content=[OutputText(text="")]),
        ]
    )
    assert response_text(response) == "first\nsec\nond\nno"
    assert response_text(Response()) == ""


def test_function_calls_in_order():
    calls = [FunctionCall(call_id=str(i), name=f"f{i}", arguments="{}") for i in range(3)]
    response = Response(
        output=[
            calls[0],
            Message(role="assistant", content="x"),
            calls[1],
            FunctionCallOutput(call_id="0", output="o"),
            calls[2],
        ]
    )
    assert function_calls(response) == calls
    assert function_calls(Response()) == []


def test_usage_add_sums_every_count():
    a = Usage(
        input_tokens=1,
        output_tokens=2,
        total_tokens=3,
        input_tokens_details=InputTokensDetails(cached_tokens=4, cache_write_tokens=5),
        output_tokens_details=OutputTokensDetails(reasoning_tokens=6),
    )
    b = Usage(
        input_tokens=10,
        output_tokens=20,
        total_tokens=30,
        input_tokens_details=InputTokensDetails(cached_tokens=40, cache_write_tokens=50),
        output_tokens_details=OutputTokensDetails(reasoning_tokens=60),
    )
    total = a + b
    assert total == Usage(
        input_tokens=11,
        output_tokens=22,
        total_tokens=33,
        input_tokens_details=InputTokensDetails(cached_tokens=44, cache_write_tokens=55),
        output_tokens_details=OutputTokensDetails(reasoning_tokens=66),
    )
    assert a == Usage(
        input_tokens=1,
        output_tokens=2,
        total_tokens=3,
        input_tokens_details=InputTokensDetails(cached_tokens=4, cache_write_tokens=5),
        output_tokens_details=OutputTokensDetails(reasoning_tokens=6),
    )  # operands untouched
    assert sum([a, b], Usage()) == total


def test_usage_is_always_emitted_in_full():
    assert roundtrip_json(Usage()) == {
        "input_tokens": 0,
        "output_tokens": 0,
        "total_tokens": 0,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens_details": {"reasoning_tokens": 0},
    }


# --- chat completions --------------------------------------------------------------------------------


def test_openai_chat_completion_roundtrips_through_gym():
    original = OpenAIChatCompletion(
        id="chatcmpl_1",
        object="chat.completion",
        created=1_700_000_000,
        model="gpt-test",
        choices=[
            Choice(
                index=0,
                finish_reason="tool_calls",
                message=ChatCompletionMessage(
                    role="assistant",
                    content="Let me check.",
                    tool_calls=[
                        ChatCompletionMessageFunctionToolCall(
                            id="call_1", type="function", function=Function(name="f", arguments='{"x": 1}')
                        )
                    ],
                ),
            ),
            # No tool calls: openai dumps "tool_calls": null.
            Choice(index=1, finish_reason="stop", message=ChatCompletionMessage(role="assistant", content="Done.")),
        ],
        usage=CompletionUsage(prompt_tokens=3, completion_tokens=4, total_tokens=7),
    )
    gym = msgspec.json.decode(json.dumps(original.model_dump(mode="json")), type=ChatCompletion)
    assert gym.choices[0].message.tool_calls == [
        ChatToolCall(id="call_1", function=ChatToolCallFunction(name="f", arguments='{"x": 1}'))
    ]
    assert not gym.choices[1].message.tool_calls
    assert gym.usage == ChatUsage(prompt_tokens=3, completion_tokens=4, total_tokens=7)
    back = OpenAIChatCompletion.model_validate(roundtrip_json(gym))
    assert back.choices[0].message.tool_calls[0].function.arguments == '{"x": 1}'
    assert back.choices[1].message.content == "Done." and back.choices[1].finish_reason == "stop"
    assert back.usage == original.usage and back.id == "chatcmpl_1"


def test_gym_chat_completion_validates_as_openai():
    gym = ChatCompletion(
        model="m",
        choices=[
            ChatChoice(
                index=0,
                message=ChatMessage(role="assistant", content="hi", reasoning_content="hmm"),
                finish_reason="length",
            )
        ],
        usage=ChatUsage(prompt_tokens=1, completion_tokens=1, total_tokens=2),
    )
    parsed = OpenAIChatCompletion.model_validate(roundtrip_json(gym))
    assert parsed.choices[0].message.content == "hi" and parsed.choices[0].finish_reason == "length"
    assert parsed.id.startswith("chatcmpl") and parsed.usage.total_tokens == 2


def test_chat_request_from_a_dumped_openai_message_is_accepted():
    # A common client pattern: append the previous assistant message's model_dump() to messages.
    previous = ChatCompletionMessage(
        role="assistant",
        content=None,
        tool_calls=[
            ChatCompletionMessageFunctionToolCall(
                id="call_1", type="function", function=Function(name="f", arguments="{}")
            )
        ],
    ).model_dump(mode="json")
    body = {
        "model": "m",
        "messages": [
            {"role": "system", "content": "sys"},
            {"role": "user", "content": [{"type": "text", "text": "hi"}]},
            previous,
            {"role": "tool", "tool_call_id": "call_1", "content": "42"},
            ChatCompletionMessage(role="assistant", content="The answer is 42.").model_dump(mode="json"),
        ],
        "max_completion_tokens": 5,
        "stream": False,
    }
    request = msgspec.json.decode(json.dumps(body), type=ChatCompletionRequest)
    assert [m.role for m in request.messages] == ["system", "user", "assistant", "tool", "assistant"]
    assert request.messages[2].tool_calls[0].id == "call_1"
    assert request.messages[3].tool_call_id == "call_1"
    assert request.max_completion_tokens == 5


# --- the text views of the environments spec (§1.2) ---------------------------------------------------


def _views_response():
    from gym_core.schemas import decode_response

    return decode_response(
        {
            "output": [
                {"type": "reasoning", "summary": [{"type": "summary_text", "text": "thinking"}]},
                {
                    "type": "message",
                    "role": "assistant",
                    "content": [
                        {"type": "output_text", "text": "Hello "},
                        {"type": "refusal", "refusal": "no"},
                        {"type": "output_text", "text": " world"},
                    ],
                },
                {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c1", "output": "42"},
                {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go on"}]},
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Last. "}]},
            ]
        }
    )


def test_output_text_concatenates_every_output_text_part_with_no_separator():
    from gym_core.schemas import output_text

    assert output_text(_views_response()) == "Hello  worldLast. "


def test_assistant_text_joins_assistant_text_parts_by_newline_and_strips():
    from gym_core.schemas import assistant_text, last_assistant_text

    response = _views_response()
    assert assistant_text(response) == "Hello \n world\nLast."
    assert last_assistant_text(response) == "Last."
    empty = msgspec.structs.replace(response, output=[])
    assert (assistant_text(empty), last_assistant_text(empty)) == ("", "")


def test_last_user_text_reads_the_request_a_task_asks():
    from gym_core.schemas import decode_create_params, last_user_text

    params = decode_create_params(
        {
            "input": [
                {"role": "user", "content": "first question"},
                {"role": "assistant", "content": "an answer"},
                {
                    "role": "user",
                    "content": [
                        {"type": "input_text", "text": " second "},
                        {"type": "input_image", "image_url": "data:,"},
                        {"type": "input_text", "text": "part "},
                    ],
                },
                {"role": "system", "content": "a later system note"},
            ]
        }
    )
    assert last_user_text(params) == "second \npart"  # text parts joined by newlines, stripped; the image skipped
    assert last_user_text(decode_create_params({"input": "  a string input  "})) == "a string input"
    assert last_user_text(decode_create_params({"input": [{"role": "system", "content": "only this"}]})) == ""
