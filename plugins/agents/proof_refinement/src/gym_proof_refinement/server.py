"""The proof-refinement agent: answer, verify, and let the verifier's feedback drive corrections.

One rollout (``POST /run``):

1. ``POST /seed_session`` on the resources server with the whole task row (the rollout's cookie dict);
2. attempt 0: ``POST /v1/responses`` on the model with the row's ``responses_create_params`` (a
   string ``input`` becomes one user message); one model call, no tools executed;
3. ``POST /verify`` with the task row, the response and ``turn_index`` (the attempt's index), in the
   same session; the attempt is recorded;
4. stop when the verdict's ``needs_correction`` is falsy (missing: false), when
   ``max_correction_turns`` corrections were made, or (with a warning) when its ``correction_prompt``
   is empty; otherwise the next attempt asks the model again with the correction prompt (option
   ``correction_input``: a fresh single-turn request, as the reference does, or the conversation so
   far) and goes back to 3;
5. ``POST /close_session``, whether the rollout succeeded or not.

The result is the last verdict (every field it has), the last response, ``total_turns``,
``attempt_rewards`` (one per attempt), ``all_attempts`` (when ``include_all_attempts``) and what
produced the rollout: ``agent``, ``model_server``, ``model``, ``num_model_calls``,
``num_tool_calls`` (calls the model made; none is executed), ``usage`` (summed) and
``usage_per_turn`` (one per attempt). All model calls of a rollout share one model-side cookie
dict. A failure of any call (seed, model, verify) fails the rollout with its typed reason.
"""

from __future__ import annotations

from typing import Any

import msgspec

from gym_core import AgentServer
from gym_core.schemas import (
    Message,
    OutputText,
    Response,
    ResponseCreateParams,
    RunRequest,
    function_calls,
)

from gym_proof_refinement.config import ProofRefinementConfig

__all__ = ["ProofRefinementAgent", "generation_text", "correction_params"]


def generation_text(response: Response) -> str:
    """The text of the first ``output_text`` part of the last assistant message that has one ("" if
    none): the attempt's ``generation``, as the reference records it."""
    for item in reversed(response.output):
        if isinstance(item, Message) and item.role == "assistant":
            if isinstance(item.content, str):
                return item.content
            for part in item.content:
                if isinstance(part, OutputText):
                    return part.text
    return ""


def as_items(params: ResponseCreateParams) -> list[Any]:
    """``params.input`` as a list of items (a string is one user message)."""
    return [Message(role="user", content=params.input)] if isinstance(params.input, str) else list(params.input)


def correction_params(original: ResponseCreateParams, prompt: str) -> ResponseCreateParams:
    """The reference's correction request: the prompt as the one user message, no history; of the
    task's params only ``model``, ``temperature`` and ``top_p`` are kept (``max_output_tokens``,
    ``tools``, ``instructions``, ``reasoning``, ``metadata``... are dropped)."""
    return ResponseCreateParams(
        input=[Message(role="user", content=prompt)],
        model=original.model,
        temperature=original.temperature,
        top_p=original.top_p,
    )


class ProofRefinementAgent(AgentServer):
    config: ProofRefinementConfig

    async def startup(self) -> None:
        await super().startup()
        if self.config.skip_verification:
            self.log.warning(
                "%s: skip_verification is ignored (as in the reference): verification drives the loop", self.name
            )

    async def ask_model(self, params: ResponseCreateParams, cookies: dict[str, str]) -> Response:
        """The model's one response to ``params`` (a string ``input`` sent as one user message)."""
        return await self.call_model(self.config.model_server, params, cookies)

    async def responses(self, params: ResponseCreateParams) -> Response:
        """``POST /v1/responses``: one model call, its response unchanged (no session, no verification)."""
        return await self.ask_model(params, {})

    async def run(self, body: RunRequest, task: dict[str, Any]) -> dict[str, Any]:
        cfg = self.config
        original = body.responses_create_params
        attempts: list[dict[str, Any]] = []
        responses: list[Response] = []
        params = original
        history = as_items(original)  # correction_input "conversation": the conversation so far
        async with self.rollout(task) as rollout:  # its model cookies are kept across attempts
            for turn_index in range(cfg.max_correction_turns + 1):
                response = await rollout.call_model(params)
                # The tool calls the model made are counted; none is run.
                rollout.record.add_tool_calls(len(function_calls(response)))
                responses.append(response)
                verdict = await rollout.verify(original, response, turn_index=turn_index)
                prompt = verdict.get("correction_prompt")
                attempts.append(
                    {
                        "turn_index": turn_index,
                        "input": params,
                        "response": response,
                        "generation": generation_text(response),
                        "proof_status": verdict.get("proof_status") or "unknown",
                        "reward": verdict.get("reward") or 0.0,
                        "error_feedback": verdict.get("error_feedback"),
                        "correction_prompt": prompt,
                    }
                )
                if not verdict.get("needs_correction"):
                    break  # right, or wrong with no retry offered
                if turn_index == cfg.max_correction_turns:
                    break  # out of corrections
                if not prompt:
                    self.log.warning(
                        "%s: the verifier asked for a correction without a correction_prompt; stopping", self.name
                    )
                    break
                if cfg.correction_input == "fresh":
                    params = correction_params(original, prompt)
                else:
                    history = [*history, *response.output, Message(role="user", content=prompt)]
                    params = msgspec.structs.replace(original, input=history)
        return rollout.result(
            verdict,
            responses[-1],
            total_turns=len(attempts),
            attempt_rewards=[attempt["reward"] for attempt in attempts],
            all_attempts=attempts if cfg.include_all_attempts else None,
        )
