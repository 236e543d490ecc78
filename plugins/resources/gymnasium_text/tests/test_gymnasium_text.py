"""The Gymnasium adapter over real HTTP: gym's conformance kit on FrozenLake (each example row's
moves through the `act` tool), the text codec (render, observation, actions by name, number or
JSON), invalid actions (fail or penalty), seeds, other spaces (Taxi, Blackjack-v1), and whole
rollouts through the gymnasium agent with the scripted model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from gym_core import ServerClient
from gym_core.testing import (
    ResourcesServerTests,
    RunningServers,
    assistant_response,
    first_party,
    plugin_manager,
    read_rows,
    running_servers,
)

import gym_gymnasium_text.plugin
from gym_gymnasium_text.server import ansi_to_text, jsonable

PACKAGE = Path(__file__).resolve().parents[1]
EXAMPLES = PACKAGE / "data" / "example.jsonl"
ROW = {"responses_create_params": {"input": "Play."}}
FROZEN_LAKE = {
    "env_id": "FrozenLake-v1",
    "env_kwargs": {"is_slippery": False},
    "action_names": ["Left", "Down", "Right", "Up"],
}


def step(caller, text: str):
    return caller.post("/step", {**ROW, "response": assistant_response(text)})


class TestFrozenLake(ResourcesServerTests):
    """The defaults: slippery FrozenLake-v1 with its known action names. The example rows' rewards
    hold because a seed fixes where the ice slides."""

    server_type = "gymnasium_text"
    plugins = [gym_gymnasium_text.plugin]
    example_data = EXAMPLES

    def test_the_known_action_names_are_offered(self, gym_servers: RunningServers):
        (tool,) = gym_servers.caller().get("/tools").json()
        assert tool["parameters"]["properties"]["action"]["enum"] == ["Left", "Down", "Right", "Up"]


class TestNotSlipperyFrozenLake(ResourcesServerTests):
    server_type = "gymnasium_text"
    plugins = [gym_gymnasium_text.plugin]
    options = FROZEN_LAKE
    example_data = [
        {
            **ROW,
            "seed": 1,
            "conformance": {
                "reward": 1.0,
                "tool_calls": [
                    {"name": "act", "arguments": {"action": m}}
                    for m in ("Down", "Down", "Right", "Right", "Down", "Right")
                ],
            },
        }
    ]

    def test_the_observation_is_the_render_the_state_and_the_instructions(self, gym_servers: RunningServers):
        reset = gym_servers.caller().post("/reset", {**ROW, "seed": 3}).json()
        assert reset["observation"].split("\n") == [
            "[S]FFF",
            "FHFH",
            "FFFH",
            "HFFG",
            "Observation: 0",
            "Reply with one action as <action>NAME</action>, NAME one of: Left (0), Down (1), Right (2), Up (3); "
            "or a number from 0 to 3.",
        ]
        assert reset["info"]["seed"] == 3 and reset["info"]["prob"] == 1

    def test_actions_by_name_or_number_and_the_goal(self, gym_servers: RunningServers):
        caller = gym_servers.caller()
        caller.post("/reset", ROW)
        answer = step(caller, "I go <action>down</action>").json()
        assert answer["observation"].split("\n")[:6] == ["  (Down)", "SFFF", "[F]HFH", "FFFH", "HFFG", "Observation: 4"]
        assert (answer["reward"], answer["terminated"], answer["info"]["action"]) == (0.0, False, 1)
        for text in ("<action>1</action>", "<action>Right</action>", "<action> 2 </action>", "<action>Down</action>"):
            answer = step(caller, text).json()
        assert (answer["reward"], answer["terminated"]) == (0.0, False)
        final = step(caller, "<action>Right</action>").json()
        assert (final["reward"], final["terminated"], final["truncated"]) == (1.0, True, False)
        assert final["observation"].endswith("Observation: 15")  # no instructions once over
        assert caller.post("/verify", {**ROW, "response": assistant_response("")}).json()["reward"] == 1.0

    def test_an_invalid_action_is_a_400_by_default(self, gym_servers: RunningServers):
        caller = gym_servers.caller()
        caller.post("/reset", ROW)
        for text in ("down", "<action>jump</action>", "<action>4</action>"):
            refused = step(caller, text)
            assert refused.status == 400, text
            assert "NAME one of: Left (0)" in refused.json()["error"]["message"]
        assert caller.post("/verify", {**ROW, "response": assistant_response("")}).json()["steps"] == 0

    def test_the_act_tool_offers_the_action_names(self, gym_servers: RunningServers):
        (tool,) = gym_servers.caller().get("/tools").json()
        assert tool["name"] == "act" and tool["parameters"]["properties"]["action"]["enum"] == [
            "Left",
            "Down",
            "Right",
            "Up",
        ]

    def test_the_time_limit_of_the_environment_truncates(self, gym_servers: RunningServers):
        caller = gym_servers.caller()
        caller.post("/reset", ROW)
        answers = [caller.post("/act", {"action": "Left"}).json() for _ in range(100)]  # FrozenLake's limit: 100
        assert [a["truncated"] for a in answers] == [False] * 99 + [True]


def test_ansi_highlights_become_brackets_and_values_become_json():
    assert ansi_to_text("\n\x1b[41mS\x1b[0mFF\n") == "[S]FF"
    assert ansi_to_text("|\x1b[43mR\x1b[0m: :\x1b[1mG\x1b[0m|") == "|[R]: :[G]|"
    import numpy as np

    assert jsonable({"a": np.int64(3), "b": (np.float32(0.5), np.array([1, 2])), "c": object.__name__}) == {
        "a": 3,
        "b": [0.5, [1, 2]],
        "c": "object",
    }


def serve(options: dict):
    return running_servers(
        {"env": {"plugin": "gymnasium_text", **options}}, plugins=plugin_manager(gym_gymnasium_text.plugin)
    )


async def test_penalty_mode_steps_without_the_environment():
    from gym_core.testing import HTTPCaller

    with serve({**FROZEN_LAKE, "invalid_action": "penalty", "invalid_action_reward": -0.5}) as config:
        caller = HTTPCaller(config.instances["env"].url, auth_token=config.auth_token)
        caller.post("/reset", ROW)
        answer = step(caller, "no idea").json()
        assert (answer["reward"], answer["terminated"], answer["info"]) == (-0.5, False, {"action_is_valid": False})
        assert answer["observation"].startswith("That reply named no valid action.")
        assert (
            "Observation: 4" in step(caller, "<action>Down</action>").json()["observation"]
        )  # still at the start before


async def test_known_toy_text_games_get_their_action_names():
    from gym_core.testing import HTTPCaller

    with serve({"env_id": "CliffWalking-v1"}) as config:
        caller = HTTPCaller(config.instances["env"].url, auth_token=config.auth_token)
        observation = caller.post("/reset", ROW).json()["observation"]
        assert "NAME one of: Up (0), Right (1), Down (2), Left (3); or a number from 0 to 3." in observation
        assert step(caller, "<action>up</action>").json()["info"]["action"] == 0


async def test_the_same_seed_gives_the_same_episode_on_a_random_environment():
    # Blackjack-v1: a tuple observation space, a Discrete(2) action space without names, no ansi render.
    from gym_core.testing import HTTPCaller

    with serve({"env_id": "Blackjack-v1"}) as config:
        url = config.instances["env"].url
        resets = [
            HTTPCaller(url, auth_token=config.auth_token).post("/reset", {**ROW, "seed": s}).json() for s in (5, 5, 6)
        ]
        assert resets[0]["observation"] == resets[1]["observation"]
        first = resets[0]["observation"].split("\n")
        assert first[0].startswith("Observation: [")
        assert (
            first[1]
            == "Reply with one action as <action>NAME</action>, NAME one of: Stick (0), Hit (1); or a number from 0 to 1."
        )
        observations = {
            HTTPCaller(url, auth_token=config.auth_token).post("/reset", {**ROW, "seed": s}).json()["observation"]
            for s in range(12)
        }
        assert len(observations) > 3


async def test_start_up_refuses_an_unknown_id_and_names_that_do_not_fit():
    from gym_gymnasium_text.config import GymnasiumTextConfig
    from gym_gymnasium_text.server import GymnasiumTextServer

    with pytest.raises(ValueError, match="FrozenLake-v99.*doesn't exist"):
        await GymnasiumTextServer(GymnasiumTextConfig(env_id="FrozenLake-v99")).startup()
    with pytest.raises(ValueError, match="action_names needs a Discrete action space of 2 actions"):
        await GymnasiumTextServer(GymnasiumTextConfig(env_id="FrozenLake-v1", action_names=["a", "b"])).startup()


@pytest.fixture(scope="module")
def servers():
    manager = plugin_manager(gym_gymnasium_text.plugin, *first_party("scripted", "gymnasium"))
    config = {
        "policy": {"plugin": "scripted"},
        "frozen_lake": {"plugin": "gymnasium_text"},
        "agent": {"plugin": "gymnasium", "model_server": "policy", "resources_server": "frozen_lake", "max_steps": 20},
    }
    with running_servers(config, plugins=manager) as global_config:
        yield global_config


async def test_each_example_row_through_the_agent(servers):
    async with ServerClient(servers) as client:
        for row in read_rows(EXAMPLES):
            moves = [call["arguments"]["action"] for call in row["conformance"]["tool_calls"]]
            if not moves:
                continue  # nothing to script
            turns = json.dumps([{"text": f"<action>{m}</action>"} for m in moves])
            task = {
                **row,
                "responses_create_params": {**row["responses_create_params"], "metadata": {"scripted_turns": turns}},
            }
            result = await client.post("agent", "/run", task)
            assert result["reward"] == row["conformance"]["reward"] and result["terminated"] is True, row["seed"]
            assert result["model_calls"] == len(moves) and result["environment"] == "gymnasium_text"


def test_the_configs_pair_the_adapter_with_the_gymnasium_agent():
    for name in ("gymnasium_text.yaml", "gymnasium_text_local.yaml"):
        config = yaml.safe_load((PACKAGE / "configs" / name).read_text())
        assert (
            config["frozen_lake"]["env_id"] == "FrozenLake-v1" and config["frozen_lake_agent"]["plugin"] == "gymnasium"
        )
