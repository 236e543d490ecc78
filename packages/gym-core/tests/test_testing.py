"""gym_core.testing: running_servers, and the conformance kit, which passes good servers and fails
broken ones (a 500 on a bad body, a reward out of range, an invalid tool schema...)."""

from __future__ import annotations

import contextlib
import inspect
import json
import socket
import textwrap
from typing import Annotated, Any

import msgspec
import pytest
from jsonschema import Draft202012Validator
from litestar import Request

from gym_core import (
    AgentServer,
    ModelRef,
    ModelServer,
    ResourcesRef,
    ResourcesServer,
    ServerCallError,
    ServerConfig,
    Session,
    hookimpl,
    tool,
)
from gym_core.client import ServerClient
from gym_core.plugins import PluginManager
from gym_core.schemas import (
    FunctionTool,
    Message,
    OutputText,
    Response,
    ResponseCreateParams,
    RunRequest,
    VerifyRequest,
    VerifyResponse,
    function_calls,
    response_text,
)
from gym_core.servers import GymServer
from gym_core.testing import (
    AgentServerTests,
    ModelServerTests,
    ResourcesServerTests,
    example_arguments,
    running_servers,
)

pytest_plugins = ["pytester"]


# --- running_servers ------------------------------------------------------------------------------


class Hello(GymServer):
    kind = "resources"

    def routes(self) -> list[Any]:
        async def hello(request: Request) -> Any:
            return {"from": self.name, "head": self.global_config.head_url}

        return [*super().routes(), self.post_json("/hello", hello)]


class HelloPlugin:
    @hookimpl
    def gym_register_servers(self, register):
        register(name="hello", kind="resources", server=Hello)


def refused(url: str) -> bool:
    host, port = url.removeprefix("http://").split(":")
    try:
        socket.create_connection((host, int(port)), timeout=0.5).close()
    except OSError:
        return True
    return False


async def test_running_servers_starts_and_stops_everything():
    plugins = PluginManager(load_entry_points=False)
    plugins.register(HelloPlugin(), name="hello_plugin")
    with running_servers({"one": {"plugin": "hello"}, "two": {"plugin": "hello"}}, plugins) as config:
        urls = [config.head_url, *(i.url for i in config.instances.values())]
        assert len(set(urls)) == 3
        async with await ServerClient.from_head(config.head_url) as client:
            assert await client.post("one", "/hello", {}) == {"from": "one", "head": config.head_url}
            assert await client.post("two", "/hello", {}) == {"from": "two", "head": config.head_url}
    assert all(refused(url) for url in urls)


def test_running_servers_rejects_a_bad_config_before_starting_anything():
    plugins = PluginManager(load_entry_points=False)
    plugins.register(HelloPlugin(), name="hello_plugin")
    with pytest.raises(Exception, match="did you mean 'hello'"):
        with running_servers({"one": {"plugin": "helo"}}, plugins):
            pass


# --- servers for the kit: good ones, and each broken in one way ----------------------------------

TASKS = [
    {"responses_create_params": {"input": "What is 2 + 2?"}, "expected_answer": "4"},
    {"responses_create_params": {"input": [{"role": "user", "content": "And 3 + 4?"}]}, "expected_answer": "7"},
]


class AnswerRequest(VerifyRequest, kw_only=True):
    expected_answer: str


class Adder(ResourcesServer):
    """Reward 1 when the response ends with the expected answer; one tool, ``add``."""

    @tool
    async def add(
        self,
        session: Session,
        a: Annotated[int, msgspec.Meta(description="first")],
        b: Annotated[int, msgspec.Meta(ge=0, description="second")] = 0,
    ) -> dict:
        """Add two integers."""
        calls = self.sessions.get_or_create(session.id, list)
        calls.append((a, b))
        return {"sum": a + b}

    async def verify(self, session: Session, body: AnswerRequest) -> VerifyResponse:
        return VerifyResponse(reward=float(response_text(body.response).rstrip(".}").endswith(body.expected_answer)))


class RewardTooHigh(Adder):
    async def verify(self, session: Session, body: AnswerRequest) -> VerifyResponse:
        return VerifyResponse(reward=2.0)


class WiderRange(RewardTooHigh):
    reward_range = (0.0, 2.0)


class InvalidToolSchema(Adder):
    def tool_definitions(self) -> list[FunctionTool]:
        return [FunctionTool(name="add", parameters={"type": "objekt", "properties": {"a": {"type": "integer"}}})]


class ParsesBodiesByHand(Adder):
    """A route of its own that parses its body with json.loads: a body that is not JSON raises, and
    gym answers 500."""

    def routes(self) -> list[Any]:
        async def submit(request: Request) -> Any:
            return {"got": json.loads(await request.body())["answer"]}

        return [*super().routes(), self.post_json("/submit", submit)]


class Echo(ModelServer):
    """Answers the text of the request's last message."""

    async def responses(self, params: ResponseCreateParams) -> Response:
        text = params.input if isinstance(params.input, str) else str(getattr(params.input[-1], "content", ""))
        if isinstance(params.input, list) and isinstance(params.input[-1].content, list):
            text = "".join(getattr(part, "text", "") for part in params.input[-1].content)
        return Response(
            model="echo", output=[Message(role="assistant", status="completed", content=[OutputText(text=text)])]
        )


class DisagreeingModel(Echo):
    async def chat_completions(self, request: Any) -> Any:
        completion = await super().chat_completions(request)
        completion.choices[0].message.content = "something else"
        return completion


class OneShotConfig(ServerConfig, kw_only=True):
    model_server: ModelRef
    resources_server: ResourcesRef


class OneShot(AgentServer):
    """Seed, ask the model once, verify: the rollout contract kept by the base class."""

    config: OneShotConfig

    async def run(self, body: RunRequest, task: dict[str, Any]) -> dict[str, Any]:
        async with self.rollout(task) as rollout:
            params = await rollout.offer(body.responses_create_params)
            response = await rollout.call_model(params)
            for call in function_calls(response):
                await rollout.call_tool(call)
            verdict = await rollout.verify(params, response)
        return rollout.result(verdict, response)


class Leaky(AgentServer):
    """Seed, ask, verify by hand, and never close the session."""

    config: OneShotConfig

    async def run(self, body: RunRequest, task: dict[str, Any]) -> dict[str, Any]:
        cookies: dict[str, str] = {}
        env, model = self.config.resources_server, self.config.model_server
        await self.client.request("POST", env, "/seed_session", body=task, cookies=cookies)
        response = await self.client.post(model, "/v1/responses", body.responses_create_params)
        verdict = await self.client.post(env, "/verify", {**task, "response": response}, cookies=cookies)
        return {**verdict, "response": response}


class RunsWhatTheModelNames(OneShot):
    """Sends every function call of the model to the environment route of that name."""

    async def run(self, body: RunRequest, task: dict[str, Any]) -> dict[str, Any]:
        async with self.rollout(task) as rollout:
            params = body.responses_create_params
            response = await rollout.call_model(params)
            for call in function_calls(response):
                try:
                    await rollout.post(f"/{call.name}", call.arguments.encode())
                except ServerCallError:
                    pass
            verdict = await rollout.verify(params, response)
        return rollout.result(verdict, response)


class ScoresFailures(OneShot):
    """Turns a failed verification into a reward of 0."""

    async def run(self, body: RunRequest, task: dict[str, Any]) -> dict[str, Any]:
        async with self.rollout(task) as rollout:
            params = body.responses_create_params
            response = await rollout.call_model(params)
            try:
                verdict = await rollout.verify(params, response)
            except ServerCallError:
                verdict = {"reward": 0.0}
        return rollout.result(verdict, response)


class Servers:
    @hookimpl
    def gym_register_servers(self, register):
        for name, server in {
            "adder": Adder, "reward_too_high": RewardTooHigh, "wider_range": WiderRange,
            "invalid_tool_schema": InvalidToolSchema, "parses_bodies_by_hand": ParsesBodiesByHand,
        }.items():  # fmt: skip
            register(name=name, kind="resources", server=server)
        register(name="echo", kind="model", server=Echo)
        register(name="disagreeing", kind="model", server=DisagreeingModel)
        register(name="one_shot", kind="agent", server=OneShot, config=OneShotConfig)
        register(name="leaky", kind="agent", server=Leaky, config=OneShotConfig)
        register(name="runs_what_the_model_names", kind="agent", server=RunsWhatTheModelNames, config=OneShotConfig)
        register(name="scores_failures", kind="agent", server=ScoresFailures, config=OneShotConfig)


class AdderTests(ResourcesServerTests):
    server_type = "adder"
    plugins = [Servers()]
    example_data = TASKS

    def response_for(self, row):
        return {
            "output": [
                {
                    "type": "message",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": row["expected_answer"]}],
                }
            ]
        }

    def expected_reward(self, row):
        return 1.0


class EchoTests(ModelServerTests):
    server_type = "echo"
    plugins = [Servers()]
    deterministic = True


class OneShotTests(AgentServerTests):
    server_type = "one_shot"
    plugins = [Servers()]
    model = {"plugin": "echo"}
    environment = {"plugin": "adder"}
    example_data = TASKS


def kit_tests(kit: type) -> list[str]:
    return sorted(name for name in dir(kit) if name.startswith("test_"))


def run_kit(kit: type, **attributes: Any) -> dict[str, str]:
    """Every test of ``kit`` (with ``attributes`` set) against its servers: name → "passed" or the failure."""
    cls = type(kit.__name__, (kit,), attributes)
    outcomes = {}
    with contextlib.ExitStack() as stack:
        servers = stack.enter_context(cls.running())
        probed = None
        for name in kit_tests(cls):
            test = getattr(cls(), name)
            if "agent_probe" in inspect.signature(test).parameters:
                probed = probed or stack.enter_context(cls.probe_running())
                args = (probed,)
            else:
                args = (servers,)
            try:
                test(*args)
            except AssertionError as failure:
                outcomes[name] = f"failed: {failure}"
            else:
                outcomes[name] = "passed"
    return outcomes


def failures(outcomes: dict[str, str]) -> dict[str, str]:
    return {name: outcome for name, outcome in outcomes.items() if outcome != "passed"}


# --- the kit passes good servers -----------------------------------------------------------------


def test_kit_passes_a_good_resources_server():
    outcomes = run_kit(AdderTests)
    assert set(outcomes) == {
        "test_health_answers", "test_ready_answers", "test_malformed_bodies_get_a_4xx_json_error",
        "test_tools_are_valid_json_schema", "test_each_tool_answers_valid_arguments",
        "test_seed_tool_verify_on_the_example_data", "test_a_forged_session_cookie_is_refused",
        "test_requests_without_the_run_token_are_refused",
        "test_unknown_tools_and_control_routes_are_not_tools",
    }  # fmt: skip
    assert failures(outcomes) == {}


def test_kit_passes_a_good_model_server():
    outcomes = run_kit(EchoTests)
    assert "test_the_openai_client_calls_both_endpoints" in outcomes and "test_both_endpoints_agree" in outcomes
    assert failures(outcomes) == {}


def test_kit_passes_a_good_agent():
    outcomes = run_kit(OneShotTests, expected_reward=lambda self, row: 0.0)  # the echo model repeats the question
    assert {
        "test_run_on_the_example_data",
        "test_the_rollout_closes_its_session",
        "test_the_model_reaches_only_the_tools_offered",
        "test_a_failing_environment_fails_the_run",
    } <= set(outcomes)
    assert failures(outcomes) == {}


def test_kit_fails_an_agent_that_leaves_sessions_open():
    found = failures(run_kit(OneShotTests, server_type="leaky", expected_reward=lambda self, row: 0.0))
    # (the adder keeps no state for a session, so the example rows leave nothing open there)
    assert set(found) == {
        "test_the_rollout_closes_its_session",
        "test_the_model_reaches_only_the_tools_offered",
        "test_a_failing_environment_fails_the_run",
    }
    assert "left 1 session(s) open" in found["test_the_rollout_closes_its_session"]
    assert "async with self.rollout(task)" in found["test_the_rollout_closes_its_session"]


def test_kit_fails_an_agent_that_runs_whatever_the_model_names():
    found = failures(
        run_kit(OneShotTests, server_type="runs_what_the_model_names", expected_reward=lambda self, row: 0.0)
    )
    assert list(found) == ["test_the_model_reaches_only_the_tools_offered"]
    message = found["test_the_model_reaches_only_the_tools_offered"]
    assert "the model's calls reached the environment" in message
    for route in ("/seed_session", "/verify", "/close_session", "/probe_unoffered_tool"):
        assert f"POST {route}'" in message


def test_kit_fails_an_agent_that_scores_a_failed_verification():
    found = failures(run_kit(OneShotTests, server_type="scores_failures", expected_reward=lambda self, row: 0.0))
    assert list(found) == ["test_a_failing_environment_fails_the_run"]
    assert "answered 200 while the environment failed" in found["test_a_failing_environment_fails_the_run"]


# --- and fails broken ones, in the test that names the problem ----------------------------------


def test_kit_fails_a_reward_outside_the_declared_range():
    found = failures(run_kit(AdderTests, server_type="reward_too_high", expected_reward=lambda self, row: None))
    assert list(found) == ["test_seed_tool_verify_on_the_example_data"]
    assert "outside reward_range (0.0, 1.0)" in found["test_seed_tool_verify_on_the_example_data"]
    # Declaring the range the environment gives fixes it.
    assert failures(run_kit(AdderTests, server_type="wider_range", expected_reward=lambda self, row: 2.0)) == {}


def test_kit_fails_a_reward_other_than_the_expected_one():
    found = failures(run_kit(AdderTests, response_for=lambda self, row: {"output": []}))
    assert list(found) == ["test_seed_tool_verify_on_the_example_data"]
    assert "reward 0.0, expected 1.0" in found["test_seed_tool_verify_on_the_example_data"]


def test_kit_fails_an_invalid_tool_schema():
    found = failures(run_kit(AdderTests, server_type="invalid_tool_schema"))
    assert "test_tools_are_valid_json_schema" in found
    assert "not valid JSON Schema" in found["test_tools_are_valid_json_schema"]


def test_kit_fails_a_500_on_a_malformed_body():
    found = failures(run_kit(AdderTests, server_type="parses_bodies_by_hand"))
    assert list(found) == ["test_malformed_bodies_get_a_4xx_json_error"]
    message = found["test_malformed_bodies_get_a_4xx_json_error"]
    assert "POST /submit with a body that is not JSON: status 500" in message


def test_kit_fails_model_endpoints_that_disagree():
    found = failures(run_kit(EchoTests, server_type="disagreeing"))
    assert "test_both_endpoints_agree" in found and "something else" in found["test_both_endpoints_agree"]
    # A model that samples may disagree: the endpoints must then only both answer.
    assert "test_both_endpoints_agree" not in failures(
        run_kit(EchoTests, server_type="disagreeing", deterministic=False)
    )


def test_kit_fails_an_agent_reward_outside_the_environment_range():
    found = failures(run_kit(OneShotTests, environment={"plugin": "reward_too_high"}))
    assert list(found) == ["test_run_on_the_example_data"]
    assert "outside the environment's range (0.0, 1.0)" in found["test_run_on_the_example_data"]


def test_kit_fails_without_example_data():
    with pytest.raises(pytest.fail.Exception, match="example_data is not set"):
        run_kit(AdderTests, example_data=None)


# --- pytest collects a subclass, runs the inherited tests, and not the base classes ---------------


def test_a_subclass_is_collected_with_every_kit_test(pytester: pytest.Pytester):
    pytester.makepyfile(
        test_generous=textwrap.dedent(
            """
            from gym_core import ResourcesServer, hookimpl
            from gym_core.schemas import VerifyResponse
            from gym_core.testing import ResourcesServerTests

            class Generous(ResourcesServer):
                async def verify(self, session, body):
                    return VerifyResponse(reward=10.0)

            class Plugin:
                @hookimpl
                def gym_register_servers(self, register):
                    register(name="generous", kind="resources", server=Generous)

            class TestGenerous(ResourcesServerTests):
                server_type = "generous"
                plugins = [Plugin()]
                example_data = [{"responses_create_params": {"input": "q"}}]
            """
        )
    )
    result = pytester.runpytest("-p", "no:cacheprovider", "-q", "-o", "asyncio_default_fixture_loop_scope=function")
    result.assert_outcomes(passed=8, failed=1)  # the base class imported there is not collected
    result.stdout.fnmatch_lines(
        ["*TestGenerous.test_seed_tool_verify_on_the_example_data*", "*reward 10.0 is outside reward_range*"]
    )


# --- example arguments ----------------------------------------------------------------------------


def test_example_arguments_are_valid_against_the_schema():
    schema = {
        "type": "object",
        "properties": {
            "n": {"type": "integer", "minimum": 3, "maximum": 9},
            "x": {"type": "number", "exclusiveMinimum": 0.5},
            "mode": {"enum": ["fast", "slow"]},
            "item": {"$ref": "#/$defs/Item"},
            "maybe": {"anyOf": [{"type": "null"}, {"type": "string", "minLength": 3}]},
            "tags": {"type": "array", "items": {"type": "string"}, "minItems": 2},
            "unused": {"type": "string"},
        },
        "required": ["n", "x", "mode", "item", "maybe", "tags"],
        "$defs": {"Item": {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}},
    }
    arguments = example_arguments(schema)
    Draft202012Validator(schema).validate(arguments)
    assert arguments == {"n": 3, "x": 1.5, "mode": "fast", "item": {"ok": True}, "maybe": "aaa", "tags": ["a", "a"]}
