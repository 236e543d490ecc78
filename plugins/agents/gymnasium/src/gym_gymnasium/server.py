"""The step/reset agent: the environment decides reward, termination and what the model sees next.

One rollout (``POST /run``, the agents spec §2.6):

1. ``POST /reset`` on the resources server with the task row; its ``observation`` (if any) is
   appended to the row's input as a user message; its ``info`` says whether the environment wants
   an explicit ``/close`` and takes step request ids (``supports_explicit_close``,
   ``supports_step_idempotency``);
2. up to ``max_steps`` times: the model answers the conversation so far; ``POST /step`` with the
   row and that turn's response (plus ``_ng_step_request_id``, a fresh id, when the environment
   takes them, so that a retried step is not played twice); the step's reward is added to the
   total; the loop ends when the step terminated or truncated; otherwise the step's
   ``info.tool_outputs`` become ``function_call_output`` items and its observation a user message;
3. out of steps without an end: ``truncated`` is forced true;
4. the session is closed, whether the rollout succeeded or not: ``POST /close`` when the
   environment advertised it (a failure after a successful episode is recorded in
   ``info.cleanup_warning``, after a failed one only logged), else ``/close_session``.

The result: ``reward`` (the sum of the step rewards), ``terminated``, ``truncated``, ``info`` (the
last step's), ``responses_create_params`` (with the reset observation), ``response`` (the last model
response, its ``output`` the whole transcript, ``usage`` summed), ``env_steps`` (steps played), and
the rollout record every agent returns (:class:`gym_core.schemas.RolloutRecord`): ``agent``,
``model_server``, ``model``, ``num_model_calls``, ``num_tool_calls`` (tool outputs the environment
returned: it executes the model's calls in ``/step``), ``usage`` and ``usage_per_turn``.
``model_calls`` repeats ``num_model_calls`` for readers of the earlier name.

Any failure (the model, a non-2xx ``/step``, an unreadable answer) fails the rollout: there is no
verify to fall back on, and an environment's 4xx on ``/step`` (grl_sokoban's unreadable action) is,
as in the reference, the end of the rollout.
"""

from __future__ import annotations

import uuid
from typing import Any

import msgspec

from gym_core import AgentServer, ServerCallError
from gym_core.rollout import Rollout
from gym_core.schemas import (
    FunctionCallOutput,
    Message,
    Response,
    ResponseCreateParams,
    RunRequest,
)

from gym_gymnasium.config import GymnasiumConfig


class ToolOutput(msgspec.Struct):
    call_id: str | None = None
    output: Any = ""


class StepAnswer(msgspec.Struct):
    """``POST /step``'s answer, leniently: the defaults are the spec's."""

    observation: str | None = None
    reward: float = 0.0
    terminated: bool = False
    truncated: bool = False
    info: dict[str, Any] = msgspec.field(default_factory=dict)


class ResetAnswer(msgspec.Struct):
    observation: str | None = None
    info: dict[str, Any] = msgspec.field(default_factory=dict)


_step_decoder = msgspec.json.Decoder(StepAnswer)
_reset_decoder = msgspec.json.Decoder(ResetAnswer)
_tool_outputs = msgspec.json.Decoder(list[ToolOutput])


def _flag(info: Any, name: str) -> bool:
    return isinstance(info, dict) and info.get(name) is True


class GymnasiumAgent(AgentServer):
    config: GymnasiumConfig

    async def responses(self, params: ResponseCreateParams) -> Response:
        """``POST /v1/responses``: the model's answer to ``params`` (no environment involved)."""
        return await self.call_model(self.config.model_server, params)

    async def run(self, body: RunRequest, task: dict[str, Any]) -> dict[str, Any]:
        cfg = self.config
        # /reset seeds the episode; the session is closed on exit whatever happens.
        async with self.rollout(task, seed_path="/reset") as rollout:
            raw = rollout.seed_answer or b"{}"
            # Read the close flag leniently first, so that a malformed reset answer is still closed the right way.
            try:
                if _flag(msgspec.json.decode(raw).get("info"), "supports_explicit_close"):
                    rollout.close_path = "/close"
            except (msgspec.DecodeError, AttributeError):
                pass
            try:
                reset = _reset_decoder.decode(raw)
            except (msgspec.DecodeError, msgspec.ValidationError) as exc:
                raise ServerCallError(cfg.resources_server, "/reset", f"unexpected answer: {exc}") from exc
            params, response, last, steps, total_reward = await self._episode(
                body.responses_create_params, task, reset, rollout
            )
        info = dict(last.info)
        if rollout.cleanup_error is not None and rollout.close_path == "/close":
            error = rollout.cleanup_error
            info["cleanup_warning"] = {"operation": "close", "error_type": type(error).__name__, "message": str(error)}
        verdict = {
            "reward": total_reward,
            "terminated": last.terminated,
            "truncated": last.truncated or not last.terminated,
            "info": info,
        }
        return rollout.result(
            verdict,
            response,
            responses_create_params=params,
            env_steps=steps,
            model_calls=rollout.record.num_model_calls,  # the earlier name, still read by environments' tests
        )

    async def _episode(
        self, params: ResponseCreateParams, task: dict[str, Any], reset: ResetAnswer, rollout: Rollout
    ) -> tuple[ResponseCreateParams, Response, StepAnswer, int, float]:
        """Model ⇄ ``/step`` until the episode ends or ``max_steps``: the params (with the reset
        observation), the last response (its output the whole transcript), the last step's answer,
        the steps played and the sum of the step rewards."""
        cfg = self.config
        base: list[Any] = (
            [Message(role="user", content=params.input)] if isinstance(params.input, str) else list(params.input)
        )
        if reset.observation:
            base.append(Message(role="user", content=reset.observation))
        params = msgspec.structs.replace(params, input=base)  # the caller's params stay as they were
        idempotent = _flag(reset.info, "supports_step_idempotency")
        outputs: list[Any] = []
        total_reward = 0.0
        steps = 0
        last: StepAnswer | None = None
        response: Response | None = None
        for _ in range(cfg.max_steps):
            request = msgspec.structs.replace(params, input=[*base, *outputs])
            response = await rollout.call_model(request)
            outputs.extend(response.output)
            step_body = {**task, "response": response}
            if idempotent:
                step_body["_ng_step_request_id"] = uuid.uuid4().hex
            raw = await rollout.post("/step", step_body)
            try:
                last = _step_decoder.decode(raw)
            except (msgspec.DecodeError, msgspec.ValidationError) as exc:
                raise ServerCallError(cfg.resources_server, "/step", f"unexpected answer: {exc}") from exc
            steps += 1
            total_reward += last.reward
            if last.terminated or last.truncated:
                break
            try:
                tool_outputs = msgspec.convert(last.info.get("tool_outputs") or [], list[ToolOutput])
            except msgspec.ValidationError as exc:
                raise ServerCallError(cfg.resources_server, "/step", f"unexpected info.tool_outputs: {exc}") from exc
            for item in tool_outputs:
                output = item.output if isinstance(item.output, str) else msgspec.json.encode(item.output).decode()
                outputs.append(FunctionCallOutput(call_id=item.call_id, output=output))
                rollout.record.add_tool_calls()  # the environment executes the model's calls in /step
            if last.observation:
                outputs.append(Message(role="user", content=last.observation))
        assert response is not None and last is not None  # max_steps >= 1
        response.output = outputs
        response.usage = rollout.record.usage
        return params, response, last, steps, total_reward
