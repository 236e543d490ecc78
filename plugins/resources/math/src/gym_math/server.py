"""The ``math`` resources server: no tools, a verifier of boxed answers.

Task rows follow NeMo Gym's math datasets: ``responses_create_params`` (the prompt) and
``expected_answer``. The reward is 1.0 when the last ``\\boxed{...}`` of the model's final text is
mathematically equivalent to ``expected_answer``, else 0.0; the extracted answer and the reason
("correct", "wrong", "no_boxed_answer", "timeout") come back with it.
"""

from __future__ import annotations

from gym_core import ResourcesServer, Session
from gym_core.schemas import VerifyRequest, VerifyResponse, response_text

from gym_math.config import MathConfig
from gym_math.verify import averify_answer, make_verifier_pool


class MathVerifyRequest(VerifyRequest, kw_only=True):
    expected_answer: str | int | float


class MathVerifyResponse(VerifyResponse, kw_only=True, omit_defaults=False):
    """Always carries extracted_answer, None included: profiles count missing answers."""

    extracted_answer: str | None = None
    reason: str = ""


class MathServer(ResourcesServer):
    config: MathConfig

    async def startup(self) -> None:
        # Warm workers (sympy imported) before the server says it is ready.
        self.pool = make_verifier_pool(self.config.verify_workers, memory_limit_mb=self.config.verify_memory_limit_mb)
        await self.pool.start()

    async def shutdown(self) -> None:
        await self.pool.aclose()

    async def verify(self, session: Session, body: MathVerifyRequest) -> MathVerifyResponse:
        result = await averify_answer(
            response_text(body.response), str(body.expected_answer), timeout_s=self.config.verify_timeout_s, pool=self.pool
        )
        return MathVerifyResponse(reward=result.reward, extracted_answer=result.extracted_answer, reason=result.reason)
