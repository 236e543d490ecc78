"""The gymnasium agent over real HTTP: gym's conformance kit, then the loop's rules against a
recording Gymnasium-style environment (each row says what the environment answers) and the
scripted model (each row brings its turns in ``metadata["scripted_turns"]``)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from litestar import Request
from litestar.handlers import HTTPRouteHandler

from gym_core import ConfigError, ResourcesServer, ServerClient, ToolError, hookimpl, load_config
from gym_core.testing import AgentServerTests, RunningServers, first_party, plugin_manager, running_servers

import gym_gymnasium.plugin

PACKAGE = Path(__file__).resolve().parents[1]
CONFIG = PACKAGE / "configs" / "gymnasium.yaml"


class RecordingEnv(ResourcesServer):
    """A Gymnasium-style environment whose answers the row dictates, recording every call.

    Row fields: ``reset`` (the reset answer), ``steps`` (the step answers in order; ``{"fail": 400}``
    answers that status), ``close_fails`` (``/close`` answers 500).
    """

    reward_range = (-10.0, 10.0)
    calls: list[tuple[str, str | None, dict]] = []

    def routes(self) -> list[Any]:
        def record(path: str, request: Request, body: dict) -> None:
            session = self.session(request)
            type(self).calls.append((path, session.id if session.exists else None, body))

        async def reset(request: Request) -> Any:
            row = json.loads(await request.body())
            self.sessions.set(self.session(request).id, {"row": row, "steps": 0})
            record("/reset", request, row)
            return row.get("reset", {"observation": None, "info": {}})

        async def step(request: Request) -> Any:
            body = json.loads(await request.body())
            record("/step", request, body)
            state = self.existing_session_state(request)
            answer = state["row"]["steps"][min(state["steps"], len(state["row"]["steps"]) - 1)]
            state["steps"] += 1
            if "fail" in answer:
                raise ToolError("the environment refuses this step", answer["fail"])
            return answer

        async def close(request: Request) -> Any:
            record(request.url.path, request, {})
            session = self.session(request)
            state = self.sessions.get(session.id) if session.exists else None
            if request.url.path == "/close" and state is not None and state["row"].get("close_fails"):
                raise RuntimeError("close failed")
            return {"closed": session.exists and self.sessions.close(session.id)}

        inherited = [
            h for h in super().routes() if not (isinstance(h, HTTPRouteHandler) and "/close_session" in h.paths)
        ]
        return [
            *inherited,
            self.post_json("/reset", reset),
            self.post_json("/step", step),
            self.post_json("/close", close),
            self.post_json("/close_session", close),
        ]


class HelperServers:
    @hookimpl
    def gym_register_servers(self, register):
        register(name="recording_env", kind="resources", server=RecordingEnv)


EXPLICIT = {"supports_explicit_close": True, "supports_step_idempotency": True}


def row(turns: list[str], steps: list[dict], reset: dict | None = None, **extra: Any) -> dict:
    params = {"input": "Play.", "metadata": {"scripted_turns": json.dumps([{"text": t} for t in turns])}}
    return {
        "responses_create_params": params,
        "steps": steps,
        "reset": reset or {"observation": "start", "info": EXPLICIT},
        **extra,
    }


def end(reward: float, **info: Any) -> dict:
    return {"observation": None, "reward": reward, "terminated": True, "truncated": False, "info": info}


def going(observation: str | None, reward: float = 0.0, **info: Any) -> dict:
    return {"observation": observation, "reward": reward, "terminated": False, "truncated": False, "info": info}


def calls_of(session: str | None) -> list[str]:
    return [path for path, sid, _ in RecordingEnv.calls if sid == session]


def last_session() -> str | None:
    return next(sid for path, sid, _ in reversed(RecordingEnv.calls) if path == "/reset")


class TestGymnasium(AgentServerTests):
    server_type = "gymnasium"
    plugins = [gym_gymnasium.plugin, HelperServers(), *first_party("scripted")]
    environment = {"plugin": "recording_env"}
    options = {"max_steps": 3}
    example_data = [
        row(["a"], [end(1.0)]),
        row(["a", "b"], [going("next", 0.5), end(-2.0)]),
        row(["a"], [{"observation": "x", "reward": 0.25, "terminated": False, "truncated": True, "info": {}}]),
        row(["a"], [going("again", 1.0)]),  # never ends: 3 steps, truncated
    ]

    def expected_reward(self, row: dict) -> float:
        return {0: 1.0, 1: -1.5, 2: 0.25, 3: 3.0}[self.example_data.index(row)]

    def test_the_loop_feeds_observations_and_tool_outputs_back(self, gym_servers: RunningServers):
        tool_step = going("after the tool", 0.5, tool_outputs=[{"call_id": "c1", "output": {"ok": True}}])
        result = gym_servers.caller().post("/run", row(["first", "second"], [tool_step, end(1.0, result="win")])).json()
        assert (result["reward"], result["terminated"], result["truncated"]) == (1.5, True, False)
        assert result["info"] == {"result": "win"}
        # The reset observation is appended to the row's input as a user message.
        assert result["responses_create_params"]["input"] == [
            {"type": "message", "role": "user", "content": "Play."},
            {"type": "message", "role": "user", "content": "start"},
        ]
        output = result["response"]["output"]
        assert [(i["type"], i.get("role")) for i in output] == [
            ("message", "assistant"),
            ("function_call_output", None),
            ("message", "user"),
            ("message", "assistant"),
        ]
        assert output[1] == {"type": "function_call_output", "call_id": "c1", "output": '{"ok":true}'}
        assert output[2]["content"] == "after the tool"
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
                "env_steps",
                "model_calls",
            )
        }
        assert facts == {
            "agent": "gymnasium",
            "model_server": "policy",
            "model": "scripted",
            "environment": "recording_env",
            "resources_server": "environment",
            "num_model_calls": 2,
            "num_tool_calls": 1,
            "env_steps": 2,
            "model_calls": 2,
        }
        # The scripted model counts input items and output words: turn 1 sees the 2 messages and says
        # 1 word; turn 2 sees 5 items (+ its answer, the tool output, the observation) and says 1.
        per_turn = [(u["input_tokens"], u["output_tokens"], u["total_tokens"]) for u in result["usage_per_turn"]]
        assert per_turn == [(2, 1, 3), (5, 1, 6)]
        assert (result["usage"]["input_tokens"], result["usage"]["output_tokens"], result["usage"]["total_tokens"]) == (
            7,
            2,
            9,
        )
        assert result["usage"] == result["response"]["usage"]

    def test_each_step_gets_the_row_and_this_turn_only_with_a_fresh_request_id(self, gym_servers: RunningServers):
        task = row(["first", "second"], [going("o"), end(0.0)], seed=7)
        gym_servers.caller().post("/run", task)
        steps = [body for path, sid, body in RecordingEnv.calls if path == "/step" and sid == last_session()]
        assert len(steps) == 2
        for body, text in zip(steps, ["first", "second"]):
            assert body["seed"] == 7 and body["steps"] == task["steps"]  # the whole row
            assert [i["content"][0]["text"] for i in body["response"]["output"]] == [text]
            assert re.fullmatch(r"[0-9a-f]{32}", body["_ng_step_request_id"])
        assert steps[0]["_ng_step_request_id"] != steps[1]["_ng_step_request_id"]

    def test_no_request_id_when_the_environment_takes_none(self, gym_servers: RunningServers):
        gym_servers.caller().post("/run", row(["a"], [end(0.0)], reset={"observation": "", "info": {}}))
        steps = [body for path, sid, body in RecordingEnv.calls if path == "/step" and sid == last_session()]
        assert "_ng_step_request_id" not in steps[0]

    def test_out_of_steps_is_truncated_and_usage_is_summed(self, gym_servers: RunningServers):
        result = gym_servers.caller().post("/run", row(["one two", "three"], [going("o", 0.0)])).json()
        assert (result["truncated"], result["terminated"], result["num_model_calls"]) == (True, False, 3)
        assert len(result["usage_per_turn"]) == 3
        assert (
            result["response"]["usage"]["output_tokens"]
            == sum(u["output_tokens"] for u in result["usage_per_turn"])
            == 4
        )

    def test_an_explicit_close_is_sent_once_when_advertised(self, gym_servers: RunningServers):
        gym_servers.caller().post("/run", row(["a"], [end(1.0)]))
        assert calls_of(last_session()) == ["/reset", "/step", "/close"]
        gym_servers.caller().post("/run", row(["a"], [end(1.0)], reset={"observation": "s", "info": {}}))
        assert calls_of(last_session()) == ["/reset", "/step", "/close_session"]

    def test_each_rollout_has_its_own_environment_session(self, gym_servers: RunningServers):
        gym_servers.caller().post("/run", row(["a"], [end(1.0)]))
        first = last_session()
        gym_servers.caller().post("/run", row(["a"], [end(1.0)]))
        assert first is not None and last_session() != first

    def test_a_failed_close_is_a_warning_on_a_finished_episode(self, gym_servers: RunningServers):
        reply = gym_servers.caller().post("/run", row(["a"], [end(1.0, result="win")], close_fails=True))
        assert reply.status == 200, reply.text
        info = reply.json()["info"]
        assert info["result"] == "win" and info["cleanup_warning"]["operation"] == "close"
        assert info["cleanup_warning"]["error_type"] == "ServerHTTPError"

    def test_a_model_failure_fails_the_rollout_and_still_closes(self, gym_servers: RunningServers):
        task = row(["a"], [end(1.0)])
        task["responses_create_params"]["metadata"]["scripted_turns"] = "not a script"
        reply = gym_servers.caller().post("/run", task)
        assert reply.status >= 400 and "scripted_turns" in reply.text
        assert calls_of(last_session()) == ["/reset", "/close"]

    def test_a_refused_step_fails_the_rollout_and_still_closes(self, gym_servers: RunningServers):
        reply = gym_servers.caller().post("/run", row(["a"], [{"fail": 400}]))
        assert reply.status == 424 and "refuses this step" in reply.text
        assert calls_of(last_session()) == ["/reset", "/step", "/close"]

    def test_responses_asks_the_model(self, gym_servers: RunningServers):
        params = row(["hello there"], [])["responses_create_params"]
        body = gym_servers.caller().post("/v1/responses", params).json()
        assert body["output"][0]["content"][0]["text"] == "hello there"


def test_max_steps_must_be_at_least_one():
    config = TestGymnasium.instances_config()
    config["gymnasium"]["max_steps"] = 0
    with pytest.raises(ConfigError, match="max_steps"):
        load_config(
            base=config,
            env_file=None,
            server_types=plugin_manager(*TestGymnasium.plugins).servers(),
            allocate_ports=False,
        )


async def test_example_config_plays_blackjack():
    # The scripted model stands at once; seed 0 deals [2, A] against a dealer who busts: +1.
    manager = plugin_manager(gym_gymnasium.plugin, *first_party("scripted", "blackjack"))
    task = {"responses_create_params": {"input": "Deal me in."}, "seed": 0}
    with running_servers(yaml.safe_load(CONFIG.read_text()), plugins=manager) as config:
        async with ServerClient(config) as client:
            result = await client.post("agent", "/run", task)
    assert (result["reward"], result["terminated"], result["info"]["result"]) == (1.0, True, "win")
    assert result["environment"] == "blackjack"
