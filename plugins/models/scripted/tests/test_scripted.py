"""The scripted model: gym's conformance kit, then turn selection and scripts in metadata."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import openai
import pytest

from gym_core.schemas import decode_create_params
from gym_core.testing import ModelServerTests, RunningServers

import gym_scripted.plugin
from gym_scripted.server import model_turns_in

TURNS = [{"tool_calls": [{"name": "add", "arguments": {"x": 1}}]}, {"text": "done"}]
SCRIPT = json.dumps([{"text": "from metadata"}])
RULES = [
    {"match": r"A: (\d+)\nB: \1\b", "text": "same [[A=B]]"},
    {"match": r"outage", "error_status": 500},
    {"match": r"A: ", "text": "different [[A!=B]]"},
]


def test_model_turns_counts_runs_of_generated_items():
    params = decode_create_params(
        {
            "input": [
                {"role": "user", "content": "hi"},
                {"type": "function_call", "call_id": "a", "name": "f", "arguments": "{}"},
                {"type": "function_call", "call_id": "b", "name": "f", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "a", "output": "1"},
                {"type": "function_call_output", "call_id": "b", "output": "1"},
                {"role": "assistant", "content": "ok"},
                {"role": "user", "content": "again"},
            ]
        }
    )
    assert model_turns_in(params) == 2
    assert model_turns_in(decode_create_params({"input": "hello"})) == 0


class TestScripted(ModelServerTests):
    # The kit checks `policy` (the default script); `walker` has a script of its own.
    instances = {
        "policy": {"plugin": "scripted"},
        "walker": {"plugin": "scripted", "turns": TURNS},
        "judge": {"plugin": "scripted", "rules": RULES, "turns": [{"text": "no rule matched"}]},
    }
    instance = "policy"
    plugins = [gym_scripted.plugin]
    deterministic = True

    def test_walks_the_script_turn_by_turn(self, gym_servers: RunningServers):
        caller = gym_servers.caller("walker")
        first = caller.post("/v1/responses", {"input": "go"}).json()
        call = first["output"][0]
        history = [
            {"role": "user", "content": "go"},
            call,
            {"type": "function_call_output", "call_id": call["call_id"], "output": "2"},
        ]
        second = caller.post("/v1/responses", {"input": history}).json()
        chat = caller.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "go"}]}).json()
        assert call["type"] == "function_call" and json.loads(call["arguments"]) == {"x": 1}
        assert second["output"][0]["content"][0]["text"] == "done"
        assert chat["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "add"
        assert chat["choices"][0]["finish_reason"] == "tool_calls"

    def test_rules_choose_the_reply_by_content_before_the_script(self, gym_servers: RunningServers):
        caller = gym_servers.caller("judge")

        def ask(text: str):
            return caller.post(
                "/v1/responses", {"input": [{"role": "system", "content": "judge"}, {"role": "user", "content": text}]}
            )

        assert ask("A: 12\nB: 12").json()["output"][0]["content"][0]["text"] == "same [[A=B]]"
        assert ask("A: 12\nB: 13").json()["output"][0]["content"][0]["text"] == "different [[A!=B]]"
        assert ask("hello").json()["output"][0]["content"][0]["text"] == "no rule matched"
        failed = ask("an outage, A: 1\nB: 2")  # the first matching rule wins: order matters
        assert failed.status == 500 and "outage" in failed.json()["error"]["message"]

    def test_a_script_in_the_request_metadata_wins(self, gym_servers: RunningServers):
        reply = gym_servers.caller("walker").post(
            "/v1/responses", {"input": "go", "metadata": {"scripted_turns": SCRIPT}}
        )
        assert reply.json()["output"][0]["content"][0]["text"] == "from metadata"

    def test_default_script_and_a_bad_script(self, gym_servers: RunningServers):
        caller = gym_servers.caller()
        default = caller.post("/v1/responses", {"input": "x"}).json()
        bad = caller.post("/v1/responses", {"input": "x", "metadata": {"scripted_turns": "[{"}})
        assert default["output"][0]["content"][0]["text"] == "Hello from the scripted model."
        assert bad.status == 422 and "scripted_turns" in bad.json()["error"]["message"]


# --- OpenAI parameters: honoured or refused with a 400 naming them (gym_core.openai_params) --------


class TestParameters:
    """The official client's calls: out-of-range values and parameters the server does not honour are
    a 400 (``openai.BadRequestError``) whose message names the field; honoured ones take effect."""

    @pytest.fixture(scope="class")
    @classmethod
    def gym_servers(cls):
        with TestScripted.running() as servers:
            yield servers

    @pytest.fixture
    async def client(self, gym_servers: RunningServers) -> AsyncIterator[openai.AsyncOpenAI]:
        async with openai.AsyncOpenAI(
            base_url=f"{gym_servers.config.instances['walker'].url}/v1",
            api_key=gym_servers.config.auth_token,
            max_retries=0,
        ) as client:
            yield client

    @pytest.mark.parametrize(
        ("settings", "field"),
        [
            ({"temperature": 7}, "temperature"),
            ({"top_p": 1.5}, "top_p"),
            ({"max_tokens": 0}, "max_tokens"),
            ({"n": 0}, "n"),
            ({"top_logprobs": 21, "logprobs": True}, "top_logprobs"),
            ({"presence_penalty": 0.5}, "presence_penalty"),  # in range, not honoured
            ({"logit_bias": {"1": 5}}, "logit_bias"),
            ({"extra_body": {"temprature": 0.5}}, "temprature"),  # not an OpenAI parameter
        ],
    )
    async def test_chat_parameters_out_of_range_or_not_honoured_are_a_400_naming_them(self, client, settings, field):
        with pytest.raises(openai.BadRequestError) as caught:
            await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "go"}], **settings)
        assert f"'{field}'" in caught.value.message

    @pytest.mark.parametrize(
        ("settings", "field"),
        [
            ({"temperature": 7}, "temperature"),
            ({"max_output_tokens": -1}, "max_output_tokens"),
            ({"truncation": "auto"}, "truncation"),
            ({"include": ["reasoning.encrypted_content"]}, "include"),
            ({"reasoning": {"effort": "high"}}, "reasoning.effort"),
            ({"previous_response_id": "resp_1"}, "previous_response_id"),
        ],
    )
    async def test_responses_parameters_out_of_range_or_not_honoured_are_a_400_naming_them(
        self, client, settings, field
    ):
        with pytest.raises(openai.BadRequestError) as caught:
            await client.responses.create(model="m", input="go", **settings)
        assert field in caught.value.message

    async def test_neutral_values_and_honoured_parameters_are_accepted(self, client):
        completion = await client.chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": "go"}],
            temperature=2,
            top_p=0,
            n=1,
            presence_penalty=0,
            tool_choice="auto",
            parallel_tool_calls=False,
            response_format={"type": "text"},
            store=True,
            user="u",
        )
        assert completion.choices[0].message.tool_calls[0].function.name == "add"
        response = await client.responses.create(
            model="m", input="go", truncation="disabled", text={"format": {"type": "text"}}, max_output_tokens=5
        )
        assert response.output[0].type == "function_call"

    async def test_tool_choice_is_honoured(self, client):
        messages = [{"role": "user", "content": "go"}]
        none = await client.chat.completions.create(model="m", messages=messages, tool_choice="none")
        named = await client.responses.create(model="m", input="go", tool_choice={"type": "function", "name": "add"})
        assert not none.choices[0].message.tool_calls
        assert [item.name for item in named.output if item.type == "function_call"] == ["add"]
        with pytest.raises(openai.UnprocessableEntityError, match="'sub'"):
            await client.responses.create(model="m", input="go", tool_choice={"type": "function", "name": "sub"})

    async def test_chat_streams_with_the_sdk_chunk_types(self, client):
        stream = await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "go"}], stream=True, stream_options={"include_usage": True}
        )
        chunks = [chunk async for chunk in stream]
        calls = [call for c in chunks for choice in c.choices for call in choice.delta.tool_calls or []]
        assert all(c.object == "chat.completion.chunk" for c in chunks)
        assert [(call.function.name, json.loads(call.function.arguments)) for call in calls] == [("add", {"x": 1})]
        assert [choice.finish_reason for c in chunks for choice in c.choices][-1] == "tool_calls"
        assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 1

    async def test_responses_stream_with_the_sdk_event_types(self, client):
        history = [
            {"role": "user", "content": "go"},
            {"type": "function_call", "call_id": "c", "name": "add", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c", "output": "2"},
        ]
        async with client.responses.stream(model="m", input=history) as stream:
            events = [event async for event in stream]
            final = await stream.get_final_response()
        types = [event.type for event in events]
        assert types[0] == "response.created" and types[-1] == "response.completed"
        assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == "done"
        assert final.output_text == "done"
        raw = await client.responses.create(model="m", input="go", stream=True)
        done = [event async for event in raw if event.type == "response.function_call_arguments.done"]
        assert [json.loads(event.arguments) for event in done] == [{"x": 1}]

    async def test_n_choices(self, client):
        completion = await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "go"}], n=3)
        assert [choice.index for choice in completion.choices] == [0, 1, 2]
        assert {choice.message.tool_calls[0].function.name for choice in completion.choices} == {"add"}
