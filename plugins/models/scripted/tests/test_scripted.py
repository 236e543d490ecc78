"""The scripted model: gym's conformance kit, then turn selection and scripts in metadata."""

from __future__ import annotations

import json

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
