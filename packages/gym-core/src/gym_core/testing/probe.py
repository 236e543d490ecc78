"""The probe servers of the agent kit: an environment that records every request it gets, and a
model that tries what a hostile policy would.

:class:`ProbeModel` answers a conversation's first turn with function calls named after the
environment's control routes (``seed_session``, ``verify``, ``close_session``), one tool nobody
offered (:data:`UNOFFERED_TOOL`), and each tool the request offers; every later turn with a plain
message. Each call's arguments carry :data:`MARKER`, so that the probe environment can tell a
request the model caused from one the agent made.

:class:`ProbeEnvironment` serves both protocols an agent may speak: ``/seed_session`` → tools →
``/verify``, and ``/reset`` → ``/step`` → ``/close``. Each session start stores state (so a session
left open shows in ``len(sessions)``); a row with ``probe_fail: true`` makes ``/verify`` and
``/step`` answer 500, as a broken environment would. Every request is kept in ``requests``.

Both are registered by :data:`plugin` under :data:`PROBE_ENVIRONMENT` and :data:`PROBE_MODEL`.
"""

from __future__ import annotations

import json
import threading
from typing import Annotated, Any

import msgspec
from litestar import Request

from gym_core.hookspecs import hookimpl
from gym_core.options import ServerConfig
from gym_core.schemas import (
    FunctionCall,
    FunctionCallOutput,
    FunctionTool,
    Item,
    Message,
    OutputText,
    Reasoning,
    Response,
    ResponseCreateParams,
    SeedSessionRequest,
    Usage,
    VerifyRequest,
    VerifyResponse,
)
from gym_core.servers import ModelServer, ResourcesServer, error_response, tool
from gym_core.sessions import Session

__all__ = [
    "MARKER",
    "UNOFFERED_TOOL",
    "CONTROL_ROUTES",
    "PROBE_ENVIRONMENT",
    "PROBE_MODEL",
    "ProbeEnvironment",
    "ProbeModel",
    "ProbeRequest",
    "plugin",
]

MARKER = "gym-kit-probe-7f3a"
UNOFFERED_TOOL = "probe_unoffered_tool"
CONTROL_ROUTES = ("seed_session", "verify", "close_session")
PROBE_ENVIRONMENT = "gym_kit_probe_environment"
PROBE_MODEL = "gym_kit_probe_model"


class ProbeRequest(msgspec.Struct, frozen=True):
    """One request the probe environment received."""

    method: str
    path: str
    body: bytes

    def json(self) -> Any:
        try:
            return json.loads(self.body) if self.body else None
        except ValueError:
            return None

    def from_the_model(self) -> bool:
        """Whether this request carries the model's own arguments: an agent forwarded a call."""
        return MARKER.encode() in self.body and self.path not in ("/verify", "/step")

    def marked_arguments(self) -> bool:
        """Whether the body is exactly the arguments of one of the model's control-route calls."""
        return self.json() == {"probe_marker": MARKER}


class ProbeVerifyRequest(VerifyRequest, kw_only=True):
    probe_fail: bool = False


class _Step(msgspec.Struct):
    probe_fail: bool = False


class ProbeEnvironment(ResourcesServer):
    """An environment that records every request and holds state for each open session."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.requests: list[ProbeRequest] = []
        self._lock = threading.Lock()

    def build_app(self) -> Any:
        app = super().build_app()

        async def recording(scope: dict[str, Any], receive: Any, send: Any) -> None:
            if scope["type"] != "http":
                await app(scope, receive, send)
                return
            chunks = []
            while True:
                message = await receive()
                if message["type"] != "http.request":
                    break
                chunks.append(message.get("body", b""))
                if not message.get("more_body", False):
                    break
            body = b"".join(chunks)
            with self._lock:
                self.requests.append(ProbeRequest(scope["method"], scope["path"], body))
            replayed = False

            async def replay() -> dict[str, Any]:
                nonlocal replayed
                if not replayed:
                    replayed = True
                    return {"type": "http.request", "body": body, "more_body": False}
                return await receive()

            await app(scope, replay, send)

        return recording

    def take_requests(self) -> list[ProbeRequest]:
        """The requests received since the last call."""
        with self._lock:
            taken, self.requests = self.requests, []
        return taken

    @tool
    async def echo(self, session: Session, text: Annotated[str, msgspec.Meta(description="any text")]) -> dict:
        """Echo the text back."""
        return {"echo": text}

    async def seed_session(self, session: Session, body: SeedSessionRequest) -> Any:
        self.sessions.get_or_create(session.id, lambda: {"started": True})
        return {}

    async def verify(self, session: Session, body: ProbeVerifyRequest) -> Any:
        if body.probe_fail:
            return error_response(f"{self.name}: /verify fails on purpose (probe_fail)", 500, "internal_error")
        return VerifyResponse(reward=1.0)

    def routes(self) -> list[Any]:
        async def reset(request: Request) -> Any:
            self.sessions.get_or_create(self.session(request).id, lambda: {"started": True})
            return {"observation": "probe episode", "info": {}}

        async def step(request: Request) -> Any:
            self.existing_session_state(request)
            if msgspec.json.decode(await request.body(), type=_Step).probe_fail:
                return error_response(f"{self.name}: /step fails on purpose (probe_fail)", 500, "internal_error")
            return {"observation": None, "reward": 1.0, "terminated": True, "truncated": False, "info": {}}

        async def close(request: Request) -> Any:
            session = self.session(request)
            return {"closed": session.exists and self.sessions.close(session.id)}

        return [
            *super().routes(),
            self.post_json("/reset", reset),
            self.post_json("/step", step),
            self.post_json("/close", close),
        ]


class ProbeModel(ModelServer):
    """A model that calls the control routes, an unoffered tool and each offered tool on the first
    turn of a conversation, and says "done" on every later one. ``requests`` keeps what it got."""

    model_name = "gym-kit-probe"

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.requests: list[ResponseCreateParams] = []

    async def responses(self, params: ResponseCreateParams) -> Response:
        self.requests.append(params)
        items = [] if isinstance(params.input, str) else params.input
        answered = any(
            isinstance(i, (FunctionCall, FunctionCallOutput, Reasoning))
            or (isinstance(i, Message) and i.role == "assistant")
            for i in items
        )
        usage = Usage(input_tokens=1, output_tokens=1, total_tokens=2)
        if answered:
            message = Message(role="assistant", status="completed", content=[OutputText(text="done")])
            return Response(model=self.model_name, output=[message], usage=usage)
        calls: list[Item] = [
            FunctionCall(call_id=f"probe_{name}", name=name, arguments=json.dumps({"probe_marker": MARKER}))
            for name in (*CONTROL_ROUTES, UNOFFERED_TOOL)
        ]
        offered = [t.name for t in params.tools or () if isinstance(t, FunctionTool)]
        calls += [
            FunctionCall(call_id=f"probe_offered_{name}", name=name, arguments=json.dumps({"text": MARKER}))
            for name in offered
            if name not in CONTROL_ROUTES
        ]
        return Response(model=self.model_name, output=calls, usage=usage)


class _ProbePlugin:
    @hookimpl
    def gym_register_servers(self, register: Any) -> None:
        register(
            name=PROBE_ENVIRONMENT,
            kind="resources",
            server=ProbeEnvironment,
            config=ServerConfig,
            description="the agent kit's probe environment: records every request",
        )
        register(
            name=PROBE_MODEL,
            kind="model",
            server=ProbeModel,
            config=ServerConfig,
            description="the agent kit's probe model: calls control routes and unoffered tools",
        )


plugin = _ProbePlugin()
