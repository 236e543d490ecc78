"""A one-shot agent: seed the session, ask the model once, verify its answer.

``POST /run`` takes a task row. The rollout's contract belongs to the base class: ``self.rollout(task)``
seeds the session on the resources server (``POST /seed_session``) and closes it on exit, whether the
rollout failed or not; ``rollout.call_model`` asks the model (counted in the rollout record),
``rollout.call_tool`` runs a tool the task offered (any other name gets an "unknown tool" output),
``rollout.verify`` scores the response. Extend :meth:`MiniSweAgentAgent.run` to add
tool calls, retries, several turns...
"""

from __future__ import annotations

from typing import Any

from gym_core import AgentServer
from gym_core.schemas import Response, ResponseCreateParams, RunRequest

from gym_mini_swe_agent.config import MiniSweAgentConfig


class MiniSweAgentAgent(AgentServer):
    config: MiniSweAgentConfig

    async def responses(self, params: ResponseCreateParams) -> Response:
        """``POST /v1/responses``: the agent's answer without a rollout (here: the model's)."""
        return await self.call_model(self.config.model_server, params)

    async def run(self, body: RunRequest, task: dict[str, Any]) -> dict[str, Any]:
        """``POST /run``: one rollout of the task row ``task`` (``body`` is the row, decoded)."""
        async with self.rollout(task) as rollout:
            params = body.responses_create_params
            response = await rollout.call_model(params)
            verdict = await rollout.verify(params, response)
        return rollout.result(verdict, response)
