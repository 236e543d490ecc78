"""The blackjack environment over real HTTP: gym's conformance kit (each example row plays its
`conformance.tool_calls` through the `act` tool and must get its `conformance.reward`), the rules,
reproducibility from the seed, and whole rollouts through the gymnasium agent with the scripted model."""

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

import gym_blackjack.plugin
from gym_blackjack.server import deal, hand_value

PACKAGE = Path(__file__).resolve().parents[1]
EXAMPLES = PACKAGE / "data" / "example.jsonl"
ROW = {"responses_create_params": {"input": "Deal me in."}}


def step(caller, text: str) -> dict:
    reply = caller.post("/step", {**ROW, "response": assistant_response(text)})
    assert reply.status == 200, reply.text
    return reply.json()


class TestBlackjack(ResourcesServerTests):
    server_type = "blackjack"
    plugins = [gym_blackjack.plugin]
    example_data = EXAMPLES

    def test_hand_values_count_aces_as_11_then_1(self):
        assert hand_value(["A", "7"]) == 18
        assert hand_value(["A", "7", "5"]) == 13
        assert hand_value(["A", "A", "9"]) == 21
        assert hand_value(["A", "A", "A", "K"]) == 13
        assert hand_value(["K", "Q", "2"]) == 22

    def test_the_reset_observation_shows_the_hand_and_the_dealer_card(self, gym_servers: RunningServers):
        reset = gym_servers.caller().post("/reset", {**ROW, "seed": 0}).json()
        assert reset["observation"].splitlines() == [
            "Your hand: [2, A] = 13",
            "Dealer shows: 4",
            "Reply with <action>hit</action> to take another card or <action>stand</action> to stop.",
        ]
        assert reset["info"]["seed"] == 0 and reset["info"]["supports_explicit_close"] is True

    def test_the_same_seed_deals_the_same_hand_and_another_seed_another(self, gym_servers: RunningServers):
        hands = [gym_servers.caller().post("/reset", {**ROW, "seed": seed}).json()["observation"] for seed in (7, 7, 8)]
        assert hands[0] == hands[1] != hands[2]
        assert deal(7).player == ["Q", "4"] and deal(7).dealer == ["9", "2"]  # the documented card stream

    def test_a_row_without_seed_reports_the_seed_it_got(self, gym_servers: RunningServers):
        caller = gym_servers.caller()
        reset = caller.post("/reset", ROW).json()
        seed = reset["info"]["seed"]
        assert isinstance(seed, int)
        assert gym_servers.caller().post("/reset", {**ROW, "seed": seed}).json()["observation"] == reset["observation"]

    def test_hit_then_bust_ends_the_hand_with_minus_one(self, gym_servers: RunningServers):
        caller = gym_servers.caller()
        caller.post("/reset", {**ROW, "seed": 3})
        bust = step(caller, "Sixteen is weak. <action> HIT </action>")
        assert bust == {
            "observation": None,
            "reward": -1.0,
            "terminated": True,
            "truncated": False,
            "info": {"result": "bust", "player": ["6", "10", "6"], "value": 22},
        }

    def test_hit_without_bust_shows_the_new_hand(self, gym_servers: RunningServers):
        caller = gym_servers.caller()
        caller.post("/reset", {**ROW, "seed": 8})
        answer = step(caller, "<action>hit</action>")
        assert (answer["reward"], answer["terminated"], answer["info"]) == (0.0, False, {})
        assert answer["observation"].startswith("Your hand: [9, K, 2] = 21\nDealer shows: 3\n")
        final = step(caller, "<action>stand</action>")
        assert final["info"] == {
            "result": "win",
            "player": ["9", "K", "2"],
            "player_value": 21,
            "dealer": ["3", "5", "A"],
            "dealer_value": 19,
        }
        assert final["reward"] == 1.0 and final["terminated"] is True

    def test_the_first_action_tag_counts_and_no_tag_means_stand(self, gym_servers: RunningServers):
        caller = gym_servers.caller()
        caller.post("/reset", {**ROW, "seed": 3})
        # "stand" first: the hand is compared (16 against the dealer), no card drawn.
        answer = step(caller, "<action>stand</action> or maybe <action>hit</action>")
        assert answer["info"]["player"] == ["6", "10"] and answer["info"]["result"] == "loss"
        caller.post("/reset", {**ROW, "seed": 0})
        answer = step(caller, "I would like to hit please")  # no tag: stand
        assert answer["info"]["player"] == ["2", "A"] and answer["info"]["result"] == "win"

    def test_a_tie_is_a_draw_worth_zero(self, gym_servers: RunningServers):
        caller = gym_servers.caller()
        caller.post("/reset", {**ROW, "seed": 48})
        answer = step(caller, "<action>stand</action>")
        assert (answer["reward"], answer["info"]["result"], answer["info"]["dealer_value"]) == (0.0, "draw", 17)


@pytest.fixture(scope="module")
def servers():
    """The scripted model, blackjack and the gymnasium agent (max_steps 5, the spec's)."""
    manager = plugin_manager(gym_blackjack.plugin, *first_party("scripted", "gymnasium"))
    config = {
        "policy": {"plugin": "scripted"},
        "blackjack": {"plugin": "blackjack"},
        "agent": {"plugin": "gymnasium", "model_server": "policy", "resources_server": "blackjack", "max_steps": 5},
    }
    with running_servers(config, plugins=manager) as global_config:
        yield global_config


class TestBlackjackThroughTheAgent:
    """Whole rollouts: the gymnasium agent, the scripted model (each row's conformance actions as
    `<action>` turns), blackjack."""

    @staticmethod
    def scripted(row: dict, texts: list[str]) -> dict:
        params = {
            **row["responses_create_params"],
            "metadata": {"scripted_turns": json.dumps([{"text": t} for t in texts])},
        }
        return {**row, "responses_create_params": params}

    async def test_each_example_row_gets_its_reward(self, servers):
        async with ServerClient(servers) as client:
            for row in read_rows(EXAMPLES):
                actions = [call["arguments"]["action"] for call in row["conformance"]["tool_calls"]]
                result = await client.post(
                    "agent", "/run", self.scripted(row, [f"<action>{a}</action>" for a in actions])
                )
                assert result["reward"] == row["conformance"]["reward"], (row["seed"], result["info"])
                assert result["terminated"] is True and result["truncated"] is False
                assert (result["model_calls"], result["env_steps"]) == (len(actions), len(actions))
                assert result["environment"] == "blackjack"

    async def test_five_hits_without_an_end_are_truncated_with_reward_zero(self, servers):
        # Seed 969 deals [2, 2] and then 2, A, 7, 4, 3: five hits reach 21 without a bust.
        row = {**read_rows(EXAMPLES)[0], "seed": 969}
        async with ServerClient(servers) as client:
            result = await client.post("agent", "/run", self.scripted(row, ["<action>hit</action>"]))
        assert (result["truncated"], result["terminated"], result["reward"]) == (True, False, 0.0)
        assert (result["model_calls"], result["env_steps"]) == (5, 5)
        # The reset observation follows the row's input; each turn is followed by the hand it led to.
        messages = result["responses_create_params"]["input"]
        assert messages[-1]["content"].startswith("Your hand: [2, 2] = 4")
        output = result["response"]["output"]
        assert [item["role"] for item in output] == ["assistant", "user"] * 5
        assert output[-1]["content"].startswith("Your hand: [2, 2, 2, A, 7, 4, 3] = 21")

    def test_the_example_config_is_the_gymnasium_agent_with_max_steps_5(self):
        for name in ("blackjack.yaml", "blackjack_local.yaml"):
            config = yaml.safe_load((PACKAGE / "configs" / name).read_text())
            assert config["blackjack_agent"]["plugin"] == "gymnasium"
            assert config["blackjack_agent"]["max_steps"] == 5
