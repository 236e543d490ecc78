"""An environment whose tools are those of an MCP server (stdio or Streamable HTTP), verified by a
rule the task row supplies.

At start-up the server connects once (bounded by ``connect_timeout_s``) and lists the MCP server's
tools: they are the environment's tools (``GET /tools``), names, descriptions and input schemas as
the MCP server gives them. Each session (``seed_session``) opens its own MCP connection: over stdio a
process of its own, so sessions share no state; over HTTP one MCP session of the shared server. A
tool call is checked against the tool's input schema here (a 422 naming the field), then sent to the
MCP server; its error result is the tool's error (400, the model sees it). An MCP server that dies,
hangs past ``call_timeout_s`` or cannot be reached is a typed infrastructure failure
(``502 mcp_server_failed``): the rollout fails and is run again, never scored.

``verify`` scores by the row's rule: ``expected_answer`` (the final answer), ``expected_calls`` (tool
calls the session must have made), ``checks`` (tool calls made at verify time whose results must
match, to read the state the episode left). Subclass :class:`McpToolsServer` and override
:meth:`McpToolsServer.score` for another rule.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import Mapping
from typing import Any

import msgspec
from litestar import Request, post
from litestar.handlers import HTTPRouteHandler
from litestar.response import Response

from gym_core import ResourcesServer, Session, ToolError
from gym_core.errors import InfrastructureError
from gym_core.failures import UNKNOWN_TOOL, VALIDATION_ERROR
from gym_core.schemas import FunctionTool, SeedSessionRequest, VerifyRequest, VerifyResponse, response_text
from gym_core.servers import RESERVED_TOOL_NAMES, error_response

from gym_mcp_tools.config import McpToolsConfig

__all__ = ["McpServerFailed", "McpToolsServer", "McpConnection", "ToolCall", "Check"]

_INVALID_PARAMS = -32602  # JSON-RPC's "invalid params"
_TOOL_NAME_CHARS = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")


class McpServerFailed(InfrastructureError):
    """The MCP server could not be started or reached, died, or did not answer in time: the
    verdict is unknown. Answered ``502 mcp_server_failed`` (final); the collector runs the rollout
    again."""

    kind = "mcp_server_failed"


class ToolCall(msgspec.Struct, kw_only=True):
    """A tool call the session must have made: ``arguments``, when given, must be a subset of the
    call's (each key with an equal value)."""

    name: str
    arguments: dict[str, Any] | None = None


class Check(msgspec.Struct, kw_only=True):
    """A tool call made at verify time whose result must equal ``expected`` (the call's structured
    result, or its text)."""

    name: str
    arguments: dict[str, Any] = {}
    expected: Any


class McpToolsSeedRequest(SeedSessionRequest, kw_only=True):
    allowed_tools: list[str] | None = None


class McpToolsVerifyRequest(VerifyRequest, kw_only=True):
    expected_answer: str | None = None
    expected_calls: list[ToolCall] | None = None
    checks: list[Check] | None = None


class McpToolsVerifyResponse(VerifyResponse, kw_only=True):
    answer: str
    tool_calls: int
    failed: list[str]


def _target(config: McpToolsConfig) -> Any:
    from mcp import StdioServerParameters

    if bool(config.command) == bool(config.url):
        raise ValueError("give the MCP server as exactly one of `command` (stdio) and `url` (Streamable HTTP)")
    if config.url:
        return config.url
    program, *args = config.command
    if program == "python":
        program = sys.executable
    return StdioServerParameters(command=program, args=args, env=dict(config.env) or None)


class McpConnection:
    """One MCP client connection, owned by a task of its own: the SDK's client must be entered and
    left in one task, while gym's requests call it from theirs."""

    def __init__(self, target: Any, *, name: str, connect_timeout_s: float, call_timeout_s: float):
        self.target = target
        self.name = name
        self.connect_timeout_s = connect_timeout_s
        self.call_timeout_s = call_timeout_s
        self._client: Any = None
        self._task: asyncio.Task[None] | None = None
        self._closing = asyncio.Event()

    async def open(self) -> McpConnection:
        ready: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._task = asyncio.create_task(self._own(ready))
        try:
            self._client = await asyncio.wait_for(asyncio.shield(ready), self.connect_timeout_s)
        except TimeoutError:
            await self.close()
            raise McpServerFailed(
                f"{self.name}: the MCP server did not answer within {self.connect_timeout_s:g} s"
            ) from None
        except Exception as exc:
            await self.close()
            raise McpServerFailed(f"{self.name}: could not connect to the MCP server: {_describe(exc)}") from None
        return self

    async def _own(self, ready: asyncio.Future[Any]) -> None:
        from mcp import Client

        try:
            async with Client(self.target, read_timeout_seconds=self.call_timeout_s) as client:
                ready.set_result(client)
                await self._closing.wait()
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc if isinstance(exc, Exception) else RuntimeError(repr(exc)))
            if not isinstance(exc, Exception):
                raise

    @property
    def alive(self) -> bool:
        return self._client is not None and self._task is not None and not self._task.done()

    async def list_tools(self) -> list[Any]:
        tools: list[Any] = []
        cursor = None
        while True:
            result = await self._bounded(self._client.list_tools(cursor=cursor), "listing its tools")
            tools.extend(result.tools)
            cursor = result.next_cursor
            if not cursor:
                return tools

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> Any:
        return await self._bounded(self._client.call_tool(name, arguments), f"calling {name!r}")

    async def _bounded(self, call: Any, what: str) -> Any:
        if not self.alive:
            call.close()
            raise McpServerFailed(f"{self.name}: the MCP server's connection is closed (the server exited?)")
        task = asyncio.ensure_future(call)
        assert self._task is not None
        done, _ = await asyncio.wait({task, self._task}, timeout=self.call_timeout_s, return_when="FIRST_COMPLETED")
        if task not in done:
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
            if self._task in done:
                raise McpServerFailed(f"{self.name}: the MCP server's connection ended while {what}")
            raise McpServerFailed(f"{self.name}: the MCP server did not answer within {self.call_timeout_s:g} s {what}")
        try:
            return task.result()
        except Exception as exc:
            from mcp import MCPError

            if isinstance(exc, MCPError) and exc.code == _INVALID_PARAMS:
                # The server refused the arguments (beyond their schema): the model's to see and fix.
                raise ToolError(exc.message) from None
            raise McpServerFailed(f"{self.name}: the MCP server failed {what}: {_describe(exc)}") from None

    async def close(self) -> None:
        self._closing.set()
        if self._task is not None and not self._task.done():
            try:
                await asyncio.wait_for(asyncio.shield(self._task), self.connect_timeout_s)
            except BaseException:
                self._task.cancel()
                with contextlib.suppress(BaseException):
                    await self._task


def _describe(exc: BaseException) -> str:
    inner = getattr(exc, "exceptions", None)  # an ExceptionGroup from the SDK's task groups: its first cause
    if inner:
        return _describe(inner[0])
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _result_text(result: Any) -> str:
    return "\n".join(getattr(part, "text", "") for part in result.content if getattr(part, "type", "") == "text")


def _result_value(result: Any) -> Any:
    """What gym answers for a tool call: the structured result when the tool has one, else its text."""
    if result.structured_content is not None:
        return result.structured_content
    return {"text": _result_text(result)}


class McpToolsServer(ResourcesServer):
    config: McpToolsConfig

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.mcp_tools: dict[str, FunctionTool] = {}
        self._validators: dict[str, Any] = {}
        self._connections: dict[str, McpConnection] = {}

    def _connection(self) -> McpConnection:
        return McpConnection(
            _target(self.config),
            name=self.name,
            connect_timeout_s=self.config.connect_timeout_s,
            call_timeout_s=self.config.call_timeout_s,
        )

    async def startup(self) -> None:
        from jsonschema.validators import Draft202012Validator, validator_for

        connection = await self._connection().open()
        try:
            listed = await connection.list_tools()
        finally:
            await connection.close()
        for tool in listed:
            if tool.name in RESERVED_TOOL_NAMES or not (set(tool.name) <= _TOOL_NAME_CHARS) or len(tool.name) > 64:
                raise ValueError(
                    f"the MCP server's tool {tool.name!r} cannot be a gym tool (a reserved or invalid name)"
                )
            schema = dict(tool.input_schema or {"type": "object"})
            schema.setdefault("properties", {})
            validator = validator_for(schema, default=Draft202012Validator)
            validator.check_schema(schema)
            self._validators[tool.name] = validator(schema)
            self.mcp_tools[tool.name] = FunctionTool(
                name=tool.name, description=tool.description or tool.name, parameters=schema
            )

    async def shutdown(self) -> None:
        connections, self._connections = list(self._connections.values()), {}
        await asyncio.gather(*(c.close() for c in connections))

    def tool_definitions(self) -> list[FunctionTool]:
        return list(self.mcp_tools.values())

    # --- sessions: one MCP connection each ---

    async def seed_session(self, session: Session, body: McpToolsSeedRequest) -> Any:
        await self._close_stale()
        unknown = sorted(set(body.allowed_tools or ()) - set(self.mcp_tools))
        if unknown:
            raise msgspec.ValidationError(f"allowed_tools names tools the MCP server lacks: {', '.join(unknown)}")
        old = self._connections.pop(session.id, None)
        if old is not None:
            await old.close()
        connection = await self._connection().open()
        self._connections[session.id] = connection
        allowed = set(body.allowed_tools) if body.allowed_tools is not None else set(self.mcp_tools)
        self.sessions.set(session.id, {"allowed": allowed, "calls": []})
        await self._close_stale()  # a session this one evicted for room (max_sessions)
        return {"tools": sorted(allowed)}

    async def _close_stale(self) -> None:
        """Close the connections of sessions the store no longer holds (evicted after their TTL)."""
        stale = [sid for sid in self._connections if sid not in self.sessions]
        for sid in stale:
            await self._connections.pop(sid).close()

    async def call(self, session: Session, name: str, arguments: dict[str, Any]) -> Any:
        """Call an MCP tool in the session's connection; record it among the session's calls."""
        state = self.existing_session_state(session)
        connection = self._connections.get(session.id)
        if connection is None:
            raise McpServerFailed(f"{self.name}: this session's MCP connection is gone; seed a new session")
        result = await connection.call_tool(name, arguments)
        value = _result_value(result)
        state["calls"].append({"name": name, "arguments": arguments, "error": bool(result.is_error)})
        if result.is_error:
            raise ToolError(_result_text(result) or f"{name} failed")
        return result, value

    def routes(self) -> list[Any]:
        handlers = [
            h
            for h in super().routes()
            if not (isinstance(h, HTTPRouteHandler) and h.paths & {"/tools/{name:str}", "/close_session"})
        ]

        @post("/tools/{name:str}", status_code=200)
        async def call_tool(request: Request) -> Response:
            name = request.path_params["name"]
            session = self.session(request)
            self.refuse_forged(session)
            if name not in self.mcp_tools:
                known = ", ".join(sorted(self.mcp_tools)) or "none"
                return error_response(
                    f"{self.name}: unknown tool {name!r}; its tools: {known}", UNKNOWN_TOOL.status, UNKNOWN_TOOL.type
                )
            arguments = msgspec.json.decode(await request.body() or b"{}")
            if not isinstance(arguments, dict):
                return error_response(
                    f"{self.name}: the arguments of {name!r} must be a JSON object",
                    VALIDATION_ERROR.status,
                    VALIDATION_ERROR.type,
                )
            error = next(iter(self._validators[name].iter_errors(arguments)), None)
            if error is not None:
                where = "/".join(str(p) for p in error.absolute_path) or "(the arguments)"
                return error_response(
                    f"{self.name}: invalid arguments for {name!r} at {where}: {error.message}",
                    VALIDATION_ERROR.status,
                    VALIDATION_ERROR.type,
                )
            state = self.existing_session_state(session)
            if name not in state["allowed"]:
                allowed = ", ".join(sorted(state["allowed"])) or "none"
                return error_response(
                    f"{self.name}: tool {name!r} is not offered in this task; its tools: {allowed}",
                    UNKNOWN_TOOL.status,
                    UNKNOWN_TOOL.type,
                )
            _, value = await self.call(session, name, arguments)
            return Response(content=msgspec.json.encode(value), media_type="application/json")

        async def close_session(request: Request) -> Any:
            session = self.session(request)
            connection = self._connections.pop(session.id, None) if session.exists else None
            if connection is not None:
                await connection.close()
            return {"closed": session.exists and self.sessions.close(session.id)}

        # The tools' fixed paths, for whoever lists the routes once the tools are known (the
        # conformance kit): the server itself serves them all through the route above.
        fixed = [self.post_json(f"/tools/{name}", self._fixed_route_unused) for name in self.mcp_tools]
        return [*handlers, call_tool, self.post_json("/close_session", close_session), *fixed]

    async def _fixed_route_unused(self, request: Request) -> Any:  # pragma: no cover - shadowed by call_tool
        raise ToolError("unreachable", 500)

    # --- verify ---

    async def verify(self, session: Session, body: McpToolsVerifyRequest) -> McpToolsVerifyResponse:
        if body.expected_answer is None and body.expected_calls is None and body.checks is None:
            raise msgspec.ValidationError(
                "the row gives no rule to verify by: expected_answer, expected_calls or checks"
            )
        state = self.existing_session_state(session)
        answer = response_text(body.response).strip()
        failed = await self.score(session, body, answer, state["calls"])
        return McpToolsVerifyResponse(
            reward=0.0 if failed else 1.0, answer=answer, tool_calls=len(state["calls"]), failed=failed
        )

    async def score(
        self, session: Session, body: McpToolsVerifyRequest, answer: str, calls: list[dict[str, Any]]
    ) -> list[str]:
        """The rules the episode failed (none: reward 1). Override it for another verifier."""
        failed: list[str] = []
        if body.expected_answer is not None:
            expected = body.expected_answer.strip()
            same = answer.lower() == expected.lower() if self.config.ignore_case else answer == expected
            if not same:
                failed.append("expected_answer")
        for index, want in enumerate(body.expected_calls or ()):
            if not any(_matches(want, call) for call in calls):
                failed.append(f"expected_calls[{index}]")
        for index, check in enumerate(body.checks or ()):
            if check.name not in self.mcp_tools:
                raise msgspec.ValidationError(f"checks[{index}] names {check.name!r}, not a tool of the MCP server")
            connection = self._connections.get(session.id)
            if connection is None:
                raise McpServerFailed(f"{self.name}: this session's MCP connection is gone; seed a new session")
            result = await connection.call_tool(check.name, dict(check.arguments))
            if result.is_error or check.expected not in (result.structured_content, _result_text(result)):
                failed.append(f"checks[{index}]")
        return failed


def _matches(want: ToolCall, call: Mapping[str, Any]) -> bool:
    if call["name"] != want.name or call["error"]:
        return False
    arguments = call["arguments"]
    return all(k in arguments and arguments[k] == v for k, v in (want.arguments or {}).items())
