"""The Gymnasium-style environment base over real HTTP, with a small walking environment:
reset, step, act, verify, close, the step limit, ended episodes, idempotent steps, sessions."""

from __future__ import annotations

from typing import Annotated

import msgspec
import pytest

from gym_core import ServerConfig, hookimpl
from gym_core.gymnasium_env import GymnasiumEnvironment, Reset, Step
from gym_core.schemas import SeedSessionRequest
from gym_core.sessions import cookie_name_for
from gym_core.testing import ResourcesServerTests, RunningServers, assistant_response


class WalkTask(SeedSessionRequest, kw_only=True):
    goal: int = 2
    max_steps: int | None = None


class WalkConfig(ServerConfig, kw_only=True):
    max_episode_steps: Annotated[int, msgspec.Meta(ge=1)] = 6


class Walk(GymnasiumEnvironment):
    """Walk from 0 to ``goal``: -0.1 a step, +1 on arrival (terminated)."""

    actions = ("left", "right")
    reward_range = (-0.6, 1.0)
    closed: list[int] = []

    def reset(self, task: WalkTask) -> Reset:
        return Reset(
            {"at": 0, "goal": task.goal}, f"at 0, goal {task.goal}", {"goal": task.goal}, max_steps=task.max_steps
        )

    def step(self, state: dict, action: str) -> Step:
        state["at"] += 1 if action == "right" else -1
        arrived = state["at"] == state["goal"]
        return Step(f"at {state['at']}", round(-0.1 + arrived, 10), arrived, False, {"at": state["at"]})

    def parse_action(self, text: str, state: dict) -> str:
        return "right" if "right" in text.lower() else self.canonical_action(text.strip())

    def close_episode(self, episode) -> None:
        type(self).closed.append(episode.state["at"])


class WalkPlugin:
    @hookimpl
    def gym_register_servers(self, register):
        register(name="walk", kind="resources", server=Walk, config=WalkConfig)


def step_body(text: str, request_id: str | None = None) -> dict:
    body = {"responses_create_params": {"input": "walk"}, "response": assistant_response(text)}
    if request_id is not None:
        body["_ng_step_request_id"] = request_id
    return body


ROW = {"responses_create_params": {"input": "walk"}, "goal": 2}


class TestGymnasiumEnvironment(ResourcesServerTests):
    server_type = "walk"
    plugins = [WalkPlugin()]
    example_data = [
        {**ROW, "conformance": {"tool_calls": [{"name": "act", "arguments": {"action": "right"}}] * 2, "reward": 0.8}},
        {
            **ROW,
            "goal": 1,
            "conformance": {"tool_calls": [{"name": "act", "arguments": {"action": "RIGHT"}}], "reward": 0.9},
        },
        {**ROW, "conformance": {"tool_calls": [], "reward": 0.0}},
    ]

    def test_reset_then_steps_until_terminated(self, gym_servers: RunningServers):
        caller = gym_servers.caller()
        reset = caller.post("/reset", ROW).json()
        assert reset == {
            "observation": "at 0, goal 2",
            "info": {"goal": 2, "supports_explicit_close": True, "supports_step_idempotency": True},
        }
        first = caller.post("/step", step_body("I go <b>right</b>")).json()
        assert first == {
            "observation": "at 1",
            "reward": -0.1,
            "terminated": False,
            "truncated": False,
            "info": {"at": 1},
        }
        second = caller.post("/step", step_body("right")).json()
        assert second == {
            "observation": "at 2",
            "reward": 0.9,
            "terminated": True,
            "truncated": False,
            "info": {"at": 2},
        }
        verdict = caller.post("/verify", step_body("")).json()
        assert verdict == {
            "reward": pytest.approx(0.8),
            "terminated": True,
            "truncated": False,
            "steps": 2,
            "info": {"at": 2},
        }

    def test_a_step_after_the_end_plays_nothing(self, gym_servers: RunningServers):
        caller = gym_servers.caller()
        caller.post("/reset", {**ROW, "goal": 1})
        caller.post("/step", step_body("right"))
        again = caller.post("/step", step_body("left")).json()
        assert again == {
            "observation": "at 1",
            "reward": 0.0,
            "terminated": True,
            "truncated": False,
            "info": {"at": 1},
        }
        assert caller.post("/verify", step_body("")).json()["steps"] == 1

    def test_the_step_limit_truncates(self, gym_servers: RunningServers):
        caller = gym_servers.caller()
        caller.post("/reset", ROW)
        answers = [caller.post("/step", step_body("left")).json() for _ in range(6)]
        assert [a["truncated"] for a in answers] == [False] * 5 + [True]  # the server's max_episode_steps: 6
        verdict = caller.post("/verify", step_body("")).json()
        assert (verdict["steps"], verdict["truncated"], verdict["terminated"]) == (6, True, False)
        assert verdict["reward"] == pytest.approx(-0.6)

    def test_a_task_may_lower_the_step_limit_but_not_raise_it(self, gym_servers: RunningServers):
        caller = gym_servers.caller()
        caller.post("/reset", {**ROW, "max_steps": 2})
        assert [caller.post("/step", step_body("left")).json()["truncated"] for _ in range(2)] == [False, True]
        caller.post("/reset", {**ROW, "max_steps": 1000})
        assert [caller.post("/act", {"action": "left"}).json()["truncated"] for _ in range(6)][-2:] == [False, True]

    def test_a_repeated_step_request_id_is_answered_once(self, gym_servers: RunningServers):
        caller = gym_servers.caller()
        caller.post("/reset", ROW)
        first = caller.post("/step", step_body("right", "a" * 32)).json()
        retried = caller.post("/step", step_body("right", "a" * 32)).json()
        assert first == retried and first["observation"] == "at 1"
        assert caller.post("/step", step_body("right", "b" * 32)).json()["observation"] == "at 2"
        assert caller.post("/verify", step_body("")).json()["steps"] == 2

    def test_an_action_the_environment_cannot_read_is_a_400(self, gym_servers: RunningServers):
        caller = gym_servers.caller()
        caller.post("/reset", ROW)
        refused = caller.post("/step", step_body("jump"))
        assert refused.status == 400 and "left, right" in refused.json()["error"]["message"]
        refused = caller.post("/act", {"action": "jump"})
        assert refused.status == 400 and "unknown action 'jump'" in refused.json()["error"]["message"]
        assert caller.post("/verify", step_body("")).json()["steps"] == 0

    def test_steps_need_an_episode(self, gym_servers: RunningServers):
        fresh = gym_servers.caller()
        for path, body in (("/step", step_body("right")), ("/act", {"action": "right"}), ("/verify", step_body(""))):
            reply = fresh.post(path, body)
            assert (reply.status, reply.json()["error"]["type"]) == (409, "session_expired"), (path, reply.text)
        forged = gym_servers.caller()
        forged.cookies = {cookie_name_for(gym_servers.instance): "0" * 32 + "." + "0" * 32}
        for path in ("/reset", "/step"):
            reply = forged.post(path, ROW if path == "/reset" else step_body("right"))
            assert (reply.status, reply.json()["error"]["type"]) == (403, "invalid_session"), (path, reply.text)

    def test_close_ends_the_episode_and_a_reset_replaces_it(self, gym_servers: RunningServers):
        caller = gym_servers.caller()
        caller.post("/reset", ROW)
        caller.post("/act", {"action": "right"})
        caller.post("/reset", {**ROW, "goal": 5})  # the first episode is closed, the new one starts at 0
        assert Walk.closed[-1] == 1
        assert caller.post("/act", {"action": "left"}).json()["observation"] == "at -1"
        assert caller.post("/close", {}).json() == {"closed": True}
        assert Walk.closed[-1] == -1
        assert caller.post("/step", step_body("right")).status == 409
        assert caller.post("/close_session", {}).json() == {"closed": False}

    def test_seed_session_is_reset_and_sessions_are_separate(self, gym_servers: RunningServers):
        mine, other = gym_servers.caller(), gym_servers.caller()
        assert mine.post("/seed_session", ROW).json()["observation"] == "at 0, goal 2"
        other.post("/reset", {**ROW, "goal": 1})
        mine.post("/act", {"action": "right"})
        assert other.post("/act", {"action": "right"}).json()["terminated"] is True
        assert mine.post("/verify", step_body("")).json()["terminated"] is False

    def test_the_act_tool_lists_the_actions(self, gym_servers: RunningServers):
        tools = gym_servers.caller().get("/tools").json()
        assert [t["name"] for t in tools] == ["act"]
        assert tools[0]["parameters"]["properties"]["action"]["enum"] == ["left", "right"]
        assert tools[0]["parameters"]["required"] == ["action"]


def test_a_tool_may_not_take_the_name_of_an_episode_route():
    from gym_core.servers import tool

    class Shadowing(Walk):
        @tool(name="step")
        def take_a_step(self) -> dict:
            return {}

    with pytest.raises(TypeError, match=r"\['step'\] are reserved"):
        Shadowing(WalkConfig())
