"""The token-preserving agent: a multi-turn tool loop whose rollouts a trainer can use token for token.

One rollout (``POST /run``), like ``simple_agent``'s, with token ids kept and sent back:

1. ``POST /seed_session`` on the resources server with the task row (one cookie dict per rollout);
2. ``POST /v1/responses`` on the model with the conversation so far and ``return_token_ids: true``;
   the model server puts ``prompt_token_ids``, ``generation_token_ids`` and
   ``generation_log_probs`` on the last output item of the call;
3. each ``function_call`` of a tool offered in this rollout goes through ``AgentServer.call_tool``
   (any other name, or a 4xx of the environment, is an error output the model sees; a 5xx, timeout
   or lost session fails the rollout), its answer a ``function_call_output`` item;
4. the next request's ``input`` is the previous one + the model's output items *as they came*, token
   fields included + the tool outputs: a model server that honours token history (``local_llama``)
   prompts with the previous prompt ids + generated ids + the tokens of the tool outputs only, never
   a re-tokenisation of the text;
5. repeat 2-4 until the model calls no tool or ``max_steps`` model calls were made; then
   ``POST /verify`` with the task row and the whole trajectory; ``POST /close_session`` in any case.

After each call the agent checks what it got: the call's last item carries the three token fields
(as many log-probs as generated ids), and its prompt ids begin with the previous call's prompt +
generated ids. A miss is counted in ``token_drift`` (per turn: ``turns[k].drifted_tokens``, the
number of previous ids the new prompt does not repeat in place) and, with ``require_token_ids`` (the
default), fails the rollout: a trainer must not get a rollout whose ids were silently re-tokenised.

The result is the verdict, the response (every output item, token fields kept), and what produced
it (gym-core's ``RolloutRecord``): ``agent``, ``model_server``, ``model``, ``num_model_calls``,
``num_tool_calls``, ``usage`` (summed), ``usage_per_turn``; and ``turns`` (per model call: ``prompt_tokens``, ``generation_tokens``,
``drifted_tokens``) and ``token_drift`` (their sum).
"""

from __future__ import annotations

from typing import Any

import msgspec

from gym_core import AgentServer, ServerCallError
from gym_core.rollout import Rollout
from gym_core.schemas import Message, Response, ResponseCreateParams, RunRequest, function_calls

from gym_token_preserving.config import TokenPreservingConfig

__all__ = ["TokenPreservingAgent", "drifted_tokens", "token_fields"]


def token_fields(response: Response) -> tuple[list[int], list[int], list[float]] | None:
    """The token ids and log-probs of one model call (on its last output item), or None if absent or partial."""
    if not response.output:
        return None
    last = response.output[-1]
    prompt = getattr(last, "prompt_token_ids", None)
    generated = getattr(last, "generation_token_ids", None)
    log_probs = getattr(last, "generation_log_probs", None)
    if prompt is None or generated is None or log_probs is None or len(generated) != len(log_probs):
        return None
    return prompt, generated, log_probs


def drifted_tokens(history: list[int], prompt: list[int]) -> int:
    """How many of ``history`` (the previous prompt + generated ids) ``prompt`` does not repeat in place."""
    same = sum(1 for a, b in zip(history, prompt) if a == b)
    return len(history) - same


class TokenPreservingAgent(AgentServer):
    config: TokenPreservingConfig

    async def responses(self, params: ResponseCreateParams) -> Response:
        """``POST /v1/responses``: model ⇄ tools in a fresh session (seeded with the request alone),
        without verification; the response holds every output item with its token fields."""
        async with self.rollout({"responses_create_params": params}) as rollout:
            response, _ = await self._loop(params, rollout)
            return response

    def _fail(self, message: str) -> None:
        raise ServerCallError(self.config.model_server, "/v1/responses", message)

    async def _loop(self, params: ResponseCreateParams, rollout: Rollout) -> tuple[Response, dict[str, Any]]:
        """Model ⇄ tools until the model stops calling tools; the response and the agent's own facts."""
        cfg = self.config
        await rollout.offer(params, resources_tools=cfg.offer_resources_tools)
        conversation: list[Any] = (
            [Message(role="user", content=params.input)] if isinstance(params.input, str) else list(params.input)
        )
        # The caller's params stay as they were; every call asks for token ids.
        request = msgspec.structs.replace(params, input=conversation, return_token_ids=True)
        outputs: list[Any] = []
        turns: list[dict[str, Any]] = []
        history: list[int] | None = None  # the previous call's prompt + generated ids
        response: Response | None = None
        for step in range(cfg.max_steps):
            response = await rollout.call_model(request)
            tokens = token_fields(response)
            turn: dict[str, Any] = {"prompt_tokens": None, "generation_tokens": None, "drifted_tokens": 0}
            if tokens is None:
                if cfg.require_token_ids:
                    self._fail(
                        f"model call {step + 1} returned no token ids (prompt_token_ids, generation_token_ids "
                        "and generation_log_probs on its last output item): the model server must support "
                        "return_token_ids, or set require_token_ids: false"
                    )
                history = None  # nothing to compare the next prompt with
            else:
                prompt, generated, _ = tokens
                drift = drifted_tokens(history, prompt) if history is not None else 0
                if drift and cfg.require_token_ids:
                    self._fail(
                        f"model call {step + 1}: its prompt does not begin with the previous call's prompt + "
                        f"generated ids ({drift} of {len(history or [])} differ or are missing): the model "
                        "server re-tokenised the conversation"
                    )
                turn.update(prompt_tokens=len(prompt), generation_tokens=len(generated), drifted_tokens=drift)
                history = prompt + generated
            turns.append(turn)
            outputs.extend(response.output)
            conversation.extend(response.output)  # as they came: the token fields travel back
            calls = function_calls(response)
            if not calls:
                break
            for call in calls:
                item = await rollout.call_tool(call)
                outputs.append(item)
                conversation.append(item)
        assert response is not None
        response.output = outputs
        response.usage = rollout.record.usage
        return response, {"turns": turns, "token_drift": sum(t["drifted_tokens"] for t in turns)}

    async def run(self, body: RunRequest, task: dict[str, Any]) -> dict[str, Any]:
        async with self.rollout(task) as rollout:
            params = body.responses_create_params
            response, facts = await self._loop(params, rollout)
            verdict = await rollout.verify(params, response)
        return rollout.result(verdict, response, **facts)
