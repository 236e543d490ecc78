"""An echo model: it answers every request with the text of the last user message.

Replace :meth:`VllmModelModel.responses` with calls to your model. gym serves
``POST /v1/responses`` from it and derives ``POST /v1/chat/completions``.
"""

from __future__ import annotations

from typing import Any

from gym_core import ModelServer
from gym_core.schemas import InputText, Message, OutputText, Response, ResponseCreateParams, Usage, new_id

from gym_vllm_model.config import VllmModelConfig


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


class VllmModelModel(ModelServer):
    config: VllmModelConfig

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
