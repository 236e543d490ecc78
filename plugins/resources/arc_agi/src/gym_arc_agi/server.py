"""The ``arc_agi`` resources server: no tools, a verifier of ARC-AGI output grids.

Task rows: ``responses_create_params`` (the prompt, which already shows the training pairs),
``train``, ``test_input``, ``expected_output`` and ``task_id``, all optional; ``null`` reads as
the default. The reward is 1.0 when the first grid found in the assistant's text (boxed grids
first, see :mod:`gym_arc_agi.verify`) equals ``expected_output`` exactly, else 0.0; the verdict
also carries ``predicted_output`` (the grid, or null), ``extraction_successful`` and ``reason``.
"""

from __future__ import annotations

from typing import Any

from gym_core import ResourcesServer, Session
from gym_core.schemas import VerifyRequest, VerifyResponse

from gym_arc_agi.config import ArcAgiConfig
from gym_arc_agi.verify import agrade, assistant_text, make_grader_pool

__all__ = ["ArcAgiServer", "ArcAgiVerifyRequest", "ArcAgiVerifyResponse"]


class ArcAgiVerifyRequest(VerifyRequest, kw_only=True):
    """The row's task fields (``verify`` reads only ``expected_output``)."""

    # The examples are already in the prompt; declared so that a malformed row is refused.
    train: list[dict[str, Any]] | None = None
    test_input: list[list[int]] | None = None
    expected_output: list[list[int]] | None = None
    task_id: str | None = None


class ArcAgiVerifyResponse(VerifyResponse, kw_only=True, omit_defaults=False):
    """Always carries ``predicted_output``, null included."""

    predicted_output: list[list[int]] | None = None
    extraction_successful: bool = False
    reason: str = ""


class ArcAgiServer(ResourcesServer):
    config: ArcAgiConfig

    async def startup(self) -> None:
        # Workers forked before the server says it is ready: the first long answer waits for none.
        self.pool = make_grader_pool(self.config.verify_workers, memory_limit_mb=self.config.verify_memory_limit_mb)
        await self.pool.start()

    async def shutdown(self) -> None:
        await self.pool.aclose()

    async def verify(self, session: Session, body: ArcAgiVerifyRequest) -> ArcAgiVerifyResponse:
        verdict = await agrade(
            assistant_text(body.response),
            body.expected_output or [],
            pool=self.pool,
            timeout_s=self.config.verify_timeout_s,
            several=self.config.several_answers,
        )
        return ArcAgiVerifyResponse(
            reward=verdict.reward,
            predicted_output=verdict.predicted_output,
            extraction_successful=verdict.extraction_successful,
            reason=verdict.reason,
        )
