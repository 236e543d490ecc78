"""``bash_agent``: a bash-only agent loop, one shell command per model turn, for the ``repo``
environment (or any environment with a command tool).

One rollout (``POST /run``):

1. ``POST /seed_session`` on the resources server with the task row;
2. the model gets the task's messages, after a system message saying the format (``instructions``):
   each reply holds exactly one fenced ``bash`` block. No function tools are offered;
3. the block's command is run through the environment's command tool (``command_tool``, default
   ``run_command``, at ``POST /tools/run_command`` with the session's cookie); its exit code and
   output, cut at ``observation_chars``, come back as the next user message. A reply with no block,
   or several, gets a format reminder instead (the turn counts);
4. repeat 2-3 until the command is ``submit_command`` (default ``submit``) alone, or ``max_steps``
   model calls were made;
5. ``POST /verify`` with the task row and the trajectory (the model's messages and the
   observations); return the verdict, the trajectory, ``submitted`` and ``steps``;
6. ``POST /close_session``, whether the rollout succeeded or not.

A tool error the environment meant (a 4xx: a refused path, a stopped command) is an observation; an
infrastructure failure (5xx, timeout, lost session) fails the rollout, typed, as with every agent.
"""

from __future__ import annotations

import json
import re
from typing import Any

import msgspec

from gym_core import AgentServer
from gym_core.rollout import Rollout
from gym_core.schemas import FunctionCall, Message, Response, RunRequest, Usage, message_text, new_id

from gym_repo.config import BashAgentConfig

__all__ = ["BashAgent", "command_of"]

_FENCE = re.compile(r"^\s*```\s*([\w+-]*)\s*$")
_SHELLS = ("bash", "sh", "shell", "")


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """The fenced code blocks of a reply, as (language, body): a block opens at a line that is a
    fence with an optional language and closes at the next line that is a bare fence."""
    blocks: list[tuple[str, str]] = []
    language: str | None = None
    body: list[str] = []
    for line in text.splitlines():
        fence = _FENCE.match(line)
        if language is None:
            if fence:
                language, body = fence.group(1).lower(), []
        elif fence and not fence.group(1):
            blocks.append((language, "\n".join(body)))
            language = None
        else:
            body.append(line)
    return blocks


def command_of(text: str) -> tuple[str | None, str | None]:
    """The command of a reply (its one fenced bash block; blocks in other languages are not commands),
    or None and what is wrong with the reply."""
    blocks = [body for language, body in fenced_blocks(text) if language in _SHELLS]
    if len(blocks) == 1 and blocks[0].strip():
        return blocks[0].strip(), None
    if not blocks or not blocks[0].strip():
        return None, "your reply has no ```bash block: reply with exactly one command in one ```bash block"
    return None, f"your reply has {len(blocks)} ```bash blocks: reply with exactly one command in one ```bash block"


def observation(output: str, limit: int) -> str:
    """The tool's answer as the model reads it: the exit code, then stdout and stderr (or the error)."""
    try:
        answer = json.loads(output)
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        text = output
    elif "error" in answer:
        error = answer["error"]
        text = "error: " + (error.get("message", str(error)) if isinstance(error, dict) else str(error))
    else:
        text = f"exit code: {answer.get('exit_code')}" + (" (timed out)" if answer.get("timed_out") else "")
        if answer.get("stdout"):
            text += f"\nstdout:\n{answer['stdout']}"
        if answer.get("stderr"):
            text += f"\nstderr:\n{answer['stderr']}"
    if len(text) > limit:
        text = text[:limit] + f"\n[... {len(text) - limit} more characters cut ...]"
    return text


class BashAgent(AgentServer):
    config: BashAgentConfig

    async def run(self, body: RunRequest, task: dict[str, Any]) -> dict[str, Any]:
        async with self.rollout(task) as rollout:
            params = body.responses_create_params
            response, submitted, steps = await self._loop(params, rollout)
            verdict = await rollout.verify(params, response)
        return rollout.result(verdict, response, submitted=submitted, steps=steps)

    async def _loop(self, params: Any, rollout: Rollout) -> tuple[Response, bool, int]:
        rollout.offered = frozenset({self.config.command_tool})  # the agent's own calls, never the model's
        given = [Message(role="user", content=params.input)] if isinstance(params.input, str) else list(params.input)
        conversation: list[Any] = [Message(role="system", content=self.config.instructions), *given]
        request = msgspec.structs.replace(params, input=conversation, tools=None, tool_choice=None)
        outputs: list[Any] = []
        usage = Usage()
        response: Response | None = None
        submitted = False
        steps = 0
        for _ in range(self.config.max_steps):
            steps += 1
            response = await rollout.call_model(request)
            if response.usage is not None:
                usage = usage + response.usage
            said = [item for item in response.output if isinstance(item, Message) and item.role == "assistant"]
            outputs.extend(said)
            conversation.extend(said)
            command, problem = command_of("\n".join(message_text(m) for m in said))
            if command is not None and command == self.config.submit_command:
                submitted = True
                break
            if command is None:
                seen = problem or ""
            else:
                arguments = json.dumps({self.config.command_argument: command})
                call = FunctionCall(call_id=new_id("call"), name=self.config.command_tool, arguments=arguments)
                result = await rollout.call_tool(call)
                output = result.output if isinstance(result.output, str) else json.dumps(result.output)
                seen = observation(output, self.config.observation_chars)
            note = Message(role="user", content=seen)
            outputs.append(note)
            conversation.append(note)
        assert response is not None
        response.output = outputs
        response.usage = usage
        return response, submitted, steps
