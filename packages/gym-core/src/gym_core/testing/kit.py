"""The conformance kit's base classes: what every server kind shares, resources servers and models."""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import pytest

from gym_core.config import GlobalConfig
from gym_core.plugins import PluginManager, get_plugin_manager

if TYPE_CHECKING:
    from gym_core.servers import GymServer

from gym_core.testing.rows import (
    _wrong_type,
    assistant_response,
    conformance_response,
    conformance_reward,
    conformance_tool_calls,
    example_arguments,
    read_rows,
)
from gym_core.testing.running import HTTPCaller, assert_json_error, assert_ok, plugin_manager, start_servers


def reward_range_of(server: GymServer) -> tuple[float, float]:
    """The ``reward_range`` of a resources server's class."""
    from gym_core.servers import ResourcesServer

    assert isinstance(server, ResourcesServer), f"{type(server).__name__} is not a resources server"
    return type(server).reward_range


@dataclass
class RunningServers:
    """The servers of a kit test class, started: the config, the server objects, the one under test."""

    config: GlobalConfig
    servers: dict[str, GymServer]
    instance: str
    timeout_s: float = 120.0
    _post_routes: list[str] | None = field(default=None, repr=False)

    @property
    def server(self) -> GymServer:
        """The server object under test (its class, its options: ``server.config``)."""
        return self.servers[self.instance]

    @property
    def url(self) -> str:
        return self.config.instances[self.instance].url

    def caller(self, instance: str | None = None) -> HTTPCaller:
        """A new HTTP caller (a new session) of ``instance``, by default the one under test."""
        return HTTPCaller(
            self.config.instances[instance or self.instance].url, self.timeout_s, auth_token=self.config.auth_token
        )

    def post_routes(self) -> list[str]:
        """Every fixed ``POST`` path the server under test serves (tools included)."""
        if self._post_routes is None:
            from litestar.handlers import HTTPRouteHandler

            self._post_routes = sorted(
                {
                    path
                    for handler in self.server.routes()
                    if isinstance(handler, HTTPRouteHandler) and "POST" in handler.http_methods
                    for path in handler.paths
                    if "{" not in path
                }
            )
        return self._post_routes


class ServerTests:
    """What every kit class shares: which servers to start, and the health and readiness checks.

    Set either ``server_type`` (and ``options``), which starts one instance of it, or ``instances``,
    a config mapping of instance names to options (``{"policy": {"plugin": "scripted"}, ...}``), for
    a server that needs others; ``instance`` then names the one under test when several have its kind.
    ``plugins`` are the plugin objects to register (a plugin's ``plugin`` module, say); when empty,
    the installed ``gym`` entry points are loaded. Override :meth:`instances_config` to build the
    config when the servers start (a free port, a temporary file...).
    """

    kind: ClassVar[str] = ""
    server_type: ClassVar[str | None] = None
    options: ClassVar[Mapping[str, Any]] = {}
    instances: ClassVar[Mapping[str, Mapping[str, Any]] | None] = None
    instance: ClassVar[str | None] = None
    plugins: ClassVar[Sequence[object]] = ()
    request_timeout_s: ClassVar[float] = 120.0

    @classmethod
    def instances_config(cls) -> dict[str, Any]:
        """The config of the instances to start, called once per test class as its servers start."""
        if cls.instances is not None:
            return {name: dict(options) for name, options in cls.instances.items()}
        if not cls.server_type:
            raise TypeError(f"{cls.__name__}: set server_type (the registered name) or instances (a config mapping)")
        return {cls.server_type: {"plugin": cls.server_type, **cls.options}}

    @classmethod
    def plugin_manager(cls) -> PluginManager:
        """``plugins`` registered explicitly, or the installed entry points when there are none."""
        return plugin_manager(*cls.plugins) if cls.plugins else get_plugin_manager()

    @classmethod
    @contextlib.contextmanager
    def running(cls) -> Iterator[RunningServers]:
        """Start this class's servers; yields them, stops them on exit (what the ``gym_servers`` fixture does)."""
        # Like `gym run`, every server requires a token; the kit's callers send it.
        from gym_core.auth import new_token

        config = {"auth_token": new_token(), **cls.instances_config()}
        with start_servers(config, cls.plugin_manager()) as (global_config, servers):
            yield RunningServers(global_config, servers, cls._instance_under_test(servers), cls.request_timeout_s)

    @classmethod
    def _instance_under_test(cls, servers: Mapping[str, GymServer]) -> str:
        if cls.instance is not None:
            if cls.instance not in servers:
                raise TypeError(f"{cls.__name__}.instance: no instance {cls.instance!r} in {sorted(servers)}")
            return cls.instance
        if cls.instances is None and cls.server_type is not None and cls.server_type in servers:
            return cls.server_type
        of_kind = [name for name, server in servers.items() if server.kind == cls.kind]
        if len(of_kind) != 1:
            raise TypeError(
                f"{cls.__name__}: set instance to the name of the {cls.kind} server under test (found {of_kind})"
            )
        return of_kind[0]

    @pytest.fixture(scope="class")
    @classmethod
    def gym_servers(cls) -> Iterator[RunningServers]:
        """The running servers of this test class (started once for all its tests)."""
        with cls.running() as servers:
            yield servers

    def test_requests_without_the_run_token_are_refused(self, gym_servers: RunningServers) -> None:
        """Every route but ``GET /health`` answers 401 ``unauthorized`` to a request without the
        run's token, or with a wrong one (gym-core's ``BearerAuth``: a failure means the server is
        not served through ``GymServer.build_app``)."""
        for token in (None, "not-the-token"):
            caller = HTTPCaller(gym_servers.url, gym_servers.timeout_s, auth_token=token)
            assert caller.get("/health").status == 200
            for reply, what in (
                (caller.get("/ready"), "GET /ready"),
                *((caller.post(path, {}), f"POST {path}") for path in gym_servers.post_routes()),
            ):
                assert_json_error(reply, f"{what} without the token")
                assert (reply.status, reply.json()["error"]["type"]) == (401, "unauthorized"), (
                    f"{what}: {reply.text[:300]}"
                )

    def test_health_answers(self, gym_servers: RunningServers) -> None:
        """``GET /health`` answers 200 with ``{"status": "ok", "name": <instance>, "kind": <kind>}``.

        To fix: keep the base class's ``/health`` route (call ``super().routes()`` when overriding
        ``routes()``), and subclass the base server of the right kind (ResourcesServer, ModelServer,
        AgentServer) so that ``kind`` says what the server is.
        """
        body = assert_ok(gym_servers.caller().get("/health"), "GET /health")
        assert body == {"status": "ok", "name": gym_servers.instance, "kind": self.kind}, body

    def test_ready_answers(self, gym_servers: RunningServers) -> None:
        """``GET /ready`` answers 200 ``{"status": "ready", ...}`` once the server has started.

        To fix: keep the base class's ``/ready`` route (call ``super().routes()``), and make sure
        ``startup()`` returns (load models and open pools there; it must not block forever).
        """
        body = assert_ok(gym_servers.caller().get("/ready"), "GET /ready")
        assert body.get("status") == "ready" and body.get("name") == gym_servers.instance, body

    def test_malformed_bodies_get_a_4xx_json_error(self, gym_servers: RunningServers) -> None:
        """Every ``POST`` route answers a malformed body (not JSON, the wrong types, missing required
        fields) with a 4xx and ``{"error": {"message", "type", "status"}}``, never a 5xx.

        To fix: decode request bodies with msgspec structs (the base servers do: annotate the
        ``body`` parameter of ``seed_session``/``verify`` with your struct, give tools typed
        parameters) instead of indexing raw JSON, so that bad input raises a validation error,
        which gym answers with a 4xx; raise ``ToolError(message, status)`` for input you reject yourself.
        """
        checked = self.malformed_bodies(gym_servers)
        assert checked, "the server serves no POST route to check"
        for path, bodies in checked.items():
            for body in bodies:
                what = f"POST {path} with {body[:80]!r}"
                assert_json_error(gym_servers.caller().post(path, body), what)
        for path in gym_servers.post_routes():
            if path in checked:
                continue
            # A route of the plugin's own that may ignore its body: no 5xx, and a JSON error if any.
            reply = gym_servers.caller().post(path, b"{not json")
            assert reply.status < 500, (
                f"POST {path} with a body that is not JSON: status {reply.status}: {reply.text[:500]}"
            )
            if reply.status >= 400:
                assert_json_error(reply, f"POST {path} with a body that is not JSON")

    def malformed_bodies(self, servers: RunningServers) -> dict[str, list[bytes]]:
        """For each ``POST`` route that reads a body, bodies it must refuse with a 4xx (kind-specific)."""
        return {}


NOT_JSON = b'{"not": json'
NOT_AN_OBJECT = b"[1, 2, 3]"


class ResourcesServerTests(ServerTests):
    """The contract of a resources server (an environment).

    Class attributes, besides those of :class:`ServerTests`:

    - ``example_data``: the plugin's ``data/example.jsonl`` (a path), or a list of task rows.

    What to send for each example row, and the reward it must get, come from the row's
    ``conformance`` field when it has one (environments ignore the field, so the rows stay in
    the environment's own format; ``python -m benchmarks`` reads the same field)::

        {"responses_create_params": ..., "expected_answer": "B",
         "conformance": {"response": "The answer is B.", "reward": 1.0,
                         "tool_calls": [{"name": "get_synonym", "arguments": {"word": "big"}}]}}

    ``response`` is the assistant's text or a whole Responses API response object; each key is
    optional. Hooks (override them when a row field cannot say it):

    - :meth:`response_for`: the model response to verify for a row (default: ``conformance.response``,
      else the row's ``expected_answer`` in ``\\boxed{}``, else an empty assistant message);
    - :meth:`tool_calls_for`: the tool calls to make between seed and verify
      (default: ``conformance.tool_calls``, else none);
    - :meth:`expected_reward`: the reward a row must get (default: ``conformance.reward``, else any
      in ``reward_range``);
    - :meth:`tool_arguments`: valid arguments for a tool (default: derived from its schema).
    """

    kind = "resources"
    example_data: ClassVar[str | Path | Sequence[Mapping[str, Any]] | None] = None

    def response_for(self, row: Mapping[str, Any]) -> dict[str, Any]:
        """The Responses API response ``/verify`` scores for ``row``."""
        return conformance_response(row)

    def tool_calls_for(self, row: Mapping[str, Any]) -> list[tuple[str, dict[str, Any]]]:
        """``(tool name, arguments)`` calls made in the row's session after seeding, before verifying."""
        return conformance_tool_calls(row)

    def expected_reward(self, row: Mapping[str, Any]) -> float | None:
        """The reward ``row`` must get with :meth:`response_for` and :meth:`tool_calls_for` (None: any in range)."""
        return conformance_reward(row)

    def tool_arguments(self, tool: Mapping[str, Any]) -> dict[str, Any]:
        """Arguments the tool accepts (``tool`` is its definition from ``GET /tools``)."""
        return example_arguments(tool.get("parameters") or {})

    def example_rows(self) -> list[dict[str, Any]]:
        if self.example_data is None:
            pytest.fail(
                f"{type(self).__name__}.example_data is not set: point it at the plugin's example tasks, "
                "e.g. example_data = Path(__file__).parents[1] / 'data' / 'example.jsonl'"
            )
        rows = read_rows(self.example_data)
        assert rows, f"{self.example_data} holds no task rows"
        return rows

    def tools(self, servers: RunningServers) -> list[dict[str, Any]]:
        tools = assert_ok(servers.caller().get("/tools"), "GET /tools")
        assert isinstance(tools, list), f"GET /tools must answer a JSON list, got {tools!r}"
        return tools

    def test_tools_are_valid_json_schema(self, gym_servers: RunningServers) -> None:
        """``GET /tools`` lists function tools whose ``parameters`` are valid JSON Schema objects,
        each served at ``POST /tools/<name>``.

        To fix: declare tools with ``@tool`` on typed methods (``Annotated[int, msgspec.Meta(description=...)]``
        for a described parameter), so that gym derives the schema; if you override
        ``tool_definitions()``, check your schemas against the JSON Schema metaschema.
        """
        from jsonschema.validators import Draft202012Validator, validator_for

        routes = gym_servers.post_routes()
        for tool in self.tools(gym_servers):
            assert tool.get("type") == "function", f"a tool is not a function tool: {tool}"
            name = tool.get("name")
            assert isinstance(name, str) and re.fullmatch(r"[A-Za-z0-9_-]{1,64}", name), f"bad tool name: {name!r}"
            assert f"/tools/{name}" in routes, f"tool {name!r} is listed but no POST /tools/{name} route serves it"
            parameters = tool.get("parameters")
            assert isinstance(parameters, dict), f"tool {name!r}: parameters must be a JSON Schema object"
            validator = validator_for(parameters, default=Draft202012Validator)
            try:
                validator.check_schema(parameters)
            except Exception as exc:  # jsonschema.SchemaError
                raise AssertionError(f"tool {name!r}: parameters are not valid JSON Schema: {exc}") from None
            assert parameters.get("type") == "object", f"tool {name!r}: parameters must have type 'object'"

    def test_each_tool_answers_valid_arguments(self, gym_servers: RunningServers) -> None:
        """Each tool answers a call with valid arguments, in a seeded session, with 2xx JSON.

        To fix: make the tool accept every input its schema allows (the kit sends the required
        properties with the simplest values of their types), or override ``tool_arguments()``
        in the test class to return arguments your tool accepts.
        """
        from jsonschema.validators import Draft202012Validator, validator_for

        row = self.example_rows()[0]
        for tool in self.tools(gym_servers):
            arguments = self.tool_arguments(tool)
            schema = tool.get("parameters") or {}
            validator = validator_for(schema, default=Draft202012Validator)
            if validator(validator.META_SCHEMA).is_valid(schema):  # an invalid one fails the schema test
                validator(schema).validate(arguments)
            caller = gym_servers.caller()
            assert_ok(caller.post("/seed_session", row), "POST /seed_session with the first example row")
            assert_ok(caller.post(f"/tools/{tool['name']}", arguments), f"POST /tools/{tool['name']} with {arguments}")

    def test_seed_tool_verify_on_the_example_data(self, gym_servers: RunningServers) -> None:
        """Every row of the example data seeds a session, takes its tool calls, and verifies to a
        reward in the environment's ``reward_range``.

        To fix: keep ``data/example.jsonl`` rows in the shape ``seed_session`` and ``verify``
        decode (``responses_create_params`` plus your task fields); return at least ``reward``
        from ``verify``; set ``reward_range`` on the server class when rewards go beyond [0, 1];
        override ``response_for()``/``tool_calls_for()`` in the test class for rows that need them.
        """
        low, high = reward_range_of(gym_servers.server)
        for index, row in enumerate(self.example_rows()):
            what = f"example row {index}"
            assert isinstance(row.get("responses_create_params"), dict), f"{what} has no responses_create_params object"
            caller = gym_servers.caller()
            assert_ok(caller.post("/seed_session", row), f"{what}: POST /seed_session")
            for name, arguments in self.tool_calls_for(row):
                assert_ok(caller.post(f"/tools/{name}", arguments), f"{what}: POST /tools/{name} with {arguments}")
            verdict = assert_ok(
                caller.post("/verify", {**row, "response": self.response_for(row)}), f"{what}: POST /verify"
            )
            reward = verdict.get("reward") if isinstance(verdict, dict) else None
            assert isinstance(reward, (int, float)) and not isinstance(reward, bool), (
                f"{what}: no numeric reward in {verdict}"
            )
            assert low <= reward <= high, f"{what}: reward {reward} is outside reward_range ({low}, {high}): {verdict}"
            expected = self.expected_reward(row)
            if expected is not None:
                assert reward == expected, f"{what}: reward {reward}, expected {expected}: {verdict}"

    def test_a_forged_session_cookie_is_refused(self, gym_servers: RunningServers) -> None:
        """A session cookie whose signature does not check out is refused with 403
        ``invalid_session`` by ``verify`` and by every tool, never read as a new, empty session
        (a forged cookie must not score, nor read another caller's state). gym-core does this;
        a failure means a route bypasses ``ResourcesServer``'s handlers."""
        from gym_core.sessions import cookie_name_for

        row = self.example_rows()[0]
        caller = gym_servers.caller()
        caller.cookies = {cookie_name_for(gym_servers.instance): "0" * 32 + "." + "0" * 32}
        paths = ["/verify"] + [f"/tools/{tool['name']}" for tool in self.tools(gym_servers)]
        for path in paths:
            body = (
                {**row, "response": self.response_for(row)}
                if path == "/verify"
                else self.tool_arguments(next(t for t in self.tools(gym_servers) if f"/tools/{t['name']}" == path))
            )
            reply = caller.post(path, body)
            assert_json_error(reply, f"POST {path} with a forged session cookie")
            assert (reply.status, reply.json()["error"]["type"]) == (403, "invalid_session"), reply.text[:500]

    def test_unknown_tools_and_control_routes_are_not_tools(self, gym_servers: RunningServers) -> None:
        """``POST /tools/<name>`` answers 404 ``unknown_tool`` for a name that is not a tool, control
        routes included (``/tools/seed_session``, ``/tools/verify``): a model naming them reaches nothing."""
        caller = gym_servers.caller()
        for name in ("no_such_tool", "seed_session", "verify", "close_session"):
            reply = caller.post(f"/tools/{name}", {})
            assert_json_error(reply, f"POST /tools/{name}")
            assert (reply.status, reply.json()["error"]["type"]) == (404, "unknown_tool"), reply.text[:500]

    def malformed_bodies(self, servers: RunningServers) -> dict[str, list[bytes]]:
        response = json.dumps(assistant_response("")).encode()
        bodies = {
            "/seed_session": [NOT_JSON, NOT_AN_OBJECT],
            "/verify": [
                NOT_JSON,
                NOT_AN_OBJECT,
                b'{"response": ' + response + b"}",  # no responses_create_params
                b'{"responses_create_params": 5, "response": ' + response + b"}",
            ],
        }
        for tool in self.tools(servers):
            schema = tool.get("parameters") or {}
            bad = [NOT_JSON, NOT_AN_OBJECT]
            if schema.get("required"):
                bad.append(b"{}")
            valid = self.tool_arguments(tool)
            for name, prop in (schema.get("properties") or {}).items():
                wrong = _wrong_type(prop)
                if wrong is not ...:
                    bad.append(json.dumps({**valid, name: wrong}).encode())
            bodies[f"/tools/{tool['name']}"] = bad
        return bodies


class ModelServerTests(ServerTests):
    """The contract of a model server: both OpenAI endpoints, ``/v1/models``, the official client.

    Class attributes, besides those of :class:`ServerTests`:

    - ``prompt``: the user message of the test requests;
    - ``max_tokens``: their token limit (keep it small for real models);
    - ``deterministic``: the same request always gets the same text (greedy decoding, a scripted
      model): both endpoints must then answer the same text, not only both answer.

    Hooks: :meth:`responses_request` and :meth:`chat_request`, the bodies of the test requests
    (``prompt``, ``max_tokens`` and temperature 0 by default).
    """

    kind = "model"
    prompt: ClassVar[str] = "Say hello."
    max_tokens: ClassVar[int] = 16
    deterministic: ClassVar[bool] = False

    def responses_request(self) -> dict[str, Any]:
        """The ``POST /v1/responses`` body of the kit's requests."""
        return {
            "input": [{"role": "user", "content": self.prompt}],
            "max_output_tokens": self.max_tokens,
            "temperature": 0,
        }

    def chat_request(self) -> dict[str, Any]:
        """The ``POST /v1/chat/completions`` body of the kit's requests (the same conversation)."""
        return {"messages": [{"role": "user", "content": self.prompt}], "max_tokens": self.max_tokens, "temperature": 0}

    def _responses_text(self, servers: RunningServers) -> str:
        body = assert_ok(servers.caller().post("/v1/responses", self.responses_request()), "POST /v1/responses")
        assert body.get("object") == "response", f"not a Responses API response: {body}"
        output = body.get("output")
        assert isinstance(output, list) and output, f"the response has no output items: {body}"
        messages = [item for item in output if item.get("type") == "message" and item.get("role") == "assistant"]
        calls = [item for item in output if item.get("type") == "function_call"]
        assert messages or calls, f"the response holds neither an assistant message nor a function call: {output}"
        return "".join(
            part.get("text", "")
            for item in messages
            for part in item.get("content") or []
            if part.get("type") == "output_text"
        )

    def _chat_text(self, servers: RunningServers) -> str:
        body = assert_ok(
            servers.caller().post("/v1/chat/completions", self.chat_request()), "POST /v1/chat/completions"
        )
        assert body.get("object") == "chat.completion", f"not a chat completion: {body}"
        choices = body.get("choices")
        assert isinstance(choices, list) and choices, f"the completion has no choices: {body}"
        message = choices[0].get("message") or {}
        assert message.get("role") == "assistant", f"choice 0 is not an assistant message: {choices[0]}"
        assert isinstance(message.get("content"), str) or message.get("tool_calls"), f"the message is empty: {message}"
        return message.get("content") or ""

    def test_responses_answer(self, gym_servers: RunningServers) -> None:
        """``POST /v1/responses`` answers a one-message request with an assistant message or a call.

        To fix: implement ``responses()`` (or ``chat_completions()``, from which gym derives it)
        and return a ``Response`` whose ``output`` holds a ``Message(role="assistant", ...)``.
        """
        self._responses_text(gym_servers)

    def test_chat_completions_answer(self, gym_servers: RunningServers) -> None:
        """``POST /v1/chat/completions`` answers a one-message request with an assistant message.

        To fix: implement ``chat_completions()`` (or ``responses()``, from which gym derives it).
        """
        self._chat_text(gym_servers)

    def test_both_endpoints_agree(self, gym_servers: RunningServers) -> None:
        """Both endpoints answer the same request alike: the same text for a deterministic model
        (``deterministic = True``), an assistant message from each otherwise.

        To fix: serve one endpoint from the other (implement only ``responses()`` or only
        ``chat_completions()``; gym converts), or pass the same sampling options to your model
        from both; set ``deterministic = False`` if your model samples.
        """
        responses_text = self._responses_text(gym_servers)
        chat_text = self._chat_text(gym_servers)
        if self.deterministic:
            assert responses_text == chat_text, (
                f"/v1/responses said {responses_text!r}, /v1/chat/completions {chat_text!r}"
            )

    def test_models_lists_a_model(self, gym_servers: RunningServers) -> None:
        """``GET /v1/models`` answers an OpenAI model list with at least one model.

        To fix: keep the base class's ``/v1/models`` route (call ``super().routes()``) and set
        ``model_name`` on the server.
        """
        body = assert_ok(gym_servers.caller().get("/v1/models"), "GET /v1/models")
        assert body.get("object") == "list" and body.get("data"), body
        assert all(isinstance(model.get("id"), str) and model["id"] for model in body["data"]), body

    def test_the_openai_client_calls_both_endpoints(self, gym_servers: RunningServers) -> None:
        """The official ``openai`` client calls both endpoints and parses the answers.

        To fix: add ``openai`` to the test dependency group of the plugin's pyproject.toml; when
        the client fails to parse an answer, return gym's schema types (``Response``,
        ``ChatCompletion``) rather than hand-built dicts, so that every field it needs is there.
        """
        try:
            import openai
        except ImportError:
            pytest.fail("the openai package is missing: add openai>=1.60 to the plugin's `test` dependency group")
        # The openai SDK sends api_key as `Authorization: Bearer`: the run's token goes there.
        client = openai.OpenAI(
            base_url=f"{gym_servers.url}/v1",
            api_key=gym_servers.config.auth_token,
            max_retries=0,
            timeout=self.request_timeout_s,
        )
        try:
            response = client.responses.create(
                model="gym-test", input=self.prompt, max_output_tokens=self.max_tokens, temperature=0
            )
            completion = client.chat.completions.create(
                model="gym-test",
                messages=[{"role": "user", "content": self.prompt}],
                max_tokens=self.max_tokens,
                temperature=0,
            )
        finally:
            client.close()
        assert response.output, response
        assert completion.choices and completion.choices[0].message.role == "assistant", completion
        if self.deterministic:
            assert response.output_text == (completion.choices[0].message.content or "")

    def malformed_bodies(self, servers: RunningServers) -> dict[str, list[bytes]]:
        return {
            "/v1/responses": [NOT_JSON, NOT_AN_OBJECT, b'{"input": 5}', b'{"input": "hi", "temperature": "hot"}'],
            "/v1/chat/completions": [NOT_JSON, NOT_AN_OBJECT, b"{}", b'{"messages": "hello"}'],
        }
