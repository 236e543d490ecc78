"""Tests of the vllm_model plugin against stub vLLM servers (gym_vllm_model.testing), real servers on
loopback: gym's conformance kit for a model server, then reasoning, token ids, context overflow and
the upstream request (what vLLM receives).

The plugin is registered explicitly rather than found through its entry point, so these tests also
run from a source checkout. Tests that need other first-party plugins are skipped where those are
not installed (in the plugin's own venv, say).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import openai
import pytest
import yaml

from gym_core import ServerClient
from gym_core.schemas import decode_response, response_text
from gym_core.testing import ModelServerTests, RunningServers, first_party, plugin_manager, running_servers

import gym_vllm_model.plugin
from gym_vllm_model.server import _sampled_tokens, _TokenDataError, replica_index, split_think
from gym_vllm_model.testing import StubVllm, echo_last_user_message, encode, render

PACKAGE = Path(__file__).resolve().parents[1]


def log_probs(ids: list[int]) -> list[float]:
    """What the stub reports for ``ids``."""
    return [-0.01 - (i % 10) / 10 for i in ids]


class TestVllmModel(ModelServerTests):
    # Instances over one stub each (the kit checks `policy`); the others show an option at work.
    plugins = [gym_vllm_model.plugin]
    instance = "policy"
    deterministic = True  # the stub echoes
    stubs: ClassVar[dict[str, StubVllm]] = {}

    @classmethod
    def instances_config(cls) -> dict[str, Any]:
        cls.stubs = {
            "main": StubVllm("main"),
            "inline": StubVllm("inline", reasoning_parser=False),
            "new_field": StubVllm("new_field", reasoning_field="reasoning"),
            "small": StubVllm("small", max_model_len=64),
        }
        for stub in cls.stubs.values():
            stub.start()

        def on(stub: str, **options: Any) -> dict[str, Any]:
            return {"plugin": "vllm_model", "base_url": cls.stubs[stub].url, "model": "stub-model", **options}

        return {
            "policy": on("main"),
            "training": on("main", return_token_id_information=True),
            "training_inline": on(
                "main", return_token_id_information=True, request_prompt_and_generation_token_ids=True
            ),
            "no_parser_upstream": on("inline"),
            "new_field": on("new_field"),
            "small": on("small"),
            "preserve": on("main", preserve_reasoning_in_assistant_content=True),
            "no_interleave": on("main", uses_interleaved_reasoning=False),
            "tuned": on(
                "main",
                extra_body={"top_k": 5, "temperature": 0.5, "repetition_penalty": 1.1},
                sampling_overrides={"temperature": 1.0},
                chat_template_kwargs={"enable_thinking": True, "x": 1},
                replace_developer_role_with_system=True,
                api_key="sk-secret",
            ),
            "no_sequential": on("main", sequential_reasoning_allowed=False),
        }

    @classmethod
    @contextlib.contextmanager
    def running(cls) -> Iterator[RunningServers]:
        try:
            with super().running() as servers:
                yield servers
        finally:
            for stub in cls.stubs.values():
                stub.stop()

    @pytest.fixture(autouse=True)
    def fresh_stubs(self) -> Iterator[None]:
        """Each test starts with empty request logs and the echo script."""
        for stub in self.stubs.values():
            stub.clear()
            stub.script = echo_last_user_message
            stub.fail_status = None
        yield

    def post(self, servers: RunningServers, instance: str, path: str, body: Any) -> Any:
        reply = servers.caller(instance).post(path, body)
        assert reply.status == 200, reply.text
        return reply.json()

    # --- reasoning ---

    @pytest.mark.parametrize(
        ("instance", "stub"), [("policy", "main"), ("no_parser_upstream", "inline"), ("new_field", "new_field")]
    )
    def test_reasoning_becomes_a_reasoning_item_for_the_openai_client(
        self, gym_servers: RunningServers, instance, stub
    ):
        self.stubs[stub].script = lambda body: {"reasoning": "2+2 is 4", "content": "\nThe answer is 4."}
        client = openai.OpenAI(
            base_url=f"{gym_servers.config.instances[instance].url}/v1",
            api_key=gym_servers.config.auth_token,
            max_retries=0,
        )
        try:
            response = client.responses.create(model="any", input="What is 2+2?")
            completion = client.chat.completions.create(model="any", messages=[{"role": "user", "content": "2+2?"}])
        finally:
            client.close()
        assert [item.type for item in response.output] == ["reasoning", "message"]
        assert [part.text for part in response.output[0].summary] == ["2+2 is 4"]
        assert response.output_text == "\nThe answer is 4."
        assert response.model == "stub-model"
        # The chat route gives a standard message: the reasoning inline.
        assert completion.choices[0].message.content == "<think>2+2 is 4</think>\nThe answer is 4."

    def test_each_think_block_is_a_summary_and_a_reasoning_only_turn_is_the_item_alone(self, gym_servers):
        self.stubs["inline"].script = lambda body: {"content": "<think>a</think>x<think>b</think>y"}
        response = decode_response(self.post(gym_servers, "no_parser_upstream", "/v1/responses", {"input": "q"}))
        assert [s.text for s in response.output[0].summary] == ["a", "b"] and response_text(response) == "xy"
        self.stubs["main"].script = lambda body: {"reasoning": "only thinking"}
        response = self.post(gym_servers, "training", "/v1/responses", {"input": "q"})
        assert [item["type"] for item in response["output"]] == ["reasoning"]
        assert response["output"][0]["generation_token_ids"] == encode("<think>only thinking</think>")

    HISTORY: ClassVar[list[dict[str, Any]]] = [
        {"role": "user", "content": "first"},
        {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "r"}]},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "\nact"}]},
        {"role": "user", "content": "second"},
    ]

    @pytest.mark.parametrize(("instance", "expected"), [
        ("policy", {"role": "assistant", "content": "\nact", "reasoning_content": "r", "reasoning": "r"}),
        ("no_interleave", {"role": "assistant", "content": "\nact"}),
        ("preserve", {"role": "assistant", "content": "<think>r</think>\nact"}),
    ])  # fmt: skip
    def test_reasoning_of_earlier_turns_goes_back_to_vllm(self, gym_servers, instance, expected):
        self.post(gym_servers, instance, "/v1/responses", {"input": self.HISTORY})
        sent = self.stubs["main"].completions()[-1]["messages"]
        assert sent[1] == expected
        # The chat route's inline <think> is read the same way.
        chat = {
            "messages": [
                {"role": "user", "content": "first"},
                {"role": "assistant", "content": "<think>r</think>\nact"},
                {"role": "user", "content": "second"},
            ]
        }
        self.post(gym_servers, instance, "/v1/chat/completions", chat)
        assert self.stubs["main"].completions()[-1]["messages"][1] == expected

    def test_a_history_ending_in_a_reasoning_only_turn_is_refused_without_sequential_reasoning(self, gym_servers):
        chat = {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "<think>r</think>"}]}
        completion = self.post(gym_servers, "no_sequential", "/v1/chat/completions", chat)
        assert completion["choices"][0]["finish_reason"] == "content_filter"
        assert self.stubs["main"].completions() == []  # vLLM was not asked

    # --- token ids and log-probs ---

    def test_training_mode_asks_vllm_for_log_probs_and_the_prompt_ids_of_its_tokenizer(self, gym_servers):
        response = self.post(
            gym_servers,
            "training",
            "/v1/responses",
            {"input": [{"role": "user", "content": "hello"}], "top_logprobs": None},
        )
        (sent,) = self.stubs["main"].completions()
        assert (sent["logprobs"], sent["top_logprobs"], sent["return_tokens_as_token_ids"]) == (True, 0, True)
        assert "return_token_ids" not in sent
        tokenized = [body for path, body in self.stubs["main"].requests if path == "/tokenize"]
        assert tokenized == [{"model": "stub-model", "messages": sent["messages"]}]
        last = response["output"][-1]
        assert last["prompt_token_ids"] == encode(render([{"role": "user", "content": "hello"}]))
        assert last["generation_token_ids"] == encode("hello")
        assert last["generation_log_probs"] == pytest.approx(log_probs(encode("hello")))
        # The chat route: the ids on the message, vLLM's transport-only log-probs removed.
        choice = self.post(
            gym_servers, "training", "/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}]}
        )["choices"][0]
        assert choice["logprobs"] is None and choice["message"]["generation_token_ids"] == encode("x")

    def test_inline_token_ids_and_later_turns_carry_the_earlier_ids(self, gym_servers):
        stub = self.stubs["main"]
        stub.script = lambda body: (
            {"tool_calls": [{"name": "lookup", "arguments": '{"q": 1}'}]} if len(body["messages"]) == 1 else {"content": "done"}
        )  # fmt: skip
        tools = [{"type": "function", "name": "lookup", "parameters": {"type": "object", "properties": {}}}]
        first_input = [{"role": "user", "content": "find it"}]
        first = self.post(gym_servers, "training_inline", "/v1/responses", {"input": first_input, "tools": tools})
        call = first["output"][-1]
        assert call["type"] == "function_call" and call["name"] == "lookup"
        assert not [path for path, _ in stub.requests if path == "/tokenize"]  # the ids came inline
        assert stub.completions()[-1]["return_token_ids"] is True
        history = call["prompt_token_ids"] + call["generation_token_ids"]
        later = [
            *first_input,
            *first["output"],
            {"type": "function_call_output", "call_id": call["call_id"], "output": "42"},
        ]
        # `policy` is not in training mode: the request's return_token_ids asks for the ids.
        second = self.post(
            gym_servers, "policy", "/v1/responses", {"input": later, "tools": tools, "return_token_ids": True}
        )
        assistant = stub.completions()[-1]["messages"][1]
        assert assistant["tool_calls"][0]["function"] == {"name": "lookup", "arguments": '{"q": 1}'}
        assert assistant["prompt_token_ids"] == call["prompt_token_ids"]
        assert assistant["generation_token_ids"] == call["generation_token_ids"]
        final = second["output"][-1]
        assert response_text(decode_response(second)) == "done"
        assert final["prompt_token_ids"][: len(history)] == history  # never re-tokenised
        assert final["generation_token_ids"] == encode("done")

    def test_token_data_is_checked(self, gym_servers):
        partial = [
            {"role": "user", "content": "q"},
            {"type": "message", "role": "assistant", "content": "a", "prompt_token_ids": [1, 2]},
        ]
        reply = gym_servers.caller("policy").post("/v1/responses", {"input": partial})
        assert reply.status == 422 and "generation_token_ids" in reply.json()["error"]["message"], reply.text
        reply = gym_servers.caller("training").post(
            "/v1/chat/completions", {"messages": [{"role": "user", "content": "q"}], "n": 2}
        )
        assert reply.status == 400 and "n=1" in reply.json()["error"]["message"], reply.text
        with pytest.raises(_TokenDataError, match="token_id"):
            _sampled_tokens({"content": [{"token": "hello", "logprob": -1.0}]})
        with pytest.raises(_TokenDataError, match="not a number"):
            _sampled_tokens({"content": [{"token": "token_id:5", "logprob": True}]})
        with pytest.raises(_TokenDataError, match="missing"):
            _sampled_tokens(None)
        assert _sampled_tokens({"content": [{"token": "token_id:7", "logprob": -0.5}]}) == ([7], [-0.5])

    # --- context length and upstream errors ---

    def test_a_context_length_error_is_an_incomplete_response(self, gym_servers):
        long_input = {"input": "many words " * 20, "max_output_tokens": 8}
        response = self.post(gym_servers, "small", "/v1/responses", long_input)
        assert response["status"] == "incomplete"
        assert response["incomplete_details"] == {"reason": "max_output_tokens"}
        assert [(item["type"], item["content"][0]["text"]) for item in response["output"]] == [("message", "")]
        assert len(self.stubs["small"].completions()) == 1  # asked once: no retry of a request that cannot fit

    def test_conversation_state_is_refused_not_dropped(self, gym_servers):
        reply = gym_servers.caller("policy").post(
            "/v1/responses", {"input": "and then?", "previous_response_id": "resp_1"}
        )
        assert reply.status == 400 and "previous_response_id" in reply.json()["error"]["message"], reply.text
        assert self.stubs["main"].completions() == []  # vLLM was not asked

    def test_another_4xx_is_a_final_typed_refusal(self, gym_servers):
        self.stubs["main"].fail_status = 400
        reply = gym_servers.caller("policy").post("/v1/responses", {"input": "hi"})
        assert reply.status == 424 and reply.json()["error"]["type"] == "upstream_refused", reply.text
        assert "failing on purpose" in reply.json()["error"]["message"]

    # --- what vLLM receives ---

    def test_upstream_request_settings(self, gym_servers):
        body = {
            "input": [{"role": "developer", "content": "be brief"}, {"role": "user", "content": "hi"}],
            "temperature": 0.2, "top_k": 7, "truncation": "auto", "user": "u1",
            "metadata": {"chat_template_kwargs": '{"enable_thinking": false}', "extra_body": '{"min_p": 0.1}'},
        }  # fmt: skip
        self.post(gym_servers, "tuned", "/v1/responses", body)
        sent = self.stubs["main"].completions()[-1]
        assert sent["model"] == "stub-model"
        assert sent["temperature"] == 1.0  # sampling_overrides win over the caller and extra_body
        assert (sent["top_k"], sent["repetition_penalty"], sent["min_p"]) == (
            7,
            1.1,
            0.1,
        )  # the caller wins over extra_body
        assert sent["chat_template_kwargs"] == {"enable_thinking": False, "x": 1}
        assert sent["messages"][0] == {"role": "system", "content": "be brief"}
        assert not {"metadata", "truncation", "user"} & sent.keys()
        bad = gym_servers.caller("tuned").post("/v1/responses", {"input": "hi", "metadata": {"extra_body": "[1]"}})
        assert bad.status == 400 and "metadata.extra_body" in bad.json()["error"]["message"]


def test_replica_index_is_a_stable_sha256_of_the_session_id():
    # Known values, the same in every process (Python's hash() of a str is salted per process):
    # the first 8 bytes of SHA-256 of the id, big-endian, modulo the replicas.
    assert replica_index("session-1", 2**64 - 1) == 9514267805222021320
    assert replica_index("a", 2**64 - 1) == 14598278634844962250
    assert replica_index("session-1", 7) == 9514267805222021320 % 7
    assert replica_index("session-1", 1) == 0


def test_split_think_keeps_the_whitespace():
    assert split_think("<think>r</think>\nanswer") == (["r"], "\nanswer")
    assert split_think("<think>a\nb</think>x<think></think>") == (["a\nb", ""], "x")
    assert split_think("no tags") == ([], "no tags")


async def test_example_config_runs_a_rollout():
    # The echo stub calls no tool, so the counter keeps its initial count and the task is solved.
    manager = plugin_manager(gym_vllm_model.plugin, *first_party("counter", "simple_agent"))
    config = yaml.safe_load((PACKAGE / "configs" / "vllm_model.yaml").read_text())
    task = {"responses_create_params": {"input": "count to three"}, "initial_count": 3, "expected_count": 3}
    with StubVllm() as stub:
        config["policy"].update(base_url=stub.url, model="stub-model")
        with running_servers(config, plugins=manager) as running:
            async with ServerClient(running) as client:
                result = await client.post("agent", "/run", task)
    assert result["reward"] == 1.0
    assert response_text(decode_response(result["response"])) == "count to three"


async def test_token_preserving_rollouts_keep_every_id():
    # Two turns of the token_preserving agent: the second prompt extends the first prompt + generation
    # exactly (the stub splices the ids sent back, as a trainer's vLLM does), so no token drifted.
    manager = plugin_manager(gym_vllm_model.plugin, *first_party("counter", "token_preserving"))
    config = yaml.safe_load((PACKAGE / "configs" / "vllm_model_for_training.yaml").read_text())

    def script(body: dict[str, Any]) -> dict[str, Any]:
        if any(m["role"] == "tool" for m in body["messages"]):
            return {"reasoning": "it is 3 now", "content": "Done."}
        return {"tool_calls": [{"name": "increment_counter", "arguments": '{"count": 3}'}]}

    task = {"responses_create_params": {"input": "Add 3."}, "initial_count": 0, "expected_count": 3}
    with StubVllm(script=script) as stub:
        config["policy"].update(base_url=stub.url, model="stub-model")
        with running_servers(config, plugins=manager) as running:
            async with ServerClient(running) as client:
                result = await client.post("agent", "/run", task)
    assert result["reward"] == 1.0
    assert result["token_drift"] == 0 and [t["drifted_tokens"] for t in result["turns"]] == [0, 0]
    assert stub.completions()[-1]["temperature"] == 1.0  # the config's sampling_overrides
