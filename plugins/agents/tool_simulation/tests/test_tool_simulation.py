"""Tests of the tool_simulation agent, real servers on loopback: gym's conformance kit over
tool_call_match's example rows (the scripted model answering each with its conformance response,
exact rewards), then the agent's rules: one model call on the recorded trajectory, as sent; tool
calls returned unexecuted; no seed, no cookie to /verify, a session verify opens closed;
skip_verification; typed failures; the rollout's facts; the configs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gym_core import ModelServer, ResourcesServer, Session, hookimpl, load_config, tool
from gym_core.schemas import ResponseCreateParams, VerifyRequest, VerifyResponse
from gym_core.testing import AgentServerTests, RunningServers, read_rows

import gym_scripted.plugin
import gym_tool_call_match.plugin
import gym_tool_simulation.plugin

PACKAGE = Path(__file__).resolve().parents[1]
CONFIGS = PACKAGE / "configs"
ROWS = Path(gym_tool_call_match.plugin.__file__).resolve().parents[2] / "data" / "example.jsonl"


def turn_of(response: dict[str, Any]) -> dict[str, Any]:
    """The scripted model's turn producing ``response``'s output. Cut-off arguments (not JSON) become
    an object with one unexpected key: tool_call_match scores both 0."""
    turn: dict[str, Any] = {"tool_calls": []}
    for item in response["output"]:
        if item["type"] == "message":
            turn["text"] = "".join(part["text"] for part in item["content"])
        else:
            try:
                arguments = json.loads(item["arguments"])
            except ValueError:
                arguments = {"__cut_off__": item["arguments"]}
            turn["tool_calls"].append({"name": item["name"], "arguments": arguments})
    return turn


def scripted(row: dict[str, Any], *turns: dict[str, Any]) -> dict[str, Any]:
    script = list(turns) or [turn_of(row["conformance"]["response"])]
    params = {**row["responses_create_params"], "metadata": {"scripted_turns": json.dumps(script)}}
    return {**row, "responses_create_params": params}


class SessionJudge(ResourcesServer):
    """An environment that counts seeds and tool calls, says whether /verify came with a session,
    and opens one in verify (so that the agent has a session to close)."""

    seeds = 0
    tool_calls = 0

    async def seed_session(self, session: Session, body: Any) -> dict:
        type(self).seeds += 1
        return {}

    @tool
    async def book_flight(self, flight_id: str, passengers: int) -> dict:
        """Book a flight."""
        type(self).tool_calls += 1
        return {"booked": flight_id}

    async def verify(self, session: Session, body: VerifyRequest) -> VerifyResponse:
        came_with_session = session.exists
        self.sessions.set(session.id, {"verified": True})
        return JudgeVerdict(reward=1.0, came_with_session=came_with_session)


class JudgeVerdict(VerifyResponse, kw_only=True):
    came_with_session: bool


class InputEcho(ModelServer):
    """Answers with the JSON of the request's input, as the model received it."""

    async def responses(self, params: ResponseCreateParams) -> Any:
        import msgspec

        text = msgspec.json.encode(params.input).decode()
        return {
            "id": "r",
            "object": "response",
            "created_at": 0,
            "model": "echo",
            "output": [
                {
                    "type": "message",
                    "role": "assistant",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": text, "annotations": []}],
                }
            ],
        }


class FailingModel(ModelServer):
    async def responses(self, params: ResponseCreateParams) -> Any:
        raise RuntimeError("boom")


class Helpers:
    @hookimpl
    def gym_register_servers(self, register):
        register(name="session_judge", kind="resources", server=SessionJudge)
        register(name="input_echo", kind="model", server=InputEcho)
        register(name="failing_model", kind="model", server=FailingModel)


class TestToolSimulation(AgentServerTests):
    """The kit over tool_call_match's example rows: exact rewards through one model call each."""

    server_type = "tool_simulation"
    plugins = [gym_tool_simulation.plugin, gym_scripted.plugin, gym_tool_call_match.plugin, Helpers()]
    example_data = ROWS
    instances = {
        "policy": {"plugin": "scripted"},
        "environment": {"plugin": "tool_call_match"},
        "tool_simulation": {"plugin": "tool_simulation", "model_server": "policy", "resources_server": "environment"},
        "skipping": {
            "plugin": "tool_simulation",
            "model_server": "policy",
            "resources_server": "environment",
            "skip_verification": True,
            "skip_verification_reward": 0.25,
        },
        "judge": {"plugin": "session_judge"},
        "judged": {"plugin": "tool_simulation", "model_server": "policy", "resources_server": "judge"},
        "echo": {"plugin": "input_echo"},
        "echoing": {"plugin": "tool_simulation", "model_server": "echo", "resources_server": "judge"},
        "failing": {"plugin": "failing_model"},
        "failing_agent": {"plugin": "tool_simulation", "model_server": "failing", "resources_server": "judge"},
    }
    instance = "tool_simulation"

    def run_body(self, row):
        return scripted(row)

    def expected_reward(self, row):
        return row["conformance"]["reward"]

    def environment_reward_range(self, servers):
        return (0.0, 1.0)

    def test_the_rows_are_trajectories_with_both_rewards(self):
        rows = read_rows(ROWS)
        assert {row["conformance"]["reward"] for row in rows} == {0.0, 1.0}
        assert any(
            item.get("type") == "function_call_output"
            for row in rows
            for item in row["responses_create_params"]["input"]
        )

    def test_one_model_call_whose_calls_are_returned_unexecuted(self, gym_servers: RunningServers):
        row = read_rows(ROWS)[0]
        book = {"name": "book_flight", "arguments": {"flight_id": "KL1144", "passengers": 1}}
        # The scripted model answers turn k to an input holding k model turns: the trajectory holds
        # one (search_flights), so turn 1 is the answer; turn 2 would come only from a second call.
        turns = ({"text": "never sent"}, {"tool_calls": [book]}, {"text": "Booked."})
        result = gym_servers.caller("judged").post("/run", scripted(row, *turns)).json()
        assert [(i["type"], i["name"]) for i in result["response"]["output"]] == [("function_call", "book_flight")]
        assert SessionJudge.tool_calls == 0  # the judge serves book_flight: the agent never called it
        facts = {
            k: result[k]
            for k in (
                "agent",
                "model_server",
                "model",
                "environment",
                "resources_server",
                "num_model_calls",
                "num_tool_calls",
            )
        }
        assert facts == {
            "agent": "judged",
            "model_server": "policy",
            "model": "scripted",
            "environment": "session_judge",
            "resources_server": "judge",
            "num_model_calls": 1,
            "num_tool_calls": 1,
        }
        # The scripted model counts input items and output words (a call is one).
        items = len(row["responses_create_params"]["input"])
        assert (result["usage"]["input_tokens"], result["usage"]["output_tokens"], result["usage"]["total_tokens"]) == (
            items,
            1,
            items + 1,
        )
        assert result["usage_per_turn"] == [result["usage"]] == [result["response"]["usage"]]

    def test_the_trajectory_reaches_the_model_exactly_as_the_row_has_it(self, gym_servers: RunningServers):
        row = read_rows(ROWS)[0]
        result = gym_servers.caller("echoing").post("/run", row).json()
        seen = json.loads(result["response"]["output"][0]["content"][0]["text"])
        sent = row["responses_create_params"]["input"]
        assert [item.get("type", "message") for item in seen] == [
            "message",
            "message",
            "function_call",
            "function_call_output",
        ]
        assert [(i["call_id"], i.get("name"), i.get("arguments"), i.get("output")) for i in seen[2:]] == [
            (i["call_id"], i.get("name"), i.get("arguments"), i.get("output")) for i in sent[2:]
        ]
        # A string input is forwarded as a string, not turned into a message.
        result = (
            gym_servers.caller("echoing")
            .post("/run", {**row, "responses_create_params": {"input": "just text"}})
            .json()
        )
        assert json.loads(result["response"]["output"][0]["content"][0]["text"]) == "just text"

    def test_no_seed_no_cookie_to_verify_and_the_session_verify_opened_is_closed(self, gym_servers: RunningServers):
        seeds = SessionJudge.seeds
        judge = gym_servers.servers["judge"]
        for _ in range(2):
            result = gym_servers.caller("judged").post("/run", scripted(read_rows(ROWS)[0])).json()
            assert result["came_with_session"] is False
        assert SessionJudge.seeds == seeds
        assert len(judge.sessions) == 0

    def test_skip_verification_gives_the_configured_reward_without_verify(self, gym_servers: RunningServers):
        row = read_rows(ROWS)[0]  # a right answer: verify would give 1.0
        result = gym_servers.caller("skipping").post("/run", scripted(row)).json()
        assert (result["reward"], result["verification_skipped"]) == (0.25, True)
        assert "reason" not in result  # no verdict field: verify was not called
        assert result["response"]["output"][0]["name"] == "book_flight"

    def test_the_rollout_records_what_produced_it_and_its_usage(self, gym_servers: RunningServers):
        row = read_rows(ROWS)[4]  # two parallel calls expected and made
        result = gym_servers.caller().post("/run", scripted(row)).json()
        facts = {
            key: result[key]
            for key in (
                "agent",
                "model_server",
                "model",
                "environment",
                "resources_server",
                "num_model_calls",
                "num_tool_calls",
            )
        }
        assert facts == {
            "agent": "tool_simulation",
            "model_server": "policy",
            "model": "scripted",
            "environment": "tool_call_match",
            "resources_server": "environment",
            "num_model_calls": 1,
            "num_tool_calls": 2,
        }
        # The scripted model counts input items (2 messages) and output calls (2).
        assert (result["usage"]["input_tokens"], result["usage"]["output_tokens"]) == (2, 2)
        assert result["usage_per_turn"] == [result["usage"]]
        assert result["reward"] == 1.0 and result["reason"] == "match"

    def test_a_model_server_failure_fails_the_rollout_retryably(self, gym_servers: RunningServers):
        reply = gym_servers.caller("failing_agent").post("/run", read_rows(ROWS)[0])
        assert reply.status == 502, reply.text
        assert "failing /v1/responses" in reply.json()["error"]["message"]

    def test_a_row_the_environment_refuses_fails_the_rollout(self, gym_servers: RunningServers):
        row = scripted(read_rows(ROWS)[0])
        del row["expected_call"]  # tool_call_match needs an expectation: a 422 from /verify
        reply = gym_servers.caller().post("/run", row)
        assert reply.status == 424, reply.text
        assert reply.json()["error"]["type"] == "validation_error"

    def test_responses_returns_the_model_response(self, gym_servers: RunningServers):
        script = json.dumps([{"tool_calls": [{"name": "f", "arguments": {"a": 1}}]}])
        response = (
            gym_servers.caller()
            .post("/v1/responses", {"input": "a b c", "metadata": {"scripted_turns": script}})
            .json()
        )
        assert [(i["name"], i["arguments"]) for i in response["output"]] == [("f", '{"a":1}')]
        assert response["usage"]["input_tokens"] == 3  # the string went as it is: the scripted model counted words


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("*.yaml")), ids=lambda p: p.name)
def test_every_config_pairs_the_agent_with_tool_call_match(path: Path):
    from gym_core import get_plugin_manager

    overrides = ["policy_model.base_url=http://127.0.0.1:9/v1", "policy_model.model=m"] if "openai" in path.name else []
    config = load_config(
        [path], overrides, env_file=None, server_types=get_plugin_manager().servers(), allocate_ports=False
    )
    plugins = {i.plugin for i in config.instances.values()}
    assert {"tool_simulation", "tool_call_match"} <= plugins
