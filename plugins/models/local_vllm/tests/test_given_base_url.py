"""With ``base_url`` set, local_vllm_model launches nothing and is vllm_model: gym's model-server kit
against vllm_model's stub of vLLM, no Ray involved."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, ClassVar

from gym_core.testing import ModelServerTests, RunningServers

import gym_local_vllm.plugin
from gym_local_vllm.server import LocalVllmModel
from gym_vllm_model.testing import StubVllm


class TestLocalVllmModelOnGivenURLs(ModelServerTests):
    plugins = [gym_local_vllm.plugin]
    instance = "policy"
    deterministic = True  # the stub echoes
    stubs: ClassVar[list[StubVllm]] = []

    @classmethod
    def instances_config(cls) -> dict[str, Any]:
        cls.stubs = [StubVllm(f"replica{i}").start() for i in range(2)]
        return {"policy": {"plugin": "local_vllm_model", "base_url": [stub.url for stub in cls.stubs],
                           "model": "stub-model"}}  # fmt: skip

    @classmethod
    @contextlib.contextmanager
    def running(cls) -> Iterator[RunningServers]:
        try:
            with super().running() as servers:
                yield servers
        finally:
            for stub in cls.stubs:
                stub.stop()

    def test_serves_the_given_urls_and_launches_nothing(self, gym_servers: RunningServers) -> None:
        server = gym_servers.server
        assert isinstance(server, LocalVllmModel)
        assert server.replicas == [stub.url.rstrip("/") for stub in self.stubs]
        assert server.plan is None and server.engines == []
        before = sum(len(stub.completions()) for stub in self.stubs)
        reply = gym_servers.caller().post("/v1/chat/completions", {"messages": [{"role": "user", "content": "ping"}]})
        assert reply.status == 200, reply.text
        assert sum(len(stub.completions()) for stub in self.stubs) == before + 1  # one of the given vLLMs answered
