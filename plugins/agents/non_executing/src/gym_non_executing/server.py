"""The non-executing agent: the model's tool calls are its answer, never executed.

One rollout (``POST /run``):

1. ``POST /seed_session`` on the resources server with the whole task row (the rollout's cookie dict);
2. ``POST /v1/responses`` on the model, once, with the row's ``responses_create_params`` (a string
   ``input`` becomes one user message); the model gets no resources-server cookie;
3. ``POST /verify`` with the task row and the model's response as it came: its ``function_call``
   items are neither parsed nor executed, the verifier judges them (``xlam_fc``, the tool-call
   mode of ``structured_outputs``);
4. ``POST /close_session``, whether the rollout succeeded or not.

The result is the verdict, the response, and what produced it: ``agent``, ``model_server``,
``model``, ``num_model_calls`` (always 1), ``num_tool_calls`` (calls the model made), ``usage``
and ``usage_per_turn``. A failure of any call (model, seed, verify) fails the rollout with its
typed reason.
"""

from __future__ import annotations

from typing import Any

from gym_core import AgentServer
from gym_core.schemas import Response, ResponseCreateParams, RunRequest, function_calls

from gym_non_executing.config import NonExecutingConfig

__all__ = ["NonExecutingAgent"]


class NonExecutingAgent(AgentServer):
    config: NonExecutingConfig

    async def startup(self) -> None:
        await super().startup()
        if self.config.skip_verification:
            self.log.warning(
                "%s: skip_verification is ignored (as in the reference): every rollout is verified", self.name
            )

    async def ask_model(self, params: ResponseCreateParams, cookies: dict[str, str]) -> Response:
        """The model's one response to ``params`` (a string ``input`` sent as one user message)."""
        return await self.call_model(self.config.model_server, params, cookies)

    async def responses(self, params: ResponseCreateParams) -> Response:
        """``POST /v1/responses``: the model's response, unchanged (no session, no verification)."""
        return await self.ask_model(params, {})

    async def run(self, body: RunRequest, task: dict[str, Any]) -> dict[str, Any]:
        async with self.rollout(task) as rollout:
            params = body.responses_create_params
            response = await rollout.call_model(params)
            # One model call, whose tool calls are counted though none is executed.
            rollout.record.add_tool_calls(len(function_calls(response)))
            verdict = await rollout.verify(params, response)
        return rollout.result(verdict, response)
