"""The workhorse agent: seed the session, loop model → tool calls → tool outputs, then verify.

One rollout (``POST /run``):

1. ``POST /seed_session`` on the resources server with the task row;
2. ``POST /v1/responses`` on the model with the conversation so far;
3. each ``function_call`` of a tool offered in this rollout becomes ``POST /tools/<name>`` on the
   resources server (same session cookie), and its answer a ``function_call_output`` item; a call
   of any other name, or one the environment refuses (4xx), yields an error output the model sees;
   a server failure (5xx, timeout, lost session) fails the rollout (see ``AgentServer.call_tool``);
4. repeat 2-3 until the model calls no tool or ``max_steps`` model calls were made;
5. ``POST /verify`` with the task row and the whole trajectory; return its verdict, the
   trajectory and the summed usage;
6. ``POST /close_session``, whether the rollout succeeded or not.

Steps 1, 3 (which tools), 5 and 6 are the base class's rollout contract (:class:`gym_core.rollout.Rollout`).
The result also records what produced the rollout and what it cost (:class:`gym_core.schemas.RolloutRecord`):
``agent``, ``model_server``, ``model``, ``num_model_calls``, ``num_tool_calls`` (calls sent
through ``call_tool``, an unknown name included), ``usage`` and ``usage_per_turn``.
"""

from __future__ import annotations

from typing import Any

import msgspec

from gym_core import AgentServer
from gym_core.rollout import Rollout
from gym_core.schemas import Message, Response, ResponseCreateParams, RunRequest, Usage, function_calls

from gym_simple_agent.config import SimpleAgentConfig


class SimpleAgent(AgentServer):
    config: SimpleAgentConfig

    async def responses(self, params: ResponseCreateParams) -> Response:
        """``POST /v1/responses``: model ⇄ tools in a fresh session (seeded with the request alone:
        no task fields), without verification."""
        async with self.rollout({"responses_create_params": params}) as rollout:
            return await self._loop(params, rollout)

    async def _loop(self, params: ResponseCreateParams, rollout: Rollout) -> Response:
        """Model ⇄ tools until the model stops calling tools; the response holds every output item."""
        await rollout.offer(params, resources_tools=self.config.offer_resources_tools)
        conversation: list[Any] = (
            [Message(role="user", content=params.input)] if isinstance(params.input, str) else list(params.input)
        )
        outputs: list[Any] = []
        usage = Usage()
        response: Response | None = None
        request = msgspec.structs.replace(params, input=conversation)  # the caller's params stay as they were
        for _ in range(max(self.config.max_steps, 1)):
            response = await rollout.call_model(request)
            outputs.extend(response.output)
            conversation.extend(response.output)
            if response.usage is not None:
                usage = usage + response.usage
            calls = function_calls(response)
            if not calls:
                break
            for call in calls:
                item = await rollout.call_tool(call)
                outputs.append(item)
                conversation.append(item)
        assert response is not None
        response.output = outputs
        response.usage = usage
        return response

    async def run(self, body: RunRequest, task: dict[str, Any]) -> dict[str, Any]:
        async with self.rollout(task) as rollout:
            params = body.responses_create_params
            response = await self._loop(params, rollout)
            verdict = await rollout.verify(params, response)
        return rollout.result(verdict, response)
