"""The tool-simulation agent: one model call on a trajectory whose tool results are already recorded.

A row's ``responses_create_params.input`` holds a partial trajectory: the user's request, then the
earlier ``function_call`` items and their ``function_call_output`` results (recorded or simulated
when the data set was made). The model is asked once for the next step; its tool calls are
returned unexecuted and the environment's ``/verify`` judges them (``tool_call_match``).

One rollout (``POST /run``):

1. no ``/seed_session``: nothing runs, so there is no environment state to set up;
2. ``POST /v1/responses`` on the model, once, with ``responses_create_params`` exactly as the row
   has them (a string ``input`` stays a string);
3. ``POST /verify`` with the task row and the response, or, with ``skip_verification``, no verify
   call: the reward is ``skip_verification_reward`` and ``verification_skipped`` is true;
4. should ``/verify`` have opened a session (set a cookie), ``POST /close_session`` for it.

The result is the verdict, the response, and ``agent``, ``model_server``, ``model``,
``num_model_calls`` (1), ``num_tool_calls`` (calls the model made, none executed), ``usage`` and
``usage_per_turn``. A failure of the model or of verify fails the rollout with its typed reason.
"""

from __future__ import annotations

from typing import Any

from gym_core import AgentServer
from gym_core.schemas import Response, ResponseCreateParams, RunRequest, function_calls

from gym_tool_simulation.config import ToolSimulationConfig

__all__ = ["ToolSimulationAgent"]


class ToolSimulationAgent(AgentServer):
    config: ToolSimulationConfig

    async def ask_model(self, params: ResponseCreateParams) -> Response:
        """The model's one response to ``params``, forwarded as they are, with no cookie."""
        return await self.call_model(self.config.model_server, params, {}, string_input_as_message=False)

    async def responses(self, params: ResponseCreateParams) -> Response:
        """``POST /v1/responses``: the model's response, unchanged."""
        return await self.ask_model(params)

    async def run(self, body: RunRequest, task: dict[str, Any]) -> dict[str, Any]:
        cfg = self.config
        params = body.responses_create_params
        # No seed: nothing runs, so there is no state to set up; a session /verify may open is closed on exit.
        async with self.rollout(task, seed_path=None) as rollout:
            response = await rollout.call_model(params, string_input_as_message=False)
            # One model call, whose tool calls are counted though none is executed.
            rollout.record.add_tool_calls(len(function_calls(response)))
            if cfg.skip_verification:
                verdict = {"reward": cfg.skip_verification_reward, "verification_skipped": True}
            else:
                verdict = await rollout.verify(params, response)
        return rollout.result(verdict, response)
