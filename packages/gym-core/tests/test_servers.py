"""Base servers over real HTTP: health, JSON errors, resources tools, model endpoints, agents."""

from __future__ import annotations

import asyncio
import json
import re
from typing import Annotated, Any

import aiohttp
import msgspec
import openai
import pytest
from litestar import Request, get
from openai.types.chat import ChatCompletion as OpenAIChatCompletion
from openai.types.responses import FunctionTool as OpenAIFunctionTool
from openai.types.responses import Response as OpenAIResponse

from gym_core.config import GlobalConfig
from gym_core.errors import (
    GymError,
    ServerHTTPError,
    ServerTimeoutError,
    ServerUnavailableError,
    ToolError,
)
from gym_core.options import ModelRef, ResourcesRef, ServerConfig
from gym_core.schemas import (
    ChatChoice,
    ChatCompletion,
    ChatCompletionRequest,
    ChatMessage,
    ChatToolCall,
    ChatToolCallFunction,
    ChatUsage,
    Message,
    OutputText,
    Response,
    ResponseCreateParams,
    RunRequest,
    SeedSessionRequest,
    Usage,
    VerifyRequest,
    VerifyResponse,
    new_id,
    response_text,
)
from gym_core.servers import AgentServer, GymServer, ModelServer, ResourcesServer, tool
from gym_core.sessions import Session


async def fetch(method: str, url: str, body: Any = None, *, data: bytes | None = None, headers: dict | None = None):
    """One request with a fresh aiohttp session: (status, parsed JSON or text, headers)."""
    if body is not None:
        data = json.dumps(body).encode()
    async with aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar()) as http:
        async with http.request(method, url, data=data, headers=headers) as resp:
            raw = await resp.read()
            try:
                payload = json.loads(raw)
            except ValueError:
                payload = raw.decode()
            return resp.status, payload, resp.headers


def assert_error_body(payload: Any, status: int) -> str:
    """Every error is ``{"error": {"message", "type", "status"}}``; returns the message."""
    assert isinstance(payload, dict) and set(payload) == {"error"}
    error = payload["error"]
    assert set(error) == {"message", "type", "status"}
    assert error["status"] == status
    assert isinstance(error["message"], str) and error["message"]
    assert isinstance(error["type"], str) and error["type"]
    return error["message"]


# --- GymServer: health, readiness, errors -----------------------------------------------------------


class StrictItem(msgspec.Struct):
    a: int = 0
    b: int = 0


class StrictBody(msgspec.Struct):
    items: list[StrictItem]


class FailingServer(GymServer):
    kind = "resources"

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.events: list[str] = []

    async def startup(self) -> None:
        self.events.append("startup")

    async def shutdown(self) -> None:
        self.events.append("shutdown")

    def routes(self) -> list[Any]:
        async def boom(request: Request) -> Any:
            raise RuntimeError("boom in handler")

        async def echo(request: Request) -> Any:
            body = await request.body()
            return {"size": len(body)}

        async def strict(request: Request) -> Any:
            return msgspec.json.decode(await request.body(), type=StrictBody)

        async def raises(request: Request) -> Any:
            kind = msgspec.json.decode(await request.body())["kind"]
            errors = {
                "timeout": ServerTimeoutError("model", "/v1/responses", "no answer within 5 s"),
                "unavailable": ServerUnavailableError("model", "/v1/responses", "connection refused", attempts=3),
                "http_404": ServerHTTPError("model", "/nope", "not found", status=404),
                "http_503": ServerHTTPError("model", "/v1/responses", "overloaded", status=503, attempts=3),
                "gym": GymError("bad plugin option"),
                "tool": ToolError("teapot", status=418),
            }
            raise errors[kind]

        return [
            *super().routes(),
            self.post_json("/boom", boom),
            self.post_json("/echo", echo),
            self.post_json("/strict", strict),
            self.post_json("/raises", raises),
        ]


@pytest.fixture(scope="module")
def failing_url(serve):
    with serve(FailingServer(name="alpha")) as url:
        yield url


async def test_health_and_ready(serve):
    server = FailingServer(name="alpha")
    with serve(server) as url:
        status, body, headers = await fetch("GET", url + "/health")
        assert (status, body) == (200, {"status": "ok", "name": "alpha", "kind": "resources"})
        assert headers["Content-Type"].startswith("application/json")
        status, body, _ = await fetch("GET", url + "/ready")
        assert (status, body) == (200, {"status": "ready", "name": "alpha", "sessions": 0})
        assert server.events == ["startup"]
        server.is_ready = False
        status, body, _ = await fetch("GET", url + "/ready")
        assert status == 503 and "starting" in assert_error_body(body, 503)
    assert server.events == ["startup", "shutdown"]


async def test_unknown_path_is_a_json_404(failing_url):
    status, body, _ = await fetch("GET", failing_url + "/no/such/path")
    assert status == 404
    assert_error_body(body, 404)
    status, body, _ = await fetch("GET", failing_url + "/boom")  # exists, but POST only
    assert status == 405
    assert_error_body(body, 405)


async def test_invalid_json_is_a_400(failing_url):
    status, body, _ = await fetch("POST", failing_url + "/strict", data=b'{"items": [')
    assert status == 400
    message = assert_error_body(body, 400)
    assert "/strict" in message and "not valid JSON" in message
    assert body["error"]["type"] == "decode_error"


async def test_validation_error_is_a_422_naming_the_field_path(failing_url):
    status, body, _ = await fetch("POST", failing_url + "/strict", {"items": [{"a": 1}, {"b": "two"}]})
    assert status == 422
    message = assert_error_body(body, 422)
    assert "$.items[1].b" in message and "/strict" in message
    assert body["error"]["type"] == "validation_error"


async def test_unhandled_error_is_a_500_without_exception_text(failing_url, caplog):
    status, body, _ = await fetch("POST", failing_url + "/boom", {})
    assert status == 500
    message = assert_error_body(body, 500)
    assert "alpha" in message
    text = json.dumps(body)
    for leak in ("RuntimeError", "boom in handler", "Traceback", 'File "', ".py", "line "):
        assert leak not in text
    # The id in the answer finds the exception in the server's log.
    error_id = re.search(r"error id ([0-9a-f]{8})", message).group(1)
    logged = [r for r in caplog.records if error_id in r.getMessage()]
    assert logged and logged[0].exc_info and "boom in handler" in str(logged[0].exc_info[1])


async def test_body_over_the_limit_is_a_413(serve):
    with serve(FailingServer(ServerConfig(max_body_bytes=1000), name="alpha")) as url:
        status, body, _ = await fetch("POST", url + "/echo", data=b"x" * 900)
        assert (status, body) == (200, {"size": 900})
        status, body, _ = await fetch("POST", url + "/echo", data=b"x" * 5000)
        assert status == 413
        assert_error_body(body, 413)


@pytest.mark.parametrize(
    ("kind", "status", "type_", "text"),
    [
        ("timeout", 504, "ServerTimeoutError", "no answer within 5 s"),
        ("unavailable", 502, "ServerUnavailableError", "connection refused"),
        ("http_503", 502, "ServerHTTPError", "overloaded"),
        ("http_404", 424, "ServerHTTPError", "not found"),
        ("gym", 400, "GymError", "bad plugin option"),
        ("tool", 418, "tool_error", "teapot"),
    ],
)
async def test_gym_errors_map_to_statuses(failing_url, kind, status, type_, text):
    got, body, headers = await fetch("POST", failing_url + "/raises", {"kind": kind})
    assert got == status
    assert text in assert_error_body(body, status)
    assert body["error"]["type"] == type_
    # An upstream failure was already retried by this server's client: its callers must not retry
    # it again (retries at one layer), so the answer says it is final.
    assert ("x-gym-final" in headers) == (kind in ("timeout", "unavailable", "http_503", "http_404"))


# --- ResourcesServer: tools, seed, verify -----------------------------------------------------------


class CounterSeed(SeedSessionRequest, kw_only=True):
    start: int = 0


class CounterVerify(VerifyRequest, kw_only=True):
    expected: int


class Counter(ResourcesServer):
    async def seed_session(self, session: Session, body: CounterSeed) -> dict:
        self.sessions.set(session.id, {"count": body.start})
        return {"count": body.start}

    @tool
    async def add(
        self,
        session: Session,
        amount: Annotated[int, msgspec.Meta(description="How much to add")],
        note: Annotated[str, msgspec.Meta(description="Why")] = "",
    ) -> dict:
        """Add an amount to the counter.

        Second paragraph: not part of the description.
        """
        if amount < 0:
            raise ToolError(f"amount must be >= 0, got {amount}")
        state = self.sessions.get_or_create(session.id, lambda: {"count": 0})
        state["count"] += amount
        return {"count": state["count"], "note": note}

    @tool(name="read_value", description="Read the counter.")
    def read(self, session: Session, request: Request) -> dict:  # sync tools work too
        state = self.sessions.get(session.id) if session.exists else None
        return {"count": None if state is None else state["count"], "path": request.url.path}

    async def verify(self, session: Session, body: CounterVerify) -> VerifyResponse:
        state = self.sessions.get(session.id) if session.exists else None
        return VerifyResponse(reward=float(state is not None and state["count"] == body.expected))


@pytest.fixture(scope="module")
def counter_url(serve):
    with serve(Counter(name="counter")) as url:
        yield url


async def test_tools_are_listed_as_openai_function_tools(counter_url):
    status, tools, _ = await fetch("GET", counter_url + "/tools")
    assert status == 200
    by_name = {t["name"]: t for t in tools}
    assert set(by_name) == {"add", "read_value"}
    add = by_name["add"]
    assert add["type"] == "function"
    assert add["description"] == "Add an amount to the counter."
    assert add["parameters"]["type"] == "object"
    assert add["parameters"]["properties"] == {
        "amount": {"type": "integer", "description": "How much to add"},
        "note": {"type": "string", "description": "Why", "default": ""},
    }
    assert add["parameters"]["required"] == ["amount"]
    assert "title" not in add["parameters"]
    read = by_name["read_value"]
    assert read["description"] == "Read the counter."
    assert read["parameters"]["properties"] == {}  # session and request are injected, not arguments
    for definition in tools:
        OpenAIFunctionTool.model_validate({**definition, "strict": None})


async def test_tools_share_session_state_and_verify_sees_it(serve):
    server = Counter(name="counter")
    with serve(server) as url:
        async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as http:

            async def post(path: str, body: Any) -> tuple[int, Any]:
                async with http.post(url + path, json=body) as resp:
                    return resp.status, await resp.json()

            async def sessions_held() -> int:  # what /ready reports of the session store
                async with http.get(url + "/ready") as resp:
                    return (await resp.json())["sessions"]

            assert await sessions_held() == 0
            assert await post("/seed_session", {"start": 5, "unrelated_task_field": [1]}) == (200, {"count": 5})
            assert await sessions_held() == 1
            assert await post("/add", {"amount": 2}) == (200, {"count": 7, "note": ""})
            assert await post("/add", {"amount": 3, "note": "why not"}) == (200, {"count": 10, "note": "why not"})
            assert await post("/read_value", {}) == (200, {"count": 10, "path": "/read_value"})
            verify_body = {"responses_create_params": {"input": "q"}, "response": {"output": []}, "expected": 10}
            assert await post("/verify", verify_body) == (200, {"reward": 1.0})
            assert await post("/close_session", {}) == (200, {"closed": True})
            assert await sessions_held() == 0
            assert await post("/read_value", {}) == (200, {"count": None, "path": "/read_value"})
            assert await post("/verify", verify_body) == (200, {"reward": 0.0})
    assert len(server.sessions) == 0


async def test_tool_errors_and_bad_arguments(counter_url):
    url = counter_url
    status, body, _ = await fetch("POST", url + "/add", {"amount": -1})
    assert status == 400 and assert_error_body(body, 400) == "amount must be >= 0, got -1"
    assert body["error"]["type"] == "tool_error"
    status, body, _ = await fetch("POST", url + "/add", {"amount": "many"})
    assert status == 422 and "$.amount" in assert_error_body(body, 422)
    status, body, _ = await fetch("POST", url + "/add", {})
    assert status == 422 and "amount" in assert_error_body(body, 422)
    status, body, _ = await fetch("POST", url + "/verify", {"responses_create_params": {}, "response": {}})
    assert status == 422 and "expected" in assert_error_body(body, 422)
    status, body, _ = await fetch("POST", url + "/close_session", {})
    assert (status, body) == (200, {"closed": False})


@pytest.mark.parametrize("reserved", ["verify", "seed_session", "tools", "health"])
def test_tool_named_like_a_builtin_route_is_rejected(reserved):
    class Clashing(ResourcesServer):
        @tool(name=reserved)
        async def something(self) -> dict:
            """Clash."""
            return {}

    with pytest.raises(TypeError, match=repr(reserved)):
        Clashing()


def test_a_method_named_verify_cannot_be_a_tool():
    with pytest.raises(TypeError, match="'verify'"):

        class VerifyTool(ResourcesServer):
            @tool
            async def verify(self, session: Session, body: VerifyRequest) -> VerifyResponse:  # type: ignore[override]
                return VerifyResponse(reward=0.0)

        VerifyTool()


async def test_verify_not_implemented_is_a_500(serve):
    class NoVerify(ResourcesServer):
        pass

    with serve(NoVerify(name="nv")) as url:
        status, body, _ = await fetch("POST", url + "/verify", {"responses_create_params": {}, "response": {}})
    assert status == 500 and "internal error in nv" in assert_error_body(body, 500)


# --- ModelServer ---------------------------------------------------------------------------------------


class ChatOnlyModel(ModelServer):
    model_name = "chat-only"

    async def chat_completions(self, request: ChatCompletionRequest) -> ChatCompletion:
        last = request.messages[-1]
        if request.tools and last.role != "tool":
            name = request.tools[0]["function"]["name"]
            message = ChatMessage(
                role="assistant",
                content=None,
                tool_calls=[ChatToolCall(id="call_1", function=ChatToolCallFunction(name=name, arguments='{"x": 1}'))],
            )
            finish = "tool_calls"
        else:
            message = ChatMessage(role="assistant", content=f"chat echo: {last.content}")
            finish = "stop"
        return ChatCompletion(
            model=self.model_name,
            choices=[ChatChoice(index=0, message=message, finish_reason=finish)],
            usage=ChatUsage(prompt_tokens=3, completion_tokens=2, total_tokens=5),
        )


class ResponsesOnlyModel(ModelServer):
    model_name = "responses-only"

    async def responses(self, params: ResponseCreateParams) -> Response:
        text = params.input if isinstance(params.input, str) else str(params.input[-1].content)
        return Response(
            model=self.model_name,
            output=[
                Message(
                    id=new_id("msg"),
                    role="assistant",
                    status="completed",
                    content=[OutputText(text=f"resp echo: {text}")],
                )
            ],
            usage=Usage(input_tokens=4, output_tokens=3, total_tokens=7),
        )


@pytest.fixture(scope="module")
def model_urls(serve):
    with serve(ChatOnlyModel(name="policy")) as chat_url, serve(ResponsesOnlyModel(name="policy")) as responses_url:
        yield {ChatOnlyModel: chat_url, ResponsesOnlyModel: responses_url}


def test_model_server_must_implement_one_endpoint():
    class Neither(ModelServer):
        pass

    with pytest.raises(TypeError, match="Neither must implement responses\\(\\) or chat_completions\\(\\)"):
        Neither()
    ChatOnlyModel()
    ResponsesOnlyModel()


async def test_chat_only_model_serves_responses(model_urls):
    url = model_urls[ChatOnlyModel]
    status, body, _ = await fetch(
        "POST", url + "/v1/responses", {"input": [{"role": "user", "content": "hello"}], "instructions": "sys"}
    )
    assert status == 200
    parsed = OpenAIResponse.model_validate(body)
    assert parsed.output_text == "chat echo: hello"
    assert parsed.instructions == "sys" and parsed.usage.total_tokens == 5
    status, body, _ = await fetch(
        "POST",
        url + "/v1/responses",
        {"input": "use the tool", "tools": [{"type": "function", "name": "lookup", "parameters": {"type": "object"}}]},
    )
    parsed = OpenAIResponse.model_validate(body)
    assert [(i.type, i.name, i.arguments) for i in parsed.output] == [("function_call", "lookup", '{"x": 1}')]


async def test_responses_only_model_serves_chat_completions(model_urls):
    url = model_urls[ResponsesOnlyModel]
    status, body, _ = await fetch(
        "POST", url + "/v1/chat/completions", {"model": "x", "messages": [{"role": "user", "content": "hi"}]}
    )
    assert status == 200
    parsed = OpenAIChatCompletion.model_validate(body)
    assert parsed.choices[0].message.content == "resp echo: hi"
    assert parsed.choices[0].finish_reason == "stop"
    assert parsed.usage.prompt_tokens == 4 and parsed.usage.total_tokens == 7
    status, body, _ = await fetch("GET", url + "/v1/models")
    assert body["data"][0]["id"] == "responses-only"


@pytest.mark.parametrize("model_class", [ChatOnlyModel, ResponsesOnlyModel])
async def test_official_openai_client_gets_parsed_objects(model_urls, model_class):
    url = model_urls[model_class]
    async with openai.AsyncOpenAI(base_url=url + "/v1", api_key="x", max_retries=0, timeout=10) as client:
        response = await client.responses.create(model="any", input="ping")
        completion = await client.chat.completions.create(model="any", messages=[{"role": "user", "content": "pong"}])
    assert isinstance(response, OpenAIResponse)
    assert response.output_text.endswith("echo: ping")
    assert response.output[0].type == "message" and response.usage.total_tokens > 0
    assert isinstance(completion, OpenAIChatCompletion)
    assert completion.choices[0].message.content.endswith("echo: pong")
    assert completion.choices[0].message.role == "assistant"


async def test_official_openai_client_tool_call_roundtrip(model_urls):
    tools = [
        {
            "type": "function",
            "name": "lookup",
            "description": "Look up",
            "parameters": {"type": "object", "properties": {}},
        }
    ]
    url = model_urls[ChatOnlyModel]
    async with openai.AsyncOpenAI(base_url=url + "/v1", api_key="x", max_retries=0, timeout=10) as client:
        first = await client.responses.create(model="any", input="find it", tools=tools)
        call = first.output[0]
        assert call.type == "function_call" and call.name == "lookup"
        second = await client.responses.create(
            model="any",
            tools=tools,
            input=[
                {"role": "user", "content": "find it"},
                call.model_dump(exclude_none=True),
                {"type": "function_call_output", "call_id": call.call_id, "output": "found"},
            ],
        )
    assert second.output_text == "chat echo: found"
    assert second.tools[0].name == "lookup"


async def test_stream_true_streams_the_answer_as_openai_events(model_urls):
    """Every ModelServer streams (gym_core.streaming): the chat chunks and the Responses events the
    official client reads, for a chat-only server's converted /v1/responses too."""
    url = model_urls[ChatOnlyModel]
    async with openai.AsyncOpenAI(base_url=url + "/v1", api_key="x", max_retries=0, timeout=10) as client:
        stream = await client.chat.completions.create(
            model="any", messages=[{"role": "user", "content": "x"}], stream=True
        )
        text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
        async with client.responses.stream(model="any", input="x") as events:
            deltas = [e.delta async for e in events if e.type == "response.output_text.delta"]
            final = await events.get_final_response()
    assert text == "chat echo: x"
    assert deltas == ["chat echo: x"] and final.output_text == "chat echo: x"


# --- AgentServer ------------------------------------------------------------------------------------------


class EchoAgent(AgentServer):
    async def run(self, body: RunRequest, task: dict[str, Any]) -> dict[str, Any]:
        assert isinstance(body.responses_create_params, ResponseCreateParams)
        return {"reward": 1.0, "task_keys": sorted(task), "input": body.responses_create_params.input}


class AnsweringAgent(EchoAgent):
    """An agent with a /v1/responses of its own."""

    async def responses(self, params: ResponseCreateParams) -> Response:
        content = [OutputText(text=f"agent saw: {params.input[-1].content}")]
        return Response(model="agent", output=[Message(id=new_id("msg"), role="assistant", content=content)])


async def test_agents_answer_chat_completions_through_their_responses_or_say_what_they_serve(serve):
    messages = [{"role": "user", "content": "hi"}]
    with serve(AnsweringAgent(name="agent")) as url:
        async with openai.AsyncOpenAI(base_url=url + "/v1", api_key="x", max_retries=0, timeout=10) as client:
            completion = await client.chat.completions.create(model="any", messages=messages)
            stream = await client.chat.completions.create(model="any", messages=messages, stream=True)
            streamed = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
            with pytest.raises(openai.BadRequestError, match="'temperature'"):
                await client.chat.completions.create(model="any", messages=messages, temperature=9)
    assert completion.choices[0].message.content == streamed == "agent saw: hi"
    with serve(EchoAgent(name="agent")) as url:
        status, body, _ = await fetch("POST", url + "/v1/chat/completions", {"messages": messages})
    assert status == 404 and "serves POST /run" in body["error"]["message"]


class OneEnvironmentAgentConfig(ServerConfig, kw_only=True):
    resources_server: ResourcesRef
    judge: ModelRef | None = None


class OneEnvironmentAgent(EchoAgent):
    config: OneEnvironmentAgentConfig


async def test_agent_rollouts_record_the_environment_that_verified_them(serve):
    """Per-environment metrics need each row to say which environment (server type) verified it."""
    global_config = GlobalConfig(
        {
            "arith": {"plugin": "math", "port": 1},
            "judge": {"plugin": "scripted", "port": 2},
            "agent": {"plugin": "one_env_agent", "resources_server": "arith", "port": 3},
        }
    )
    config = OneEnvironmentAgentConfig(resources_server="arith", judge="judge")
    with serve(OneEnvironmentAgent(config, name="agent", global_config=global_config)) as url:
        status, body, _ = await fetch("POST", url + "/run", {"responses_create_params": {"input": "x"}})
    assert status == 200
    assert (body["resources_server"], body["environment"]) == ("arith", "math")
    # Without a config naming one resources server, nothing is guessed.
    with serve(EchoAgent(name="agent", global_config=global_config)) as url:
        status, body, _ = await fetch("POST", url + "/run", {"responses_create_params": {"input": "x"}})
    assert status == 200 and "environment" not in body


async def test_agent_run_and_default_responses(serve):
    with serve(EchoAgent(name="agent")) as url:
        status, body, _ = await fetch("POST", url + "/run", {"responses_create_params": {"input": "x"}, "extra": 1})
        assert (status, body) == (200, {"reward": 1.0, "task_keys": ["extra", "responses_create_params"], "input": "x"})
        status, body, _ = await fetch("POST", url + "/run", {"input": "x"})
        assert status == 422 and "responses_create_params" in assert_error_body(body, 422)
        status, body, _ = await fetch("POST", url + "/v1/responses", {"input": "x"})
        assert status == 501 and "EchoAgent" in assert_error_body(body, 501)


async def test_agent_responses_override(serve):
    class TalkingAgent(EchoAgent):
        async def responses(self, params: ResponseCreateParams) -> Response:
            return Response(
                output=[Message(id="msg_1", role="assistant", status="completed", content=f"agent: {params.input}")]
            )

    with serve(TalkingAgent(name="agent")) as url:
        status, body, _ = await fetch("POST", url + "/v1/responses", {"input": "hi"})
    assert status == 200
    assert response_text(msgspec.convert(body, Response)) == "agent: hi"


async def test_custom_get_route_on_a_gym_server(serve):
    class WithRoute(GymServer):
        def routes(self) -> list[Any]:
            @get("/custom", sync_to_thread=False)
            def custom() -> dict:
                return {"ok": True}

            return [*super().routes(), custom]

    with serve(WithRoute(name="w")) as url:
        assert (await fetch("GET", url + "/custom"))[:2] == (200, {"ok": True})
        status, body, _ = await fetch("GET", url + "/health")
        assert body["name"] == "w" and body["kind"] == ""


class Slow(GymServer):
    kind = "resources"

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.budgets: list[float] = []

    def routes(self) -> list[Any]:
        async def slow(request: Request) -> Any:
            self.budgets.append(float(request.headers["x-gym-timeout"]))
            await asyncio.sleep(30)
            return {}

        async def relay(request: Request) -> Any:
            return await self.client.post(msgspec.json.decode(await request.body())["url"], "/slow", {})

        return [*super().routes(), self.post_json("/slow", slow), self.post_json("/relay", relay)]


async def test_a_handler_and_its_calls_end_within_the_callers_wait(serve):
    """Bounded waits: a caller that waits 1 s (x-gym-timeout) gets a typed, final 504 by then, and
    the calls the handler makes for it are given less than that, never this server's own 600 s."""
    inner, outer = Slow(name="inner"), Slow(name="outer")
    with serve(inner) as inner_url, serve(outer) as outer_url:
        status, body, headers = await fetch(
            "POST", outer_url + "/relay", {"url": inner_url}, headers={"x-gym-timeout": "1.0"}
        )
        assert status == 504 and body["error"]["type"] in ("ServerTimeoutError", "deadline_exceeded"), body
        assert "x-gym-final" in headers
        assert len(inner.budgets) == 1 and 0 < inner.budgets[0] <= 1.0
        status, body, headers = await fetch("POST", outer_url + "/slow", {}, headers={"x-gym-timeout": "0.3"})
        assert (status, body["error"]["type"]) == (504, "deadline_exceeded") and "x-gym-final" in headers
