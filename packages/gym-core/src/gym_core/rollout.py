"""One rollout's contract with its environment, owned by the base class so that no agent forgets it.

An agent opens a :class:`Rollout` with :meth:`gym_core.servers.AgentServer.rollout` and does its
work inside ``async with``::

    async with self.rollout(task) as rollout:          # seeds the session (POST /seed_session)
        params = await rollout.offer(body.responses_create_params)
        response = await rollout.call_model(params)    # counted in the rollout record
        for call in function_calls(response):
            output = await rollout.call_tool(call)      # only a tool offered in this rollout
        verdict = await rollout.verify(params, response)
    return rollout.result(verdict, response)             # the row, its precedence in gym_core.rows

What it guarantees, whatever the agent does in between:

- the session is closed on exit (``POST /close_session``, bounded, best effort), after a failure too;
  a seed that fails is closed as well, since the environment may have stored state before failing;
- a model reaches the environment only through tools offered in this rollout: a call named
  ``seed_session``, ``verify`` or anything not offered becomes an "unknown tool" output the model
  sees, and nothing is sent;
- an infrastructure failure (a 5xx, a timeout, a lost session) raises a typed error: ``/run``
  answers with that failure, never with a reward;
- each rollout has its own cookies on the resources server and on the model server, never another
  rollout's.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from typing import Any, Protocol

import msgspec

from gym_core.client import ServerClient
from gym_core.errors import ServerCallError
from gym_core.rows import rollout_result
from gym_core.schemas import (
    FunctionCall,
    FunctionCallOutput,
    FunctionTool,
    Response,
    ResponseCreateParams,
    RolloutRecord,
)

__all__ = ["Rollout", "RolloutAgent"]


class RolloutAgent(Protocol):
    """What a :class:`Rollout` uses of its agent (an :class:`~gym_core.servers.AgentServer`; named
    by this protocol so that this module does not import the servers)."""

    name: str
    log: logging.Logger

    @property
    def client(self) -> ServerClient: ...

    async def call_tool(
        self, resources_server: str, call: FunctionCall, offered: Collection[str], cookies: dict[str, str]
    ) -> FunctionCallOutput: ...

    async def call_model(
        self,
        model_server: str,
        params: ResponseCreateParams,
        cookies: dict[str, str] | None = None,
        *,
        string_input_as_message: bool = True,
    ) -> Response: ...

    async def resources_tools(self, resources_server: str) -> list[FunctionTool]: ...

    def environment_of_rollout(self) -> dict[str, str]: ...


class Rollout:
    """A rollout in progress: its session on the resources server, its model cookies, the tools
    offered and the :class:`~gym_core.schemas.RolloutRecord`. Made by :meth:`AgentServer.rollout`.

    - ``cookies``: the session on the resources server (send them with any other call to it);
    - ``model_cookies``: this rollout's session on the model server;
    - ``record``: turns, tool calls and usage, fed by :meth:`call_model` and :meth:`call_tool`;
    - ``offered``: the names of the tools offered (set by :meth:`offer`);
    - ``seed_answer``: the raw answer of the seed call (``None`` when nothing was seeded);
    - ``close_path``: where the session is closed on exit (``/close_session``; an environment with a
      close route of its own, such as a Gymnasium-style ``/close``, may be set here);
    - ``cleanup_error``: why closing failed, if it did (never raised: it must not hide the
      rollout's own result or error).
    """

    def __init__(
        self,
        agent: RolloutAgent,
        task: Mapping[str, Any],
        *,
        resources_server: str,
        model_server: str | None,
        seed_path: str | None = "/seed_session",
    ):
        self.agent = agent
        self.task = task
        self.resources_server = resources_server
        self.model_server = model_server
        self.seed_path = seed_path
        self.cookies: dict[str, str] = {}
        self.model_cookies: dict[str, str] = {}
        self.record = RolloutRecord(agent=agent.name, model_server=model_server)
        self.offered: frozenset[str] = frozenset()
        self.seed_answer: bytes | None = None
        self.close_path = "/close_session"
        self.cleanup_error: Exception | None = None

    async def __aenter__(self) -> Rollout:
        if self.seed_path is not None:
            try:
                self.seed_answer = await self.post(self.seed_path, self.task)
            except BaseException:
                await self.close()
                raise
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # --- the environment ---

    async def post(self, path: str, body: Any, **kwargs: Any) -> bytes:
        """``POST path`` on the resources server with this rollout's session (``/step`` of a
        step/reset environment, say): an error status raises, as ``ServerClient.request`` does."""
        return await self.agent.client.request(
            "POST", self.resources_server, path, body=body, cookies=self.cookies, **kwargs
        )

    async def offer(self, params: ResponseCreateParams, *, resources_tools: bool = True) -> ResponseCreateParams:
        """Set the tools this rollout offers: those of ``params``, or, when it names none (absent or
        null) and ``resources_tools`` is on, the resources server's own (``GET /tools``), which are
        then put in ``params``. Returns ``params``."""
        if params.tools is None and resources_tools:
            params.tools = await self.agent.resources_tools(self.resources_server) or None
        self.offered = frozenset(t.name for t in params.tools or () if isinstance(t, FunctionTool))
        return params

    async def call_tool(self, call: FunctionCall) -> FunctionCallOutput:
        """Execute one function call of the model (see :meth:`AgentServer.call_tool`) and count it."""
        output = await self.agent.call_tool(self.resources_server, call, self.offered, self.cookies)
        self.record.add_tool_calls()
        return output

    async def verify(self, params: ResponseCreateParams | None, response: Any, **fields: Any) -> dict[str, Any]:
        """``POST /verify`` with the task row, ``params`` (typed: the verifier need not decode the
        messages again), the response and ``fields``; returns the verdict. A verdict without a
        numeric ``reward`` is the environment's failure (a typed error), never a reward of 0."""
        body = dict(self.task)
        if params is not None:
            body["responses_create_params"] = params
        body["response"] = response
        body.update(fields)
        raw = await self.post("/verify", body)
        try:
            verdict = msgspec.json.decode(raw)
        except msgspec.DecodeError as exc:
            raise ServerCallError(self.resources_server, "/verify", f"the verdict is not JSON: {exc}") from None
        reward = verdict.get("reward") if isinstance(verdict, dict) else None
        if not isinstance(reward, (int, float)) or isinstance(reward, bool):
            raise ServerCallError(self.resources_server, "/verify", "the verdict has no numeric 'reward'")
        return verdict

    # --- the model ---

    async def call_model(
        self, params: ResponseCreateParams, *, model_server: str | None = None, string_input_as_message: bool = True
    ) -> Response:
        """One ``POST /v1/responses`` (see :meth:`AgentServer.call_model`) with this rollout's
        model cookies; the response is counted in :attr:`record`."""
        server = model_server or self.model_server
        if server is None:
            raise TypeError("this rollout has no model server: pass model_server")
        response = await self.agent.call_model(
            server, params, self.model_cookies, string_input_as_message=string_input_as_message
        )
        self.record.add_model_response(response)
        return response

    # --- the result ---

    def result(self, verdict: Mapping[str, Any], response: Any, **facts: Any) -> dict[str, Any]:
        """What ``/run`` returns: the record, ``facts``, the verdict and the response, in the
        precedence of :func:`gym_core.rows.rollout_result`."""
        return rollout_result(
            record=self.record.fields(),
            facts=facts,
            verdict=verdict,
            response=response,
            environment=self.agent.environment_of_rollout(),
        )

    async def close(self) -> None:
        """Close the session now (also done on exit); later calls do nothing."""
        cookies, self.cookies = self.cookies, {}
        if not cookies:
            return
        try:
            await self.agent.client.request(
                "POST",
                self.resources_server,
                self.close_path,
                body=b"{}",
                cookies=cookies,
                timeout_s=min(10.0, self.agent.client.config.timeout_s),
            )
        except Exception as exc:
            self.cleanup_error = exc
            self.agent.log.info("could not close a session on %s: %s", self.resources_server, exc)
