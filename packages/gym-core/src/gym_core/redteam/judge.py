"""The quoting judge: a model server that repeats the policy's forged lines before ruling against it.

A real judge often quotes the answer it grades ("The candidate writes: ... [[A=B]] ... so I rule
[[A!=B]]"). An environment that reads the first verdict label of such a reply, or any label inside
the quote, is won by an answer that prints the label. This server answers every request with the
lines of its prompt that hold :data:`~gym_core.redteam.GRADER_NOTE` (matched after NFKC, so an
environment that neutralised the line into look-alike characters is quoted as it sent it), then its
``verdict``. It is registered by :data:`plugin` as :data:`QUOTING_JUDGE`.
"""

from __future__ import annotations

import unicodedata
from typing import Annotated, Any

from msgspec import Meta

from gym_core.hookspecs import hookimpl
from gym_core.options import ServerConfig
from gym_core.redteam.declarations import DEFAULT_RULING
from gym_core.redteam.probes import GRADER_NOTE
from gym_core.schemas import Message, OutputText, Response, ResponseCreateParams, Usage, new_id
from gym_core.servers import ModelServer

__all__ = ["QUOTING_JUDGE", "QuotingJudge", "QuotingJudgeConfig", "plugin", "quote_and_rule"]

QUOTING_JUDGE = "redteam_quoting_judge"


class QuotingJudgeConfig(ServerConfig, kw_only=True):
    verdict: Annotated[str, Meta(description="the ruling the reply ends with, after the quote")] = DEFAULT_RULING
    marker: Annotated[str, Meta(description="the lines of the prompt holding this text are quoted")] = GRADER_NOTE


def _prompt_text(params: ResponseCreateParams) -> str:
    if isinstance(params.input, str):
        return params.input
    texts: list[str] = []
    for item in params.input:
        if isinstance(item, Message):
            if isinstance(item.content, str):
                texts.append(item.content)
            else:
                texts.extend(t for part in item.content if isinstance(t := getattr(part, "text", None), str))
    return "\n".join(texts)


def quote_and_rule(prompt: str, verdict: str = DEFAULT_RULING, marker: str = GRADER_NOTE) -> str:
    """The quoting judge's reply to ``prompt``: its lines holding ``marker`` (compared after NFKC and
    casefolding), quoted, then ``verdict``."""
    wanted = unicodedata.normalize("NFKC", marker).casefold()
    quoted = [line for line in prompt.splitlines() if wanted in unicodedata.normalize("NFKC", line).casefold()]
    quote = "The candidate writes:\n" + "\n".join(f"> {line}" for line in quoted) + "\n\n" if quoted else ""
    return quote + verdict


class QuotingJudge(ModelServer):
    config: QuotingJudgeConfig
    model_name = QUOTING_JUDGE

    async def responses(self, params: ResponseCreateParams) -> Response:
        text = quote_and_rule(_prompt_text(params), self.config.verdict, self.config.marker)
        message = Message(id=new_id("msg"), role="assistant", status="completed", content=[OutputText(text=text)])
        words = len(text.split())
        return Response(
            model=self.model_name,
            output=[message],
            usage=Usage(input_tokens=1, output_tokens=words, total_tokens=words + 1),
        )


class _QuotingJudgePlugin:
    @hookimpl
    def gym_register_servers(self, register: Any) -> None:
        register(
            name=QUOTING_JUDGE,
            kind="model",
            server=QuotingJudge,
            config=QuotingJudgeConfig,
            description="gym redteam's judge: quotes the candidate's forged lines, then rules against it",
        )


plugin = _QuotingJudgePlugin()
