"""gym's conformance kit for the openai_model server, in both of its modes, with gym's scripted model
as the OpenAI-compatible upstream (its /v1/chat/completions and /v1/responses are real endpoints)."""

from __future__ import annotations

from gym_core.config import free_port
from gym_core.testing import ModelServerTests

import gym_openai_model.plugin
import gym_scripted.plugin


class TestOpenAIModelOverChatCompletions(ModelServerTests):
    plugins = [gym_openai_model.plugin, gym_scripted.plugin]
    instance = "policy"
    deterministic = True  # the scripted upstream says the same line to every request
    api = "chat_completions"

    @classmethod
    def instances_config(cls):
        port = free_port()  # the upstream's URL is an option of the server under test
        upstream = f"http://127.0.0.1:{port}/v1"
        return {
            "upstream": {"plugin": "scripted", "port": port},
            "policy": {"plugin": "openai_model", "base_url": upstream, "model": "scripted", "api": cls.api},
        }


class TestOpenAIModelResponsesPassthrough(TestOpenAIModelOverChatCompletions):
    api = "responses"
