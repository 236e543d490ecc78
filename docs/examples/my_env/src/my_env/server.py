"""The my_env server, imported only by the process that runs it."""

from gym_core import ResourcesServer, Session, tool
from gym_core.schemas import VerifyRequest, VerifyResponse, response_text

from my_env.config import MyEnvConfig


class MyEnvVerify(VerifyRequest, kw_only=True):
    expected_answer: str


class MyEnvServer(ResourcesServer):
    config: MyEnvConfig

    @tool
    async def shout(self, text: str) -> str:
        """Return the text in capitals."""
        return text.upper()

    async def verify(self, session: Session, body: MyEnvVerify) -> VerifyResponse:
        answer, expected = response_text(body.response), body.expected_answer
        if self.config.ignore_case:
            answer, expected = answer.lower(), expected.lower()
        return VerifyResponse(reward=float(expected in answer))
