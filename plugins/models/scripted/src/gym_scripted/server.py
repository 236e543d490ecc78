"""A model that answers from a script: the same input always gets the same output.

The script is a list of turns. The reply to a request is the turn whose index is the number of
model turns already in the request's input (each run of assistant messages and function calls
counts as one), so a rollout walks through the script turn by turn while the server stays
stateless. A turn is ``{"text": "..."}`` and/or ``{"tool_calls": [{"name": ..., "arguments": {...}}]}``.
A request may bring its own script as JSON in ``metadata["scripted_turns"]``.
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import msgspec

from gym_core import ModelServer, ToolError
from gym_core.convert import echo_params
from gym_core.schemas import (
    ChatCompletion,
    ChatCompletionRequest,
    FunctionCall,
    Message,
    OutputText,
    Reasoning,
    Response,
    ResponseCreateParams,
    Usage,
    new_id,
)

from gym_scripted.config import ScriptedModelConfig, ScriptedTurn


def input_text(params: ResponseCreateParams) -> str:
    """The text of the request's input messages, joined by newlines (what ``rules`` search)."""
    if isinstance(params.input, str):
        return params.input
    texts = []
    for item in params.input:
        if isinstance(item, Message):
            if isinstance(item.content, str):
                texts.append(item.content)
            else:
                texts.extend(t for part in item.content if isinstance(t := getattr(part, "text", None), str))
    return "\n".join(texts)


def model_turns_in(params: ResponseCreateParams) -> int:
    """How many model turns the input already holds (runs of assistant output items)."""
    if isinstance(params.input, str):
        return 0
    turns = 0
    in_turn = False
    for item in params.input:
        generated = isinstance(item, (FunctionCall, Reasoning)) or (
            isinstance(item, Message) and item.role == "assistant"
        )
        if generated and not in_turn:
            turns += 1
        in_turn = generated
    return turns


def _chosen_calls(calls: list[Any], choice: Any) -> list[Any]:
    """The turn's calls that ``tool_choice`` allows; a 422 when it asks for a call the turn lacks."""
    if choice == "none":
        return []
    name = choice.get("name") if isinstance(choice, dict) else None
    if name is not None:
        calls = [call for call in calls if call.name == name]
    if (choice == "required" or name is not None) and not calls:
        wanted = f"a call of {name!r}" if name is not None else "a tool call"
        raise ToolError(f"tool_choice asks for {wanted}, and the script's turn has none", 422)
    return calls


class ScriptedModel(ModelServer):
    config: ScriptedModelConfig
    # The script decides the reply: sampling and length settings are accepted and change nothing;
    # n > 1: n copies of the reply;
    # parallel_tool_calls false keeps a turn's first call; tool_choice "none" drops the calls, a named
    # function keeps its calls, "required" needs one (a turn without is a 422: the script is wrong).
    # Any other parameter is a 400 naming it.
    honours = frozenset(
        {"temperature", "top_p", "max_tokens", "seed", "tools", "tool_choice", "parallel_tool_calls", "stream", "n"}
    )

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.model_name = self.config.model_name
        self._turns_decoder = msgspec.json.Decoder(list[ScriptedTurn])
        self._rules = [(re.compile(rule.match), rule) for rule in self.config.rules]

    def _script(self, params: ResponseCreateParams) -> list[ScriptedTurn]:
        metadata = params.metadata if isinstance(params.metadata, dict) else None
        if metadata and "scripted_turns" in metadata:
            try:
                return self._turns_decoder.decode(metadata["scripted_turns"])
            except (msgspec.DecodeError, msgspec.ValidationError) as exc:
                raise ToolError(f"metadata.scripted_turns is not a valid script: {exc}", 422) from exc
        return self.config.turns

    def _by_rule(self, params: ResponseCreateParams) -> ScriptedTurn | None:
        if not self._rules:
            return None
        text = input_text(params)
        for pattern, rule in self._rules:
            if (match := pattern.search(text)) is not None:
                if rule.error_status is not None:
                    raise ToolError(f"scripted failure (rule {rule.match!r})", rule.error_status)
                reply = match.expand(rule.text) if rule.expand and rule.text is not None else rule.text
                return ScriptedTurn(text=reply, tool_calls=rule.tool_calls)
        return None

    def _by_script(self, params: ResponseCreateParams) -> ScriptedTurn:
        script = self._script(params)
        if not script:
            raise ToolError("the script has no turns", 422)
        index = model_turns_in(params)
        if index >= len(script):
            index = index % len(script) if self.config.after_last == "cycle" else len(script) - 1
        return script[index]

    async def responses(self, params: ResponseCreateParams) -> Response:
        if self.config.delay_s:
            await asyncio.sleep(self.config.delay_s)
        turn = self._by_rule(params) or self._by_script(params)
        output: list[Any] = []
        if turn.text is not None:
            output.append(
                Message(id=new_id("msg"), role="assistant", status="completed", content=[OutputText(text=turn.text)])
            )
        calls = _chosen_calls(turn.tool_calls, params.tool_choice)
        if params.parallel_tool_calls is False:
            calls = calls[:1]
        for call in calls:
            output.append(
                FunctionCall(
                    id=new_id("fc"),
                    call_id=new_id("call"),
                    name=call.name,
                    arguments=json.dumps(call.arguments, separators=(",", ":")),
                    status="completed",
                )
            )
        words_in = len(params.input.split()) if isinstance(params.input, str) else len(params.input)
        words_out = len((turn.text or "").split()) + len(calls)
        response = Response(
            model=self.model_name,
            output=output,
            usage=Usage(input_tokens=words_in, output_tokens=words_out, total_tokens=words_in + words_out),
        )
        echo_params(response, params)  # as OpenAI does: the tools offered, instructions, metadata...
        return response

    async def chat_completions(self, request: ChatCompletionRequest) -> ChatCompletion:
        completion = await super().chat_completions(request)
        n = request.n or 1
        if n > 1 and completion.choices:
            first = completion.choices[0]
            completion.choices = [msgspec.structs.replace(first, index=i) for i in range(n)]
            if completion.usage is not None:
                usage = completion.usage
                usage.completion_tokens *= n
                usage.total_tokens = usage.prompt_tokens + usage.completion_tokens
        return completion
