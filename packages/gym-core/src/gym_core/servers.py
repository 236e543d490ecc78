"""Base servers on Litestar: every gym server is one of these, run by uvicorn.

- :class:`GymServer`: liveness (``GET /health``) and readiness (``GET /ready``), config injection,
  JSON errors without stack traces, a request body size limit, sessions, a :class:`ServerClient`.
- :class:`ResourcesServer`: ``POST /seed_session``, ``POST /verify``, and one ``POST /<tool>`` per
  method decorated with :func:`tool`; ``GET /tools`` lists them as OpenAI function tools.
- :class:`ModelServer`: ``POST /v1/responses`` and ``POST /v1/chat/completions``; implement one,
  the other is derived through :mod:`gym_core.convert`.
- :class:`AgentServer`: ``POST /run`` (one rollout) and ``POST /v1/responses``.

Handlers read and write bodies with msgspec directly: one decode, one encode per request. The
``POST`` JSON routes (:meth:`GymServer.post_json`) are dispatched by a small raw-ASGI layer in front
of Litestar, which serves everything else (that layer and the others, :mod:`gym_core.asgi`).
"""

from __future__ import annotations

import inspect
import logging
import re
import secrets
import typing
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Mapping
from contextlib import asynccontextmanager
from typing import Any, ClassVar, Literal

import msgspec
from litestar import Litestar, Request, Response, get, post
from litestar.exceptions import HTTPException
from litestar.handlers import HTTPRouteHandler

from gym_core.asgi import SESSION_SCOPE_KEY, ConnectionLimits, JSONRouteTable, build_stack
from gym_core.client import ServerClient
from gym_core.convert import (
    chat_completion_to_response,
    chat_to_create_params,
    create_params_to_chat,
    response_to_chat_completion,
)
from gym_core.errors import (
    GymError,
    InfrastructureError,
    ServerCallError,
    ServerHTTPError,
    ServerTimeoutError,
    ServerUnavailableError,
    SessionError,
    ToolError,
)
from gym_core.failures import (
    DECODE_ERROR,
    FINAL_HEADER,
    INTERNAL_ERROR,
    TOOL_ERROR,
    VALIDATION_ERROR,
    ends_rollout,
    relayed_status,
)
from gym_core.openai_params import check_ranges, refuse_unsupported
from gym_core.options import ClientConfig, ServerConfig, ref_of
from gym_core.rollout import Rollout
from gym_core.rows import with_environment
from gym_core.schemas import (
    ChatCompletion,
    ChatCompletionRequest,
    FunctionCall,
    FunctionCallOutput,
    FunctionTool,
    LenientDecoder,
    Message,
    ResponseCreateParams,
    RunRequest,
    SeedSessionRequest,
    VerifyRequest,
    VerifyResponse,
    decode_create_params,
    decode_response,
)
from gym_core.schemas import Response as ResponsesResponse
from gym_core.sessions import Session, SessionSigner, SessionStore, cookie_name_for
from gym_core.streaming import EVENT_STREAM, chat_completion_sse, response_sse

if typing.TYPE_CHECKING:
    from gym_core.config import GlobalConfig

__all__ = [
    "GymServer",
    "ResourcesServer",
    "ModelServer",
    "AgentServer",
    "tool",
    "ToolSpec",
    "RESERVED_TOOL_NAMES",
]

_encoder = msgspec.json.Encoder()
JSON = "application/json"
_JSON_ROUTE = "gym_json_route"  # the key under which post_json routes keep their function in ``opt``


def json_response(obj: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    body = obj if isinstance(obj, bytes) else _encoder.encode(obj)
    return Response(content=body, status_code=status, media_type=JSON, headers=headers)


def error_response(message: str, status: int, kind: str) -> Response:
    return json_response({"error": {"message": message, "type": kind, "status": status}}, status)


class StartupError(GymError):
    """A server's ``startup()`` failed; the message says why."""


class GymServer:
    """Base of every gym server. Subclasses add routes by overriding :meth:`routes`."""

    kind: ClassVar[str] = ""

    def __init__(
        self, config: ServerConfig | None = None, *, name: str | None = None, global_config: GlobalConfig | None = None
    ):
        self.config = config if config is not None else ServerConfig()
        self.name = name or type(self).__name__
        self.global_config = global_config
        self.log = logging.getLogger(f"gym.server.{self.name}")
        self.sessions: SessionStore[Any] = SessionStore(
            self.config.session_ttl_s, max_sessions=self.config.max_sessions
        )
        self._signer = SessionSigner(self.config.session_secret)
        self.cookie_name = cookie_name_for(self.name)
        self._client: ServerClient | None = None
        self._own_clients: list[ServerClient] = []
        self.is_ready = False

    # --- lifecycle: override startup/shutdown to load models, open pools... ---

    async def startup(self) -> None:
        """Called once before the server accepts requests."""

    async def shutdown(self) -> None:
        """Called once when the server stops."""

    @property
    def client(self) -> ServerClient:
        """The pooled client this server uses to call other gym servers (created at start-up)."""
        if self._client is None:
            self._client = ServerClient(self.global_config, config=self.config.client)
        return self._client

    def own_client(self, config: ClientConfig) -> ServerClient:
        """A client of this server with limits of its own (a judge's timeout and attempts...), its
        connections pooled apart and closed when the server stops."""
        client = ServerClient(self.global_config, config=config)
        self._own_clients.append(client)
        return client

    @asynccontextmanager
    async def _lifespan(self, app: Litestar) -> AsyncIterator[None]:
        try:
            await self.startup()
        except Exception as exc:
            # One clear line for the user; the traceback goes to the debug log.
            self.log.debug("start-up failed", exc_info=True)
            raise StartupError(f"start-up of {self.name} failed: {type(exc).__name__}: {exc}") from None
        self.is_ready = True
        try:
            yield
        finally:
            self.is_ready = False
            await self.shutdown()
            for client in [self._client, *self._own_clients]:
                if client is not None:
                    await client.close()

    # --- sessions ---

    def session(self, request: Request) -> Session:
        """The caller's session (created, and its cookie set, on first use of ``.id``)."""
        return request.scope[SESSION_SCOPE_KEY]  # type: ignore[literal-required]

    def session_state(self, request: Request, factory: Callable[[], Any] = dict) -> Any:
        """The state this server keeps for the caller's session, created by ``factory`` if new."""
        return self.sessions.get_or_create(self.session(request).id, factory)

    def refuse_forged(self, session: Session) -> None:
        """Raise :class:`SessionError` (403 ``invalid_session``) when the caller's session cookie failed
        its signature check: a route that reads or scores existing state must not treat it as new."""
        if session.forged:
            raise SessionError(f"{self.name}: the session cookie failed its signature check", "invalid_session")

    def existing_session_state(self, session: Session | Request) -> Any:
        """The state of the caller's session, which must exist: a tool or ``verify`` that reads
        what ``seed_session`` stored calls this, so that a session lost to eviction, ``close_session``
        or a restart fails the rollout (:class:`SessionError`, a 409) instead of scoring a blank state."""
        if not isinstance(session, Session):
            session = self.session(session)
        self.refuse_forged(session)
        state = self.sessions.get(session.id) if session.exists else None
        if state is None:
            raise SessionError(
                f"{self.name}: no session state for this caller (never seeded, closed, evicted after "
                f"{self.config.session_ttl_s:g} s idle or for room, or lost in a restart); seed a new session"
            )
        return state

    # --- routes ---

    def routes(self) -> list[Any]:
        @get("/health", sync_to_thread=False)
        def health() -> Response:
            return json_response({"status": "ok", "name": self.name, "kind": self.kind})

        @get("/ready", sync_to_thread=False)
        def ready() -> Response:
            if self.is_ready:
                # sessions: how many this server holds now, to watch its session store (behind the token).
                return json_response({"status": "ready", "name": self.name, "sessions": len(self.sessions)})
            return error_response(f"{self.name} is starting", 503, "not_ready")

        return [health, ready]

    def post_json(self, path: str, fn: Callable[[Request], Awaitable[Any]]) -> Any:
        """A ``POST path`` route whose handler returns any msgspec-encodable object (or a Response).

        Served by :class:`gym_core.asgi.JSONRoutes` without Litestar's per-request machinery; the
        Litestar route stays registered (same behaviour) for what that layer passes on.
        """

        async def handler(request: Request) -> Response:
            result = await fn(request)
            return result if isinstance(result, Response) else json_response(result)

        handler.__name__ = f"post_{path.strip('/').replace('/', '_') or 'root'}"
        return post(path, opt={_JSON_ROUTE: fn})(handler)

    def build_app(self) -> Any:
        """The ASGI application serving this server: Litestar under gym's layers (the body's time
        bound, the run's token check when the config has one, sessions, the JSON routes), stacked by
        :func:`gym_core.asgi.build_stack`, with this server's connection bounds as its
        ``connection_limits`` (:class:`gym_core.asgi.ConnectionLimits`)."""
        handlers = self.routes()
        app = Litestar(
            route_handlers=handlers,
            exception_handlers={Exception: self._handle_exception},
            lifespan=[self._lifespan],
            request_max_body_size=self.config.max_body_bytes,
            openapi_config=None,
            logging_config=None,
            debug=False,
        )
        routes = {
            path: (handler.opt[_JSON_ROUTE], handler)
            for handler in handlers
            if isinstance(handler, HTTPRouteHandler) and _JSON_ROUTE in handler.opt
            for path in handler.paths
            if "{" not in path
        }
        stack = build_stack(
            app,
            token=self.global_config.auth_token if self.global_config is not None else None,
            body_timeout_s=self.config.body_timeout_s,
            sessions=(self.cookie_name, self._signer),
            json_routes=JSONRouteTable(routes, self.name, self.config.max_body_bytes, self._handle_exception),
        )
        # The connection bounds come with the app too: however it is served (gym run, a thread),
        # gym_core.serving.uvicorn_config reads them from here.
        stack.connection_limits = ConnectionLimits.of(self.config)
        return stack

    def _handle_exception(self, request: Request, exc: Exception) -> Response:
        # Clients get one clear line; tracebacks stay in this server's log.
        if isinstance(exc, HTTPException):
            return error_response(str(exc.detail), exc.status_code, type(exc).__name__)
        if isinstance(exc, msgspec.ValidationError):
            # Names the server (the environment) and the field: "math: invalid request body for /verify:
            # Object missing required field `expected_answer`".
            return error_response(
                f"{self.name}: invalid request body for {request.url.path}: {exc}",
                VALIDATION_ERROR.status,
                VALIDATION_ERROR.type,
            )
        if isinstance(exc, UnicodeError):
            # msgspec leaves some invalid UTF-8 (in object keys) for a later encode to find.
            return error_response(
                f"request body of {request.url.path} is not valid UTF-8", DECODE_ERROR.status, DECODE_ERROR.type
            )
        if isinstance(exc, RecursionError):
            # msgspec refuses JSON nested deeper than the interpreter's recursion limit.
            return error_response(
                f"request body of {request.url.path} is nested too deeply", DECODE_ERROR.status, DECODE_ERROR.type
            )
        if isinstance(exc, msgspec.DecodeError):
            return error_response(
                f"request body of {request.url.path} is not valid JSON: {exc}", DECODE_ERROR.status, DECODE_ERROR.type
            )
        if isinstance(exc, ToolError):
            return error_response(str(exc), exc.status, TOOL_ERROR.type)
        if isinstance(exc, SessionError):
            return error_response(str(exc), exc.status, exc.kind)
        if isinstance(exc, InfrastructureError):
            # Final: the dependency (a judge, the sandbox) had its own bounded retries already.
            self.log.warning("%s: %s", exc.kind, exc)
            body = {"error": {"message": str(exc), "type": exc.kind, "status": exc.status}}
            return json_response(body, exc.status, headers={FINAL_HEADER: "1"})
        if isinstance(exc, ServerCallError):
            # Transient upstream trouble stays retryable for our caller's caller (502/504); a
            # definite upstream refusal becomes 424 so that nobody retries it (the failure table).
            self.log.warning("upstream call failed: %s", exc)
            status = relayed_status(
                exc.status,
                timed_out=isinstance(exc, ServerTimeoutError),
                unreachable=isinstance(exc, ServerUnavailableError),
            )
            # This server's client already spent its bounded retries on the upstream: the answer is
            # final, so that retries do not multiply layer by layer (the collector retries rollouts).
            body = {"error": {"message": str(exc), "type": exc.reason, "status": status}}
            return json_response(body, status, headers={FINAL_HEADER: "1"})
        if isinstance(exc, GymError):
            return error_response(str(exc), 400, type(exc).__name__)
        # The exception's text may hold data that is not the caller's to see: it stays in the log,
        # found by the id the caller gets.
        error_id = secrets.token_hex(4)
        self.log.exception("unhandled error %s in %s %s", error_id, request.method, request.url.path)
        return error_response(
            f"internal error in {self.name} (error id {error_id}: see its log)",
            INTERNAL_ERROR.status,
            INTERNAL_ERROR.type,
        )


# --- resources servers --------------------------------------------------------------------------


class ToolSpec(msgspec.Struct, frozen=True):
    name: str
    description: str
    args_type: type
    method_name: str
    injected: tuple[str, ...]

    def definition(self) -> FunctionTool:
        schema = msgspec.json.schema(self.args_type)
        defs = schema.pop("$defs", {})
        params = dict(defs.pop(self.args_type.__name__, schema))
        params.pop("title", None)
        params.setdefault("properties", {})
        if defs:
            params["$defs"] = defs
        return FunctionTool(name=self.name, description=self.description, parameters=params)


def tool(fn: Callable[..., Any] | None = None, *, name: str | None = None, description: str | None = None) -> Any:
    """Mark a resources-server method as a tool, served at ``POST /tools/<name>`` (and at
    ``POST /<name>``, an alias kept for clients of the first layout).

    The parameters after ``self`` are the tool's arguments (JSON object body); their annotations
    (``Annotated[int, msgspec.Meta(description=...)]`` for a description) give the JSON schema the
    model sees. A parameter named ``session`` receives the caller's :class:`Session`, one named
    ``request`` the Litestar request. The docstring's first paragraph is the tool's description.
    Raise :class:`gym_core.ToolError` to report a failed call to the model.
    """

    def mark(method: Callable[..., Any]) -> Callable[..., Any]:
        method._gym_tool = {"name": name or method.__name__, "description": description}  # type: ignore[attr-defined]
        return method

    return mark(fn) if fn is not None else mark


_INJECTED = ("session", "request")
# Route names a tool may not take: its alias ``/<name>`` would shadow them. Names are restricted to
# what OpenAI function names allow, so a tool path never escapes ``/tools/``.
RESERVED_TOOL_NAMES = frozenset({"seed_session", "verify", "health", "ready", "tools", "close_session", "v1", "run"})
_TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


def _tool_spec(cls: type, method: Callable[..., Any]) -> ToolSpec:
    meta = method._gym_tool  # type: ignore[attr-defined]
    hints = typing.get_type_hints(method, include_extras=True)
    fields: list[tuple[Any, ...]] = []
    injected = []
    for pname, param in list(inspect.signature(method).parameters.items())[1:]:
        if pname in _INJECTED:
            injected.append(pname)
            continue
        hint = hints.get(pname, Any)
        fields.append((pname, hint) if param.default is inspect.Parameter.empty else (pname, hint, param.default))
    description = meta["description"] or inspect.cleandoc(method.__doc__ or "").split("\n\n")[0].replace("\n", " ")
    args_type = msgspec.defstruct(f"{cls.__name__}_{meta['name']}_args", fields, kw_only=True)
    return ToolSpec(meta["name"], description, args_type, method.__name__, tuple(injected))


def _body_type(method: Callable[..., Any], fallback: type) -> type:
    """The annotation of a handler method's ``body`` parameter (subclasses narrow it)."""
    hint = typing.get_type_hints(method).get("body")
    return hint if isinstance(hint, type) and issubclass(hint, msgspec.Struct) else fallback


class ResourcesServer(GymServer):
    """An environment: session state, tools, and a verifier that turns a response into a reward.

    Override :meth:`seed_session` and :meth:`verify`, and decorate tool methods with :func:`tool`.
    Annotate their ``body`` parameter with your subclass of the request struct to receive your
    task fields (``expected_answer``...).
    """

    kind = "resources"
    # The rewards verify() may give, lowest and highest; the conformance kit checks verdicts against it.
    reward_range: ClassVar[tuple[float, float]] = (0.0, 1.0)

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.tools: dict[str, ToolSpec] = {}
        for attr in dir(type(self)):
            method = getattr(type(self), attr, None)
            if callable(method) and hasattr(method, "_gym_tool"):
                spec = _tool_spec(type(self), method)
                if spec.name in RESERVED_TOOL_NAMES:
                    raise TypeError(f"{type(self).__name__}: tool name {spec.name!r} is reserved for a built-in route")
                if not _TOOL_NAME.fullmatch(spec.name):
                    raise TypeError(f"{type(self).__name__}: tool name {spec.name!r} must match [A-Za-z0-9_-]{{1,64}}")
                self.tools[spec.name] = spec
        self._seed_decoder = LenientDecoder(_body_type(self.seed_session, SeedSessionRequest))
        self._verify_decoder = LenientDecoder(_body_type(self.verify, VerifyRequest))

    async def seed_session(self, session: Session, body: SeedSessionRequest) -> Any:
        """Initialise the session's state from the task row. Default: nothing to do."""
        return None

    async def verify(self, session: Session, body: VerifyRequest) -> VerifyResponse:
        """Score the model's final response; return at least ``reward``."""
        raise NotImplementedError(f"{type(self).__name__} must implement verify()")

    def tool_definitions(self) -> list[FunctionTool]:
        """The tools as OpenAI function-tool definitions (Responses API shape)."""
        return [spec.definition() for spec in self.tools.values()]

    def routes(self) -> list[Any]:
        async def seed(request: Request) -> Any:
            body = self._seed_decoder.decode(await request.body())
            result = await self.seed_session(self.session(request), body)
            return {} if result is None else result

        async def verify(request: Request) -> Any:
            body = self._verify_decoder.decode(await request.body())
            session = self.session(request)
            self.refuse_forged(session)  # scoring someone's forged session would hand out a reward for nothing
            return await self.verify(session, body)

        async def close_session(request: Request) -> Any:
            session = self.session(request)
            return {"closed": session.exists and self.sessions.close(session.id)}

        @get("/tools", sync_to_thread=False)
        def list_tools() -> Response:
            return json_response(self.tool_definitions())

        handlers = [
            *super().routes(),
            self.post_json("/seed_session", seed),
            self.post_json("/verify", verify),
            self.post_json("/close_session", close_session),
            list_tools,
        ]

        @post("/tools/{name:str}", sync_to_thread=False)
        def unknown_tool(request: Request) -> Response:
            name = request.path_params["name"]
            known = ", ".join(sorted(self.tools)) or "none"
            return error_response(f"{self.name}: unknown tool {name!r}; its tools: {known}", 404, "unknown_tool")

        handlers.append(unknown_tool)
        for spec in self.tools.values():
            call = self._refusing_forged_sessions(self.tool_handler(spec))
            handlers.append(self.post_json(f"/tools/{spec.name}", call))
            handlers.append(self.post_json(f"/{spec.name}", call))
        return handlers

    def _refusing_forged_sessions(
        self, call: Callable[[Request], Awaitable[Any]]
    ) -> Callable[[Request], Awaitable[Any]]:
        async def guarded(request: Request) -> Any:
            self.refuse_forged(self.session(request))
            return await call(request)

        return guarded

    def tool_handler(self, spec: ToolSpec) -> Callable[[Request], Awaitable[Any]]:
        """The function serving one tool's route: by default, the body decoded strictly against the
        tool's argument struct (a 4xx naming the bad argument) and passed to its method.

        Override it for another calling convention (an environment reproducing a reference that
        passes the raw arguments and shows the model every failure, say). A forged session cookie
        is refused before it runs, whatever it does.
        """
        decoder = msgspec.json.Decoder(spec.args_type)
        method = getattr(self, spec.method_name)
        names = [f.name for f in msgspec.structs.fields(spec.args_type)]
        takes_session = "session" in spec.injected
        takes_request = "request" in spec.injected

        async def call(request: Request) -> Any:
            raw = await request.body()
            args = decoder.decode(raw or b"{}")
            kwargs = {n: getattr(args, n) for n in names}
            if takes_session:
                kwargs["session"] = self.session(request)
            if takes_request:
                kwargs["request"] = request
            result = method(**kwargs)
            if inspect.isawaitable(result):
                result = await result
            return result

        return call


# --- model servers ------------------------------------------------------------------------------


class ModelServer(GymServer):
    """An OpenAI-compatible model. Implement :meth:`responses` or :meth:`chat_completions`."""

    kind = "model"
    model_name: str = "gym-model"
    #: The OpenAI parameters this server honours (chat completions names; see
    #: :mod:`gym_core.openai_params`): any other set to a non-neutral value is refused with a 400
    #: naming it. ``None``: not checked here (a server that forwards requests to a backend that
    #: answers for itself). Ranges (``temperature`` 0-2...) are checked for every server.
    honours: ClassVar[frozenset[str] | None] = None

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        cls = type(self)
        if cls.responses is ModelServer.responses and cls.chat_completions is ModelServer.chat_completions:
            raise TypeError(f"{cls.__name__} must implement responses() or chat_completions()")

    async def responses(self, params: ResponseCreateParams) -> ResponsesResponse:
        """``POST /v1/responses``. Default: through :meth:`chat_completions`."""
        completion = await self.chat_completions(create_params_to_chat(params))
        return chat_completion_to_response(completion, params)

    async def chat_completions(self, request: ChatCompletionRequest) -> ChatCompletion:
        """``POST /v1/chat/completions``. Default: through :meth:`responses`."""
        return response_to_chat_completion(await self.responses(chat_to_create_params(request)))

    def check_params(self, body: Any, api: Literal["chat", "responses"]) -> None:
        """A 400 naming the parameter of ``body`` (a request as sent) that is out of OpenAI's range,
        or that this server does not :attr:`honours`."""
        check_ranges(body, self.name)
        if self.honours is not None:
            refuse_unsupported(body, api, self.honours, self.name)

    def routes(self) -> list[Any]:
        async def responses(request: Request) -> Any:
            raw = await request.body()
            obj = msgspec.json.decode(raw)
            self.check_params(obj, "responses")
            params = decode_create_params(obj if isinstance(obj, dict) else raw)
            if params.stream is True:  # the whole answer, as the events OpenAI streams
                return Response(content=response_sse(await self.responses(params)), media_type=EVENT_STREAM)
            return await self.responses(params)

        async def chat(request: Request) -> Any:
            obj = msgspec.json.decode(await request.body())
            self.check_params(obj, "chat")
            body = msgspec.convert(obj, ChatCompletionRequest)
            if body.stream is True:
                options = obj.get("stream_options") if isinstance(obj, dict) else None
                usage = isinstance(options, dict) and options.get("include_usage") is True
                sse = chat_completion_sse(await self.chat_completions(body), include_usage=usage)
                return Response(content=sse, media_type=EVENT_STREAM)
            return await self.chat_completions(body)

        @get("/v1/models", sync_to_thread=False)
        def models() -> Response:
            return json_response(
                {"object": "list", "data": [{"id": self.model_name, "object": "model", "owned_by": "gym"}]}
            )

        return [
            *super().routes(),
            self.post_json("/v1/responses", responses),
            self.post_json("/v1/chat/completions", chat),
            models,
        ]


# --- agent servers ------------------------------------------------------------------------------

_tools_decoder = msgspec.json.Decoder(list[FunctionTool])


class AgentServer(GymServer):
    """Orchestrates rollouts. Implement :meth:`run`; :meth:`responses` is optional.

    A rollout's contract with its environment belongs to this class, not to each agent: ``run()``
    does its work inside ``async with self.rollout(task) as rollout:``, which seeds the session,
    offers only the tools of the request, counts model and tool calls, verifies, and closes the
    session whether the rollout failed or not (:class:`gym_core.rollout.Rollout`); it returns
    ``rollout.result(verdict, response)``. The conformance kit (``AgentServerTests``) checks these
    invariants for every agent.

    ``POST /run`` decodes the task row into a :class:`~gym_core.schemas.RunRequest` (its
    ``responses_create_params`` typed) and keeps the row as sent in ``task``, to pass on to the
    resources server's ``seed_session`` and ``verify``. The rollout it returns is stamped with the
    environment that verified it (``resources_server``: the instance, ``environment``: its server
    type) when the agent's config names exactly one resources server, so that per-environment
    metrics find their rows.
    """

    kind = "agent"

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._run_decoder = LenientDecoder(RunRequest)
        hints = typing.get_type_hints(type(self.config), include_extras=True)
        refs = [name for name, hint in hints.items() if (ref := ref_of(hint)) is not None and ref.kind == "resources"]
        self._resources_option = refs[0] if len(refs) == 1 else None
        models = [name for name, hint in hints.items() if (ref := ref_of(hint)) is not None and ref.kind == "model"]
        self._model_option = models[0] if len(models) == 1 else None
        self._tools_of: dict[str, list[FunctionTool]] = {}

    async def run(self, body: RunRequest, task: dict[str, Any]) -> dict[str, Any]:
        """``POST /run``: one rollout of a task row.

        :param body: the row, ``responses_create_params`` decoded (nulls accepted, messages typed).
        :param task: the row as sent, every field included, for ``seed_session`` and ``verify``.
        :returns: the verify response's fields and ``response`` (the trajectory).
        """
        raise NotImplementedError(f"{type(self).__name__} must implement run()")

    async def responses(self, params: ResponseCreateParams) -> ResponsesResponse:
        """``POST /v1/responses``: the agent's multi-step interaction without verification."""
        raise HTTPException(status_code=501, detail=f"{type(self).__name__} does not serve /v1/responses")

    def rollout(
        self,
        task: Mapping[str, Any],
        *,
        resources_server: str | None = None,
        model_server: str | None = None,
        seed_path: str | None = "/seed_session",
    ) -> Rollout:
        """One rollout of ``task`` on ``resources_server``, as an async context manager that seeds the
        session on entry (``POST seed_path`` with the task; ``None``: no seed) and closes it on exit,
        whether the rollout failed or not. Use its ``call_model``, ``call_tool`` and ``verify``; return
        its ``result()``. See :class:`gym_core.rollout.Rollout`.

        ``resources_server`` and ``model_server`` default to the agent's options of those kinds
        (when its config has exactly one of each kind).
        """
        resources = resources_server or self._option_of_kind(self._resources_option, "resources")
        model = (
            model_server
            if model_server is not None
            else (getattr(self.config, self._model_option) if self._model_option else None)
        )
        return Rollout(self, task, resources_server=resources, model_server=model, seed_path=seed_path)

    def _option_of_kind(self, option: str | None, kind: str) -> str:
        if option is None:
            raise TypeError(f"{type(self).__name__}: its config has no single {kind} server option; pass {kind}_server")
        return getattr(self.config, option)

    async def call_tool(
        self, resources_server: str, call: FunctionCall, offered: Collection[str], cookies: dict[str, str]
    ) -> FunctionCallOutput:
        """Execute one function call of the model, the way every agent must.

        - Only a tool offered in this rollout (``offered``: the names in the request's ``tools``,
          exact match) is called, at ``POST /tools/<name>``: a model cannot reach ``seed_session``,
          ``verify`` or any other route by naming it; any other name becomes an "unknown tool"
          output the model sees.
        - An error the environment meant (a 4xx: bad arguments, a failed action) is the output.
        - An infrastructure failure (a 429 or 5xx, a timeout, an unreachable server, a lost or forged
          session: the failure table's "ends the rollout", :mod:`gym_core.failures`) is raised: the
          rollout fails with that typed reason and is retried, never scored.
        """
        if call.name not in offered or call.name in RESERVED_TOOL_NAMES:
            # A task naming a control route among its tools does not make it one.
            names = ", ".join(sorted(set(offered) - RESERVED_TOOL_NAMES)) or "none"
            message = f"unknown tool {call.name!r}: the tools offered are {names}"
            return FunctionCallOutput(call_id=call.call_id, output=_encoder.encode({"error": message}).decode())
        try:
            raw = await self.client.request(
                "POST", resources_server, f"/tools/{call.name}", body=call.arguments.encode(), cookies=cookies
            )
            text = raw.decode()
        except ServerHTTPError as exc:
            if ends_rollout(exc.status, exc.error_type):  # the failure table: not the model's to see
                raise
            text = _encoder.encode({"error": exc.detail}).decode()
        return FunctionCallOutput(call_id=call.call_id, output=text)

    async def resources_tools(self, resources_server: str) -> list[FunctionTool]:
        """The tools ``resources_server`` serves (``GET /tools``), fetched once: what an agent offers
        a task whose request names none."""
        tools = self._tools_of.get(resources_server)
        if tools is None:
            raw = await self.client.request("GET", resources_server, "/tools")
            tools = self._tools_of[resources_server] = _tools_decoder.decode(raw)
        return tools

    async def call_model(
        self,
        model_server: str,
        params: ResponseCreateParams,
        cookies: dict[str, str] | None = None,
        *,
        string_input_as_message: bool = True,
    ) -> ResponsesResponse:
        """One ``POST /v1/responses`` on ``model_server``, the way every agent makes it.

        A string ``input`` is sent as one user message (unless ``string_input_as_message`` is off);
        a 2xx answer that is not a Responses object is that server's failure (a typed
        :class:`ServerCallError`, failing the rollout), never the task's; an error status raises as
        :meth:`ServerClient.request` does.
        """
        if string_input_as_message and isinstance(params.input, str):
            params = msgspec.structs.replace(params, input=[Message(role="user", content=params.input)])
        raw = await self.client.request("POST", model_server, "/v1/responses", body=params, cookies=cookies)
        try:
            return decode_response(raw)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise ServerCallError(
                model_server, "/v1/responses", f"invalid response from the model server: {exc}"
            ) from None

    def environment_of_rollout(self) -> dict[str, str]:
        """``resources_server`` and ``environment`` fields for the rollouts of this agent, if known."""
        if self._resources_option is None:
            return {}
        instance = getattr(self.config, self._resources_option, None)
        found = self.global_config.instances.get(instance) if self.global_config and instance else None
        if found is None:
            return {}
        return {"resources_server": found.name, "environment": found.plugin}

    def routes(self) -> list[Any]:
        async def run(request: Request) -> Any:
            raw = await request.body()
            task = msgspec.json.decode(raw)
            if not isinstance(task, dict) or "responses_create_params" not in task:
                raise HTTPException(
                    status_code=422, detail="POST /run needs a JSON object with 'responses_create_params'"
                )
            body = self._run_decoder.convert(task)
            result = await self.run(body, task)
            return with_environment(result, self.environment_of_rollout()) if isinstance(result, dict) else result

        async def responses(request: Request) -> Any:
            return await self.responses(decode_create_params(await request.body()))

        async def chat(request: Request) -> Any:
            # The agent's /v1/responses, in chat completions' shape; an agent without one says what it serves.
            if type(self).responses is AgentServer.responses:
                raise HTTPException(
                    status_code=404,
                    detail=f"{self.name}: this agent serves POST /run (rollouts), not /v1/chat/completions"
                    " (it has no /v1/responses either)",
                )
            obj = msgspec.json.decode(await request.body())
            check_ranges(obj, self.name)
            body = msgspec.convert(obj, ChatCompletionRequest)
            if body.n not in (None, 1):
                raise HTTPException(status_code=400, detail=f"{self.name}: 'n' must be 1 for an agent")
            result = await self.responses(chat_to_create_params(body))
            response = result if isinstance(result, ResponsesResponse) else decode_response(msgspec.to_builtins(result))
            completion = response_to_chat_completion(response)
            if body.stream is True:
                return Response(content=chat_completion_sse(completion), media_type=EVENT_STREAM)
            return completion

        return [
            *super().routes(),
            self.post_json("/run", run),
            self.post_json("/v1/responses", responses),
            self.post_json("/v1/chat/completions", chat),
        ]
