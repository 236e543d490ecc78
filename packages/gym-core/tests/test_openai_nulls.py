"""Explicit nulls, as the ``openai`` SDK's ``model_dump()`` and NeMo Gym's datasets write them.

Every setting OpenAI allows to be null is accepted as null by every endpoint (resources
``/seed_session`` and ``/verify``, agent ``/run`` and ``/v1/responses``, model ``/v1/responses`` and
``/v1/chat/completions``), and null means what absent means: ``model: null`` is the server's model,
``tools: null`` no tools, and no null a caller sent is passed on to the next server. The inputs are
built from the SDK's own types, and the "every key null" bodies from the SDK's params TypedDicts, so
fields a new SDK adds are covered when it is installed.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

import aiohttp
import httpx
import msgspec
import openai
import pytest
import typing_extensions
from openai.types.chat import ChatCompletionMessage
from openai.types.chat.chat_completion_message_function_tool_call import ChatCompletionMessageFunctionToolCall, Function
from openai.types.chat.completion_create_params import CompletionCreateParamsNonStreaming
from openai.types.responses import (
    EasyInputMessage,
    ResponseFunctionToolCall,
    ResponseInputImage,
    ResponseInputText,
    ResponseOutputMessage,
    ResponseOutputText,
    ResponseReasoningItem,
    ResponseUsage,
    response_input_item,
)
from openai.types.responses import FunctionTool as OpenAIFunctionTool
from openai.types.responses import Response as OpenAIResponse
from openai.types.responses.response_create_params import ResponseCreateParamsNonStreaming
from openai.types.responses.response_reasoning_item import Summary
from openai.types.responses.response_usage import InputTokensDetails as OpenAIInputDetails
from openai.types.responses.response_usage import OutputTokensDetails as OpenAIOutputDetails

from gym_core.schemas import (
    ChatChoice,
    ChatCompletion,
    ChatCompletionRequest,
    ChatMessage,
    ChatUsage,
    FunctionCall,
    FunctionCallOutput,
    ItemReference,
    Message,
    OutputText,
    Response,
    ResponseCreateParams,
    RunRequest,
    SeedSessionRequest,
    VerifyRequest,
    VerifyResponse,
    decode_create_params,
    decode_response,
    function_calls,
    response_text,
)
from gym_core.servers import AgentServer, ModelServer, ResourcesServer
from gym_core.sessions import Session

CREATE_PARAMS_KEYS = sorted(typing_extensions.get_type_hints(ResponseCreateParamsNonStreaming))
CHAT_PARAMS_KEYS = sorted(typing_extensions.get_type_hints(CompletionCreateParamsNonStreaming))
# Item kinds as gym decodes sdk_input_items().
INPUT_KINDS = ["Message", "Message", "Reasoning", "FunctionCall", "FunctionCallOutput", "Message", "ItemReference"]


def null_params(typed_dict: type, **given: Any) -> dict[str, Any]:
    """Every key of an SDK params TypedDict set to null, except those ``given``."""
    return {**dict.fromkeys(typing_extensions.get_type_hints(typed_dict), None), **given}


def sdk_input_items() -> list[dict[str, Any]]:
    """One input item of each kind gym models, as the SDK's types dump them (nulls included)."""
    items = [
        EasyInputMessage(role="developer", content="Answer with a number."),  # "type": null
        response_input_item.Message(
            role="user",
            content=[
                ResponseInputText(type="input_text", text="What is 2+2?"),
                ResponseInputImage(type="input_image", detail="low", image_url="https://example.com/sum.png"),
            ],
        ),
        ResponseReasoningItem(type="reasoning", id="rs_0", summary=[Summary(type="summary_text", text="add")]),
        ResponseFunctionToolCall(type="function_call", call_id="call_0", name="add", arguments='{"a": 2, "b": 2}'),
        response_input_item.FunctionCallOutput(type="function_call_output", call_id="call_0", output="4"),
        ResponseOutputMessage(
            type="message",
            id="msg_0",
            role="assistant",
            status="completed",
            content=[ResponseOutputText(type="output_text", text="It is 4.", annotations=[])],
        ),
        response_input_item.ItemReference(id="msg_0"),  # "type": null
    ]
    return [item.model_dump() for item in items]


def sdk_response(answer: str = "4") -> dict[str, Any]:
    """``Response.model_dump()`` of a finished turn: reasoning, a function call, a message, usage."""
    return OpenAIResponse(
        id="resp_1",
        object="response",
        created_at=1_700_000_000.0,
        model="gpt-test",
        parallel_tool_calls=True,
        tool_choice="auto",
        tools=[OpenAIFunctionTool(type="function", name="add", parameters=None, strict=None)],
        output=[
            ResponseReasoningItem(type="reasoning", id="rs_1", summary=[Summary(type="summary_text", text="2+2")]),
            ResponseFunctionToolCall(type="function_call", call_id="call_1", name="add", arguments='{"a": 2, "b": 2}'),
            ResponseOutputMessage(
                type="message",
                id="msg_1",
                role="assistant",
                status="completed",
                content=[ResponseOutputText(type="output_text", text=answer, annotations=[])],
            ),
        ],
        usage=ResponseUsage(
            input_tokens=5,
            output_tokens=2,
            total_tokens=7,
            input_tokens_details=OpenAIInputDetails(cached_tokens=0, cache_write_tokens=0),
            output_tokens_details=OpenAIOutputDetails(reasoning_tokens=1),
        ),
    ).model_dump()


def dataset_row(**params: Any) -> dict[str, Any]:
    """A task row as NeMo Gym's datasets and rollout files carry it: every unset setting null."""
    return {
        "responses_create_params": null_params(ResponseCreateParamsNonStreaming, input=sdk_input_items(), **params),
        "expected_answer": "4",
    }


def sdk_chat_messages() -> list[dict[str, Any]]:
    """A chat history whose assistant turns are ``ChatCompletionMessage.model_dump()`` (nulls included)."""
    call = ChatCompletionMessageFunctionToolCall(
        id="call_0", type="function", function=Function(name="add", arguments="{}")
    )
    return [
        {"role": "system", "content": "Answer with a number.", "name": None},
        {"role": "user", "content": "What is 2+2?"},
        ChatCompletionMessage(role="assistant", content=None, tool_calls=[call]).model_dump(),
        {"role": "tool", "tool_call_id": "call_0", "content": "4"},
        ChatCompletionMessage(role="assistant", content="It is 4.").model_dump(),  # "tool_calls": null
        {"role": "user", "content": "Once more?"},
    ]


def top_level_nulls(obj: msgspec.Struct) -> list[str]:
    """The fields of ``obj`` that gym would send on as null."""
    return sorted(key for key, value in json.loads(msgspec.json.encode(obj)).items() if value is None)


# --- decoding -------------------------------------------------------------------------------------


@pytest.mark.parametrize("key", [k for k in CREATE_PARAMS_KEYS if k != "input"])
def test_a_null_create_param_decodes_as_absent(key):
    absent = decode_create_params(b'{"input": "hi"}')
    body = json.dumps({"input": "hi", key: None}).encode()
    assert msgspec.json.decode(body, type=ResponseCreateParams) == absent  # the typed decoder alone takes it
    assert decode_create_params(body) == absent
    assert json.loads(msgspec.json.encode(decode_create_params(body))) == {"input": "hi"}  # and sends no null on


@pytest.mark.parametrize("key", [k for k in CHAT_PARAMS_KEYS if k != "messages"])
def test_a_null_chat_param_decodes_as_absent(key):
    messages = [{"role": "user", "content": "hi"}]
    absent = msgspec.json.decode(json.dumps({"messages": messages}), type=ChatCompletionRequest)
    request = msgspec.json.decode(json.dumps({"messages": messages, key: None}), type=ChatCompletionRequest)
    assert request == absent
    assert json.loads(msgspec.json.encode(request)) == {"messages": messages}


def test_sdk_dumps_with_typed_items_need_no_normalising():
    # The typed decoder takes them in one pass: nulls cost nothing on the hot path.
    row = dataset_row()
    typed_items = [item for item in row["responses_create_params"]["input"] if item["type"] is not None]
    row["responses_create_params"]["input"] = typed_items
    body = msgspec.json.decode(json.dumps({**row, "response": sdk_response()}), type=VerifyRequest)
    params = body.responses_create_params
    assert [type(i).__name__ for i in params.input] == ["Reasoning", "FunctionCall", "FunctionCallOutput", "Message"]
    assert params.model is None and params.tools is None and params.tool_choice is None and params.reasoning is None
    assert response_text(body.response) == "4"


def test_sdk_input_items_decode_with_nulls_as_unset():
    params = decode_create_params(json.dumps(null_params(ResponseCreateParamsNonStreaming, input=sdk_input_items())))
    assert [type(i).__name__ for i in params.input] == INPUT_KINDS
    developer, user, reasoning, call, output, assistant, reference = params.input
    assert developer == Message(role="developer", content="Answer with a number.")
    assert user.status is None and user.content[1].image_url == "https://example.com/sum.png"
    assert reasoning.content is None and reasoning.encrypted_content is None and reasoning.status is None
    assert call == FunctionCall(call_id="call_0", name="add", arguments='{"a": 2, "b": 2}')
    assert output == FunctionCallOutput(call_id="call_0", output="4")
    assert assistant.content == [OutputText(text="It is 4.", logprobs=None)]
    assert reference == ItemReference(id="msg_0")
    # Re-encoded, the items carry none of the nulls: what gym sends on is what OpenAI accepts.
    assert all(
        value is not None for item in json.loads(msgspec.json.encode(params))["input"] for value in item.values()
    )


def test_sdk_response_dump_decodes_and_reencodes_as_an_openai_response():
    dumped = sdk_response()
    assert dumped["usage"] is not None and dumped["text"] is None and dumped["output"][1]["id"] is None
    response = decode_response(json.dumps(dumped))
    reasoning, call, message = response.output
    assert reasoning.encrypted_content is None and call.id is None and call.status is None
    assert [c.call_id for c in function_calls(response)] == ["call_1"] and response_text(response) == "4"
    assert response.tools[0].parameters is None and response.tools[0].strict is None
    assert response.instructions is None and response.temperature is None and response.usage.total_tokens == 7
    back = OpenAIResponse.model_validate(json.loads(msgspec.json.encode(response)))
    assert back.output_text == "4" and back.usage.total_tokens == 7 and back.tools[0].name == "add"


def test_null_fields_of_items_and_parts_read_as_none():
    params = decode_create_params(
        json.dumps(
            {
                "input": [
                    {"id": "msg_7"},  # an item reference without "type"
                    {"type": "function_call_output", "call_id": None, "output": "x", "id": None, "status": None},
                    {
                        "type": "message",
                        "role": "assistant",
                        "id": None,
                        "status": None,
                        "content": [{"type": "output_text", "text": "a", "annotations": None, "logprobs": None}],
                    },
                ]
            }
        )
    )
    assert params.input[0] == ItemReference(id="msg_7")
    assert params.input[1] == FunctionCallOutput(call_id=None, output="x")
    assert params.input[2].content == [OutputText(text="a", annotations=None, logprobs=None)]
    assert response_text(Response(output=[params.input[2]])) == "a"
    assert decode_response(json.dumps({**sdk_response(), "usage": None})).usage is None


# --- servers --------------------------------------------------------------------------------------


class AnswerRow(SeedSessionRequest, kw_only=True):
    responses_create_params: ResponseCreateParams
    expected_answer: str


class AnswerVerifyRequest(VerifyRequest, kw_only=True):
    expected_answer: str


class AnswerVerdict(VerifyResponse, kw_only=True):
    answer: str
    seen: dict[str, Any]


def seen(params: ResponseCreateParams) -> dict[str, Any]:
    """What a server decoded, for the tests to check that null reads as unset."""
    kinds = [type(i).__name__ for i in params.input] if isinstance(params.input, list) else "text"
    return {"model": params.model, "tools": params.tools, "tool_choice": params.tool_choice, "input": kinds}


class AnswerEnv(ResourcesServer):
    """Reward 1 when the response's text is the row's expected answer."""

    async def seed_session(self, session: Session, body: AnswerRow) -> Any:
        return {"seen": seen(body.responses_create_params)}

    async def verify(self, session: Session, body: AnswerVerifyRequest) -> AnswerVerdict:
        answer = response_text(body.response).strip()
        return AnswerVerdict(
            reward=float(answer == body.expected_answer), answer=answer, seen=seen(body.responses_create_params)
        )


class FourModel(ModelServer):
    """Always answers "4"; keeps every chat request it got (``/v1/responses`` arrives converted)."""

    model_name = "four"

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.requests: list[ChatCompletionRequest] = []

    async def chat_completions(self, request: ChatCompletionRequest) -> ChatCompletion:
        self.requests.append(request)
        return ChatCompletion(
            model=self.model_name,
            choices=[ChatChoice(index=0, message=ChatMessage(role="assistant", content="4"))],
            usage=ChatUsage(
                prompt_tokens=len(request.messages), completion_tokens=1, total_tokens=len(request.messages) + 1
            ),
        )


class RelayAgent(AgentServer):
    """One model call between seed and verify; ``/v1/responses`` is the model call alone."""

    def __init__(self, model_url: str, resources_url: str, **kwargs: Any):
        super().__init__(**kwargs)
        self.model_url = model_url
        self.resources_url = resources_url
        self.params: list[ResponseCreateParams] = []

    async def responses(self, params: ResponseCreateParams) -> Response:
        self.params.append(params)
        return decode_response(await self.client.request("POST", self.model_url, "/v1/responses", body=params))

    async def run(self, body: RunRequest, task: dict[str, Any]) -> dict[str, Any]:
        cookies: dict[str, str] = {}
        await self.client.request("POST", self.resources_url, "/seed_session", body=task, cookies=cookies)
        response = await self.responses(body.responses_create_params)
        # The row as sent, nulls included: verify decodes them too.
        raw = await self.client.request(
            "POST", self.resources_url, "/verify", body={**task, "response": response}, cookies=cookies
        )
        return {**msgspec.json.decode(raw), "response": response}


@pytest.fixture(scope="module")
def servers(serve):
    model = FourModel(name="policy")
    with contextlib.ExitStack() as stack:
        env_url = stack.enter_context(serve(AnswerEnv(name="env")))
        model_url = stack.enter_context(serve(model))
        agent = RelayAgent(model_url, env_url, name="agent")
        agent_url = stack.enter_context(serve(agent))
        yield {"env": env_url, "model": model_url, "agent": agent_url, "model_server": model, "agent_server": agent}


async def post(url: str, body: Any) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as http:
        async with http.post(url, data=json.dumps(body), headers={"content-type": "application/json"}) as resp:
            return resp.status, await resp.json()


def recording_client(base_url: str, sent: list[dict[str, Any]]) -> openai.AsyncOpenAI:
    """The official client, keeping the JSON body of each request it sends."""

    async def record(request: httpx.Request) -> None:
        sent.append(json.loads(request.content))

    http = httpx.AsyncClient(event_hooks={"request": [record]})
    return openai.AsyncOpenAI(base_url=base_url + "/v1", api_key="x", max_retries=0, timeout=10, http_client=http)


NULLS_SEEN = {"model": None, "tools": None, "tool_choice": None, "input": INPUT_KINDS}


async def test_verify_accepts_a_dataset_row_and_a_dumped_response(servers):
    status, verdict = await post(servers["env"] + "/verify", {**dataset_row(), "response": sdk_response("4")})
    assert status == 200, verdict
    assert verdict == {"reward": 1.0, "answer": "4", "seen": NULLS_SEEN}
    status, verdict = await post(servers["env"] + "/verify", {**dataset_row(), "response": sdk_response("5")})
    assert (status, verdict["reward"], verdict["answer"]) == (200, 0.0, "5")


async def test_seed_session_accepts_a_dataset_row(servers):
    status, body = await post(servers["env"] + "/seed_session", dataset_row())
    assert (status, body) == (200, {"seen": NULLS_SEEN})


async def test_model_responses_takes_every_param_null_from_the_openai_client(servers):
    sent: list[dict[str, Any]] = []
    params = null_params(ResponseCreateParamsNonStreaming, input=sdk_input_items())
    async with recording_client(servers["model"], sent) as client:
        response = await client.responses.create(**params)
    assert sent[0]["model"] is None and sent[0]["tools"] is None and sent[0]["text"] is None  # nulls were sent
    assert response.output_text == "4"
    assert response.model == "four"  # null model: the server's own
    assert response.tools == [] and response.tool_choice == "auto" and response.instructions is None
    assert response.temperature is None and response.max_output_tokens is None and response.usage.total_tokens > 0
    request = servers["model_server"].requests[-1]
    assert [m.role for m in request.messages] == ["developer", "user", "assistant", "tool", "assistant"]
    assert request.messages[2].tool_calls[0].function.name == "add"
    assert request.model is None and request.tools is None and request.tool_choice is None
    assert top_level_nulls(request) == []


async def test_model_chat_completions_takes_every_param_null_from_the_openai_client(servers):
    sent: list[dict[str, Any]] = []
    params = null_params(CompletionCreateParamsNonStreaming, messages=sdk_chat_messages())
    async with recording_client(servers["model"], sent) as client:
        completion = await client.chat.completions.create(**params)
    assert sent[0]["model"] is None and sent[0]["tools"] is None and sent[0]["messages"][4]["tool_calls"] is None
    assert completion.choices[0].message.content == "4" and completion.model == "four"
    request = servers["model_server"].requests[-1]
    assert [m.role for m in request.messages] == ["system", "user", "assistant", "tool", "assistant", "user"]
    assert request.messages[2].content is None and request.messages[2].tool_calls[0].id == "call_0"
    assert not request.messages[4].tool_calls and request.messages[0].name is None
    assert request.model is None and request.tools is None and request.max_tokens is None
    assert top_level_nulls(request) == []


async def test_agent_responses_takes_every_param_null_and_sends_none_on(servers):
    sent: list[dict[str, Any]] = []
    params = null_params(ResponseCreateParamsNonStreaming, input=sdk_input_items())
    async with recording_client(servers["agent"], sent) as client:
        response = await client.responses.create(**params)
    assert sent[0]["model"] is None
    assert response.output_text == "4" and response.model == "four"
    decoded = servers["agent_server"].params[-1]
    assert seen(decoded) == NULLS_SEEN and decoded.stream is None and decoded.instructions is None
    assert top_level_nulls(decoded) == []  # so the model got none of them
    assert top_level_nulls(servers["model_server"].requests[-1]) == []


async def test_agent_run_takes_a_dataset_row(servers):
    status, result = await post(servers["agent"] + "/run", dataset_row())
    assert status == 200, result
    assert (result["reward"], result["answer"], result["seen"]) == (1.0, "4", NULLS_SEEN)
    assert response_text(decode_response(result["response"])) == "4"
    assert seen(servers["agent_server"].params[-1]) == NULLS_SEEN


async def test_agent_run_with_a_dataset_row_naming_model_and_tools(servers):
    tools = [{"type": "function", "name": "add", "parameters": None, "strict": None, "description": None}]
    status, result = await post(
        servers["agent"] + "/run", dataset_row(model="gpt-test", tools=tools, tool_choice="auto", temperature=0.5)
    )
    assert status == 200, result
    assert result["seen"]["model"] == "gpt-test" and result["seen"]["tool_choice"] == "auto"
    assert result["seen"]["tools"] == [{"type": "function", "name": "add"}]  # its nulls not sent on
    request = servers["model_server"].requests[-1]
    assert request.model == "gpt-test" and request.temperature == 0.5
    assert request.tools == [
        {"type": "function", "function": {"name": "add", "parameters": {"type": "object", "properties": {}}}}
    ]
