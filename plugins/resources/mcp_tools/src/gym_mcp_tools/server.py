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

from gym_mcp_tools.config import McpToolsConfig


class McpToolsVerifyRequest(VerifyRequest, kw_only=True):
    expected_answer: str


class McpToolsVerifyResponse(VerifyResponse, kw_only=True):
    answer: str
    tool_calls: int


class McpToolsServer(ResourcesServer):
    config: McpToolsConfig

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
        self, session: Session, body: McpToolsVerifyRequest
    ) -> McpToolsVerifyResponse:
        answer = response_text(body.response).strip()
        expected = body.expected_answer.strip()
        if self.config.ignore_case:
            answer, expected = answer.lower(), expected.lower()
        state = self.sessions.get(session.id) if session.exists else None
        return McpToolsVerifyResponse(
            reward=float(answer == expected),
            answer=answer,
            tool_calls=state["tool_calls"] if state else 0,
        )
