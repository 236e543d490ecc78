{%- if cookiecutter.kind == "model" -%}
"""An echo model: it answers every request with the text of the last user message.

Replace :meth:`{{ cookiecutter.__server_class }}.responses` with calls to your model. gym serves
``POST /v1/responses`` from it and derives ``POST /v1/chat/completions``.
"""

from __future__ import annotations

from typing import Any

from gym_core import ModelServer
from gym_core.schemas import InputText, Message, OutputText, Response, ResponseCreateParams, Usage, new_id

from {{ cookiecutter.__module_name }}.config import {{ cookiecutter.__class_prefix }}Config


def last_user_text(params: ResponseCreateParams) -> str:
    """The text of the last user message of a request ("" when there is none)."""
    if isinstance(params.input, str):
        return params.input
    for item in reversed(params.input):
        if isinstance(item, Message) and item.role == "user":
            if isinstance(item.content, str):
                return item.content
            return "".join(part.text for part in item.content if isinstance(part, InputText))
    return ""


class {{ cookiecutter.__server_class }}(ModelServer):
    config: {{ cookiecutter.__class_prefix }}Config

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.model_name = self.config.model_name

    async def responses(self, params: ResponseCreateParams) -> Response:
        question = last_user_text(params)
        text = self.config.prefix + question
        reply = Message(id=new_id("msg"), role="assistant", status="completed", content=[OutputText(text=text)])
        # Words stand in for tokens: a real model reports its tokenizer's counts.
        words_in = len(question.split())
        words_out = len(text.split())
        return Response(
            model=self.model_name,
            output=[reply],
            usage=Usage(input_tokens=words_in, output_tokens=words_out, total_tokens=words_in + words_out),
        )
{%- elif cookiecutter.kind == "resources" -%}
"""An environment with one tool, ``add``, and a verifier that compares the final answer with the
task's ``expected_answer``.

The session (one per rollout, carried by a cookie) counts the tool calls, and ``verify`` reports
that count next to the reward. Add tools with ``@tool``; give ``verify`` your own scoring.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from gym_core import ResourcesServer, Session, tool
from gym_core.schemas import VerifyRequest, VerifyResponse, response_text

from {{ cookiecutter.__module_name }}.config import {{ cookiecutter.__class_prefix }}Config


class {{ cookiecutter.__class_prefix }}VerifyRequest(VerifyRequest, kw_only=True):
    expected_answer: str


class {{ cookiecutter.__class_prefix }}VerifyResponse(VerifyResponse, kw_only=True):
    answer: str
    tool_calls: int


class {{ cookiecutter.__server_class }}(ResourcesServer):
    config: {{ cookiecutter.__class_prefix }}Config

    def _state(self, session: Session) -> dict:
        return self.sessions.get_or_create(session.id, lambda: {"tool_calls": 0})

    @tool
    async def add(
        self,
        session: Session,
        a: Annotated[float, msgspec.Meta(description="The first number")],
        b: Annotated[float, msgspec.Meta(description="The second number")],
    ) -> dict:
        """Add two numbers and return their sum."""
        self._state(session)["tool_calls"] += 1
        total = a + b
        return {"sum": int(total) if total.is_integer() else total}

    async def verify(
        self, session: Session, body: {{ cookiecutter.__class_prefix }}VerifyRequest
    ) -> {{ cookiecutter.__class_prefix }}VerifyResponse:
        answer = response_text(body.response).strip()
        expected = body.expected_answer.strip()
        if self.config.ignore_case:
            answer, expected = answer.lower(), expected.lower()
        state = self.sessions.get(session.id) if session.exists else None
        return {{ cookiecutter.__class_prefix }}VerifyResponse(
            reward=float(answer == expected),
            answer=answer,
            tool_calls=state["tool_calls"] if state else 0,
        )
{%- else -%}
"""A one-shot agent: seed the session, ask the model once, verify its answer.

``POST /run`` takes a task row. The rollout's contract belongs to the base class: ``self.rollout(task)``
seeds the session on the resources server (``POST /seed_session``) and closes it on exit, whether the
rollout failed or not; ``rollout.call_model`` asks the model (counted in the rollout record),
``rollout.call_tool`` runs a tool the task offered (any other name gets an "unknown tool" output),
``rollout.verify`` scores the response. Extend :meth:`{{ cookiecutter.__server_class }}.run` to add
tool calls, retries, several turns...
"""

from __future__ import annotations

from typing import Any

from gym_core import AgentServer
from gym_core.schemas import Response, ResponseCreateParams, RunRequest

from {{ cookiecutter.__module_name }}.config import {{ cookiecutter.__class_prefix }}Config


class {{ cookiecutter.__server_class }}(AgentServer):
    config: {{ cookiecutter.__class_prefix }}Config

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
{%- endif %}
