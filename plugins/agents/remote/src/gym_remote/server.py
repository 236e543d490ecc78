"""The remote agent: an external Responses-API service plays the agent, gym keeps the environment.

The service (any framework, its own model calls, its own internal tools) answers
``POST {agent_base_url}/v1/responses``; it never sees the resources server, its cookies, the row's
other fields (``verifier_metadata``...) nor gym's run token. One rollout (``POST /run``):

1. drop stale result fields from the row (``reward``, ``response``, ``error``, ``_ng_failure_*``...);
   wait for one of ``concurrency`` slots; the rest runs under ``run_timeout_secs``;
2. ``POST /seed_session`` on the resources server with the row (the rollout's cookie dict);
3. loop: ``POST /v1/responses`` on the service with the conversation so far; each ``function_call``
   of its output with no ``function_call_output`` of the same ``call_id`` in that output is a call
   for gym to execute (a later duplicate ``call_id`` replaces the earlier: executed once, last
   arguments), through :meth:`AgentServer.call_tool` (offered tools only); paired calls are the
   service's own records, passed through. Stop on ``incomplete_details``, when an assistant message
   comes with nothing to execute, or after ``max_steps`` service calls;
4. ``POST /verify`` with the row and the whole trajectory; ``POST /close_session`` in any case.

A failure fails the rollout with a typed reason (gym's rule, unlike the reference's 200 "failure
rows"): the service unreachable (``remote_unreachable``, 502, after 3 tries), too slow
(``remote_timeout`` / ``run_timeout``, 504), answering 5xx or 429 (``remote_server_error``, 502),
refusing (4xx: ``remote_refused``, 424), redirecting (``remote_redirect``, 424: never followed),
answering something that is not JSON (``remote_invalid_json``, 424) or not a Response
(``RemoteAgentTerminalError``, 424).
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import msgspec

from gym_core import AgentServer
from gym_core.client import REQUEST_DEADLINE
from gym_core.errors import ServerHTTPError, ServerTimeoutError, ServerUnavailableError
from gym_core.rollout import Rollout
from gym_core.schemas import (
    FunctionCall,
    FunctionCallOutput,
    Message,
    Response,
    ResponseCreateParams,
    RunRequest,
    decode_response,
)

from gym_remote.config import RemoteConfig

__all__ = [
    "RemoteAgent",
    "RemoteServiceError",
    "RemoteUnreachableError",
    "RemoteTimeoutError",
    "RemoteAgentTerminalError",
    "pending_calls",
]

SERVICE = "remote service"  # how errors name the service: never by its URL, which may hold a secret
PATH = "/v1/responses"
CONNECT_TRIES = 3
CONNECT_RETRY_DELAY_S = 0.5
# Stale copies of a result's fields in a row re-fed from an output file: never seeded nor verified.
STALE_ROW_KEYS = ("reward", "response", "error", "_ng_failure_class", "_ng_no_persist", "_ng_failure_terminal")

_encoder = msgspec.json.Encoder()


class RemoteServiceError(ServerHTTPError):
    """The service answered, but not with a usable Response: ``error_type`` says how."""

    def __init__(self, message: str, *, status: int | None, error_type: str, attempts: int = 1):
        super().__init__(SERVICE, PATH, message, status=status, attempts=attempts, error_type=error_type)


class RemoteAgentTerminalError(RemoteServiceError):
    """The service answered JSON that is not a Response: its bug, not worth retrying now."""

    def __init__(self, message: str, *, status: int | None):
        super().__init__(message, status=status, error_type="RemoteAgentTerminalError")


class RemoteUnreachableError(ServerUnavailableError):
    @property
    def reason(self) -> str:
        return "remote_unreachable"


class RemoteTimeoutError(ServerTimeoutError):
    """The service, or the whole rollout, took longer than its bound (``reason`` says which)."""

    def __init__(self, server: str, path: str, message: str, *, reason: str = "remote_timeout", attempts: int = 1):
        self._reason = reason
        super().__init__(server, path, message, attempts=attempts)

    @property
    def reason(self) -> str:
        return self._reason


def pending_calls(output: list[Any]) -> list[FunctionCall]:
    """The calls of one service response gym must execute, in order: each ``function_call`` whose
    ``call_id`` no ``function_call_output`` of the same response answers. A later call with the
    same ``call_id`` replaces the earlier one (kept at the earlier one's place)."""
    answered: set[str] = set()
    pending: dict[str, FunctionCall] = {}
    for item in output:
        if isinstance(item, FunctionCallOutput):
            if item.call_id is not None:
                answered.add(item.call_id)
                pending.pop(item.call_id, None)
        elif isinstance(item, FunctionCall) and item.call_id not in answered:
            pending[item.call_id] = item
    return list(pending.values())


class _Throttle:
    """True for the first 5 events, then every 100th: a warning per rollout would flood the log."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self) -> bool:
        self.count += 1
        return self.count <= 5 or self.count % 100 == 0


class RemoteAgent(AgentServer):
    config: RemoteConfig

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._http: aiohttp.ClientSession | None = None
        self._slots: asyncio.Semaphore | None = None
        self._no_usage = _Throttle()
        self._skills = _Throttle()
        self.service_origin = "{0.scheme}://{0.netloc}".format(urlsplit(self.config.agent_base_url))

    # --- lifecycle ---

    async def startup(self) -> None:
        await super().startup()
        if self.config.skip_verification:
            self.log.warning(
                "%s: skip_verification is ignored (as in the reference): every rollout is verified", self.name
            )
        self._slots = asyncio.Semaphore(self.config.concurrency)
        # A client of its own, not gym's ServerClient: no cookie jar, no retries on statuses, no
        # redirects, and none of the run's credentials.
        self._http = aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar(), trust_env=False)

    async def shutdown(self) -> None:
        if self._http is not None:
            await self._http.close()
        await super().shutdown()

    # --- the service ---

    def _service_headers(self) -> dict[str, str]:
        headers = {"content-type": "application/json"}
        if self.config.api_key:
            headers["authorization"] = f"Bearer {self.config.api_key}"
        elif self._is_run_server():
            # Not external: one of this run's own servers (local_llama addressed by URL) requires
            # the run's token, which gym's client gives the run's servers and nothing else.
            token = self.global_config.auth_token if self.global_config is not None else None
            if token:
                headers["authorization"] = f"Bearer {token}"
        return headers

    def _is_run_server(self) -> bool:
        """Whether the service is one of this run's own servers (same ``http://host:port``)."""
        if self.global_config is None:
            return False
        return self.service_origin in {i.url for i in self.global_config.instances.values()}

    def _redact(self, text: str) -> str:
        secrets = [self.config.api_key] if self.config.api_key else []
        if self.global_config is not None and self.global_config.auth_token:
            secrets.append(self.global_config.auth_token)
        for secret in secrets:
            text = text.replace(secret, "***")
        return text

    async def ask_service(self, params: ResponseCreateParams, cookies: dict[str, str]) -> Response:
        """One ``POST {agent_base_url}/v1/responses``: the service's Response, or a typed error.

        ``cookies`` (this rollout's, for the service only) are sent and updated with what it sets.
        """
        assert self._http is not None, "the server has not started"
        cfg = self.config
        body = _encoder.encode(params)  # set fields only: defaults are never put on the wire
        limit, why = cfg.remote_responses_timeout_secs, "remote_responses_timeout_secs"
        deadline = REQUEST_DEADLINE.get()  # the caller of /run stops waiting then: stop before
        if deadline is not None and deadline - time.monotonic() < limit:
            limit, why = max(deadline - time.monotonic(), 0.001), "the deadline of the /run request"
        timeout = aiohttp.ClientTimeout(total=limit, sock_connect=min(cfg.connect_timeout_secs, limit))
        headers = self._service_headers()
        if cookies:
            headers["cookie"] = "; ".join(f"{k}={v}" for k, v in cookies.items())
        url = cfg.agent_base_url + PATH
        for attempt in range(1, CONNECT_TRIES + 1):
            try:
                async with self._http.post(
                    url, data=body, headers=headers, timeout=timeout, allow_redirects=False
                ) as resp:
                    try:
                        payload = await resp.read()
                    except (aiohttp.ClientError, asyncio.IncompleteReadError) as exc:
                        raise RemoteUnreachableError(
                            SERVICE, PATH, f"the answer broke off: {type(exc).__name__}", attempts=attempt
                        ) from None
                    for header in resp.headers.getall("set-cookie", ()):
                        name, sep, value = header.partition(";")[0].partition("=")
                        if sep and name.strip():
                            cookies[name.strip()] = value.strip()
                    status = resp.status
                break
            except aiohttp.ConnectionTimeoutError:
                # No connection within connect_timeout_secs: unreachable, like a refusal (retried).
                if attempt == CONNECT_TRIES:
                    raise RemoteUnreachableError(
                        SERVICE,
                        PATH,
                        f"could not reach the remote service after {CONNECT_TRIES} tries (no connection "
                        f"within connect_timeout_secs, {cfg.connect_timeout_secs:g} s)",
                        attempts=attempt,
                    ) from None
                await asyncio.sleep(CONNECT_RETRY_DELAY_S)
            except TimeoutError:
                raise RemoteTimeoutError(
                    SERVICE, PATH, f"no answer within {limit:g} s ({why})", attempts=attempt
                ) from None
            except (aiohttp.ClientConnectionError, ConnectionError) as exc:
                # Refused, reset, disconnected: the service may be restarting. Nothing else is retried.
                if attempt == CONNECT_TRIES:
                    raise RemoteUnreachableError(
                        SERVICE,
                        PATH,
                        f"could not reach the remote service after {CONNECT_TRIES} tries ({type(exc).__name__})",
                        attempts=attempt,
                    ) from None
                await asyncio.sleep(CONNECT_RETRY_DELAY_S)
            except aiohttp.ClientError as exc:
                raise RemoteServiceError(
                    f"request failed: {type(exc).__name__}",
                    status=None,
                    error_type="remote_request_failed",
                    attempts=attempt,
                ) from None
        snippet = self._redact(payload[:500].decode(errors="replace"))
        if status >= 300:
            if status < 400:
                raise RemoteServiceError(
                    f"HTTP {status}: the service redirects, which gym never follows; point agent_base_url at the "
                    f"address that answers: {snippet}",
                    status=status,
                    error_type="remote_redirect",
                )
            kind = "remote_server_error" if status >= 500 or status == 429 else "remote_refused"
            raise RemoteServiceError(f"HTTP {status}: {snippet}", status=status, error_type=kind)
        try:
            data = msgspec.json.decode(payload)
        except msgspec.DecodeError:
            raise RemoteServiceError(
                f"the answer is not JSON: {snippet}", status=status, error_type="remote_invalid_json"
            ) from None
        if not isinstance(data, dict):
            raise RemoteServiceError(
                f"the answer is JSON but not an object: {snippet}", status=status, error_type="remote_invalid_json"
            )
        try:
            return decode_response(data)
        except (msgspec.ValidationError, TypeError, ValueError) as exc:
            raise RemoteAgentTerminalError(
                f"the answer is not a Responses API object: {self._redact(str(exc))}", status=status
            ) from None

    # --- the loop ---

    async def _execute(self, call: FunctionCall, rollout: Rollout) -> FunctionCallOutput:
        try:
            json.loads(call.arguments)
        except ValueError as exc:
            # As the reference: malformed arguments are the model's mistake, told to it; nothing is called.
            message = f"Invalid tool call arguments: {exc!r}"
            rollout.record.add_tool_calls()
            return FunctionCallOutput(call_id=call.call_id, output=_encoder.encode({"error": message}).decode())
        return await rollout.call_tool(call)

    async def _loop(self, params: ResponseCreateParams, rollout: Rollout) -> Response:
        """Service ⇄ gym's tools until the service is done; the Response holds every output item."""
        cfg = self.config
        record = rollout.record
        await rollout.offer(params, resources_tools=cfg.offer_resources_tools)
        if params.model is None and cfg.model is not None:
            params.model = cfg.model
        conversation: list[Any] = (
            [Message(role="user", content=params.input)] if isinstance(params.input, str) else list(params.input)
        )
        service_cookies: dict[str, str] = {}  # this rollout's session with the service, kept from everyone else
        outputs: list[Any] = []
        response: Response | None = None
        step = 0
        while True:
            step += 1
            request = msgspec.structs.replace(params, input=conversation)
            response = await self.ask_service(request, service_cookies)
            record.add_model_response(response)
            outputs.extend(response.output)
            conversation = [*conversation, *response.output]
            if response.incomplete_details is not None and response.incomplete_details.reason:
                break
            calls = pending_calls(response.output)
            said = any(isinstance(i, Message) and i.role == "assistant" for i in response.output)
            if not calls and said:
                break
            for call in calls:
                item = await self._execute(call, rollout)
                outputs.append(item)
                conversation.append(item)
            if cfg.max_steps and step >= cfg.max_steps:
                break
        response.output = outputs
        response.usage = record.usage
        return response

    async def responses(self, params: ResponseCreateParams) -> Response:
        """``POST /v1/responses``: the service ⇄ tools in a fresh session (seeded with the request
        alone), without verification; the session is closed at the end."""
        async with self.rollout({"responses_create_params": params}, model_server=self.service_origin) as rollout:
            return await self._loop(params, rollout)

    async def run(self, body: RunRequest, task: dict[str, Any]) -> dict[str, Any]:
        assert self._slots is not None, "the server has not started"
        row = {k: v for k, v in task.items() if k not in STALE_ROW_KEYS}
        async with self._slots:
            try:
                async with asyncio.timeout(self.config.run_timeout_secs) as limit:
                    return await self._rollout(body, row)
            except TimeoutError:
                if not limit.expired():
                    raise
                raise RemoteTimeoutError(
                    self.name,
                    "/run",
                    f"the rollout took longer than run_timeout_secs ({self.config.run_timeout_secs:g} s)",
                    reason="run_timeout",
                ) from None

    async def _rollout(self, body: RunRequest, row: dict[str, Any]) -> dict[str, Any]:
        if row.get("skills_ref") and self._skills():
            self.log.warning("%s: skills_ref cannot be staged into a remote service; running without it", self.name)
        async with self.rollout(row, model_server=self.service_origin) as rollout:
            params = body.responses_create_params
            response = await self._loop(params, rollout)
            if response.usage is None and self._no_usage():
                self.log.warning(
                    "%s: the remote service reports no usage: tokens per rollout will be unknown", self.name
                )
            verdict = await rollout.verify(params, response)
        return rollout.result(verdict, response)
