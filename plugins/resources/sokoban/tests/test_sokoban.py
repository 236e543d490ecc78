"""The sokoban environment over real HTTP: gym's conformance kit (each example row plays its
solution, `conformance.tool_calls`, through the `act` tool and must get `conformance.reward`),
level generation (reproducible, solvable), the move parser, the push rule and rewards, and whole
rollouts through the gymnasium agent with the scripted model."""

from __future__ import annotations

import json
from collections import deque
from pathlib import Path

import pytest
import yaml

from gym_core import ServerClient, ServerHTTPError
from gym_core.testing import (
    ResourcesServerTests,
    RunningServers,
    assistant_response,
    first_party,
    plugin_manager,
    read_rows,
    running_servers,
)

import gym_sokoban.plugin
from gym_sokoban.levels import MOVES, Board, Level, generate, render
from gym_sokoban.server import parse_move

PACKAGE = Path(__file__).resolve().parents[1]
EXAMPLES = PACKAGE / "data" / "example.jsonl"
ROW = {"responses_create_params": {"input": "Solve it."}}


def solve(level: Level) -> list[str] | None:
    """A shortest solution by breadth-first search over pushes and moves (small levels only)."""
    start = Board.of(level)
    first = (start.player, tuple(sorted(start.boxes)))
    came: dict = {first: None}
    queue = deque([first])
    while queue:
        key = queue.popleft()
        for move in MOVES:
            board = Board(level, set(key[1]), key[0])
            if not board.move(move):
                continue
            nxt = (board.player, tuple(sorted(board.boxes)))
            if nxt in came:
                continue
            came[nxt] = (key, move)
            if board.solved():
                path = []
                while came[nxt] is not None:
                    nxt, m = came[nxt]
                    path.append(m)
                return path[::-1]
            queue.append(nxt)
    return None


def step(caller, text: str):
    return caller.post("/step", {**ROW, "response": assistant_response(text)})


def level_from(text: str) -> Level:
    """A level drawn with the board's symbols (for exact rule tests)."""
    lines = text.strip().splitlines()
    floor, targets, boxes, player = set(), [], [], None
    for r, line in enumerate(lines):
        for c, ch in enumerate(line):
            if ch == "#":
                continue
            floor.add((r, c))
            if ch in "O√S":
                targets.append((r, c))
            if ch in "X√":
                boxes.append((r, c))
            if ch in "PS":
                player = (r, c)
    return Level(len(lines), len(lines[0]), frozenset(floor), tuple(targets), tuple(boxes), player)


class TestSokoban(ResourcesServerTests):
    server_type = "sokoban"
    plugins = [gym_sokoban.plugin]
    example_data = EXAMPLES

    def test_the_same_seed_gives_the_same_level_and_others_differ(self):
        assert generate(5, 6, 6, 1, 100) == generate(5, 6, 6, 1, 100)
        boards = {render(Board.of(generate(seed, 6, 6, 1, 100))) for seed in range(20)}
        assert len(boards) > 15
        # The documented generator, pinned: a change to it changes every dataset's levels.
        assert render(Board.of(generate(84810, 5, 5, 1, 100))) == "#####\n#_O##\n#_X##\n#_P_#\n#####"

    @pytest.mark.parametrize(
        ("rows", "cols", "boxes"),
        [(5, 5, 1), (6, 6, 1), (7, 7, 2), (8, 6, 2), (6, 4, 1), (6, 4, 2), (4, 6, 1), (12, 4, 2), (6, 3, 1)],
    )
    def test_generated_levels_are_solvable_with_every_box_off_target(self, rows, cols, boxes):
        for seed in range(25):
            level = generate(seed, rows, cols, boxes, 100)
            assert len(level.boxes) == len(level.targets) == boxes
            assert not set(level.boxes) & set(level.targets)
            assert all(cell in level.floor for cell in (*level.boxes, *level.targets, level.player))
            assert all(0 < r < rows - 1 and 0 < c < cols - 1 for r, c in level.floor)  # the border is wall
            assert solve(level), (seed, render(Board.of(level)))

    def test_move_parsing(self):
        assert parse_move("I think <action> up </action> then <action>Left</action>") == "Up"
        assert parse_move("<action>3</action>") == "Left"
        assert parse_move("Move the player right, then down") == "Right"  # the first bare word
        assert parse_move("Option 4 is best") == "Right"
        assert parse_move("<action>jump</action> upward") is None  # `upward` is not a standalone word
        assert parse_move("") is None

    def test_pushes_walls_and_blocked_boxes(self):
        board = Board.of(level_from("######\n#P_XO#\n#_XX_#\n#____#\n######"))
        assert board.move("Up") is False and board.player == (1, 1)  # a wall
        assert board.move("Right") is True and board.player == (1, 2)
        assert board.move("Right") is True and board.boxes == {(1, 4), (2, 2), (2, 3)}  # pushed onto the target
        assert board.move("Right") is False and board.player == (1, 3)  # a box against the wall
        board.player = (1, 2)
        assert board.move("Down") is True and board.boxes == {(1, 4), (3, 2), (2, 3)}
        assert render(board) == "######\n#___√#\n#_PX_#\n#_X__#\n######"
        board = Board.of(level_from("######\n#PXXO#\n######"))
        assert board.move("Right") is False and board.boxes == {(1, 2), (1, 3)}  # a box behind a box
        assert render(board) == "######\n#PXXO#\n######"

    def test_reset_shows_the_board(self, gym_servers: RunningServers):
        reset = gym_servers.caller().post("/reset", {**ROW, "seed": 84810, "dim_room": [5, 5], "level_id": 1}).json()
        lines = reset["observation"].split("\n")
        assert lines[:6] == ["Sokoban board:", "#####", "#_O##", "#_X##", "#_P_#", "#####"]
        assert lines[6] == "" and lines[7].startswith("Symbols: # wall, _ floor, O target, X box")
        assert "<action>Up</action>" in lines[8]
        assert reset["info"]["seed"] == 84810 and reset["info"]["level_id"] == 1

    def test_solving_a_one_box_level_earns_10_9_and_the_bare_board(self, gym_servers: RunningServers):
        caller = gym_servers.caller()
        caller.post("/reset", {**ROW, "seed": 84810, "dim_room": [5, 5]})
        answer = step(caller, "<action>Up</action>").json()
        assert answer["reward"] == pytest.approx(10.9) and answer["terminated"] is True
        assert answer["observation"] == "#####\n#_√##\n#_P##\n#___#\n#####"
        assert answer["info"] == {
            "action_is_effective": True,
            "action_is_valid": True,
            "success": True,
            "action_id": 1,
            "action_label": "Up",
            "total_reward": 10.9,
        }
        # Done: a further step plays nothing and says so again.
        again = step(caller, "<action>Down</action>").json()
        assert (again["reward"], again["terminated"], again["observation"]) == (0.0, True, answer["observation"])

    def test_a_box_pushed_off_its_target_costs_one(self, gym_servers: RunningServers):
        # Seed 11, 8x8, 2 boxes: the player stands above a box two cells above a target.
        caller = gym_servers.caller()
        caller.post("/reset", {**ROW, "seed": 11, "dim_room": [8, 8], "num_boxes": 2})
        answers = [step(caller, f"<action>{m}</action>").json() for m in ("Up", "Down", "Down", "Down")]
        assert [a["info"]["action_is_effective"] for a in answers] == [False, True, True, True]  # Up: a wall
        assert [a["reward"] for a in answers] == [pytest.approx(r) for r in (-0.1, -0.1, 0.9, -1.1)]
        assert answers[-1]["info"]["total_reward"] == pytest.approx(-0.4)
        assert not any(a["terminated"] or a["truncated"] for a in answers)

    def test_the_step_limit_truncates_with_the_bare_board(self, gym_servers: RunningServers):
        caller = gym_servers.caller()
        caller.post("/reset", {**ROW, "seed": 3, "max_steps": 2})
        first = step(caller, "<action>Down</action>").json()
        assert first["truncated"] is False and first["observation"].startswith("Sokoban board:")
        second = step(caller, "<action>Down</action>").json()
        assert (second["truncated"], second["terminated"]) == (True, False)
        assert not second["observation"].startswith("Sokoban board:")
        assert caller.post("/verify", {**ROW, "response": assistant_response("")}).json()["reward"] == pytest.approx(
            -0.2
        )

    def test_no_move_in_the_reply_is_a_400(self, gym_servers: RunningServers):
        caller = gym_servers.caller()
        caller.post("/reset", {**ROW, "seed": 3})
        refused = step(caller, "I am not sure what to do here.")
        assert refused.status == 400 and "no move found" in refused.json()["error"]["message"]

    def test_with_invalid_move_penalty_a_reply_without_a_move_is_a_step_that_moves_nothing(self):
        from gym_sokoban.config import SokobanConfig
        from gym_sokoban.server import Game, SokobanServer

        server = SokobanServer(SokobanConfig(invalid_move="penalty"))
        game = Game(Board.of(generate(84810, 5, 5, 1, 100)), max_steps=10)
        action = server.parse_action("no idea", game)
        answer = server.step(game, action)
        assert (answer.reward, answer.terminated, answer.info["action_is_valid"], answer.info["action_label"]) == (
            -0.1,
            False,
            False,
            None,
        )
        assert game.board.player == generate(84810, 5, 5, 1, 100).player

    def test_row_overrides_are_bounded(self, gym_servers: RunningServers):
        caller = gym_servers.caller()
        for bad in ({"dim_room": [2, 6]}, {"dim_room": [6, 40]}, {"num_boxes": 9}, {"max_steps": 0}, {"seed": "x"}):
            reply = caller.post("/reset", {**ROW, **bad})
            assert reply.status == 422, (bad, reply.text)

    def test_non_square_rooms_as_the_reference_plays_them(self, gym_servers: RunningServers):
        # NeMo Gym's own example row asks for dim_room [6, 4]: six rows, four columns, walls included.
        caller = gym_servers.caller()
        reset = caller.post("/reset", {**ROW, "seed": 3, "dim_room": [6, 4]}).json()
        board = reset["observation"].split("\n")[1:7]
        assert [len(line) for line in board] == [4] * 6 and reset["info"]["dim_room"] == [6, 4]
        assert board[0] == board[-1] == "####" and sum("".join(board).count(c) for c in "PS") == 1
        assert solve(generate(3, 6, 4, 1, 100))

    def test_a_room_too_small_for_any_level_is_a_clear_422(self, gym_servers: RunningServers):
        reply = gym_servers.caller().post("/reset", {**ROW, "seed": 5, "dim_room": [4, 4]})
        assert reply.status == 422, reply.text
        assert "4x4" in reply.text and "seed 5" in reply.text and "dim_room" in reply.text


@pytest.fixture(scope="module")
def servers():
    """The scripted model, sokoban and the gymnasium agent (max_steps 20, the spec's)."""
    manager = plugin_manager(gym_sokoban.plugin, *first_party("scripted", "gymnasium"))
    config = {
        "policy": {"plugin": "scripted"},
        "sokoban": {"plugin": "sokoban"},
        "agent": {"plugin": "gymnasium", "model_server": "policy", "resources_server": "sokoban", "max_steps": 20},
    }
    with running_servers(config, plugins=manager) as global_config:
        yield global_config


def scripted(row: dict, texts: list[str]) -> dict:
    params = {
        **row["responses_create_params"],
        "metadata": {"scripted_turns": json.dumps([{"text": t} for t in texts])},
    }
    return {**row, "responses_create_params": params}


class TestSokobanThroughTheAgent:
    async def test_each_example_row_gets_its_reward(self, servers):
        async with ServerClient(servers) as client:
            for row in read_rows(EXAMPLES):
                moves = [call["arguments"]["action"] for call in row["conformance"]["tool_calls"]]
                # The scripted model repeats its last turn after the script: rows whose moves end
                # the episode get their reward; level 6's one move, a wall bump, goes on to 20 steps.
                result = await client.post(
                    "agent", "/run", scripted(row, [f"Next: <action>{m}</action>" for m in moves])
                )
                solved = row["conformance"]["reward"] > 10
                assert result["terminated"] is solved and result["info"]["success"] is solved
                if row["level_id"] == 6:
                    assert (result["reward"], result["model_calls"]) == (pytest.approx(-2.0), 20)
                    assert result["truncated"] is True and result["info"]["action_is_effective"] is False
                    continue
                assert result["reward"] == pytest.approx(row["conformance"]["reward"]), (
                    row["level_id"],
                    result["info"],
                )
                assert result["model_calls"] == len(moves)

    async def test_an_unreadable_move_fails_the_rollout(self, servers):
        row = read_rows(EXAMPLES)[0]
        async with ServerClient(servers) as client:
            with pytest.raises(ServerHTTPError) as failed:
                await client.post("agent", "/run", scripted(row, ["Hmm, let me think about it."]))
        assert failed.value.status == 424 and "no move found" in str(failed.value)

    def test_the_configs_pair_sokoban_with_the_gymnasium_agent(self):
        for name in ("sokoban.yaml", "sokoban_local.yaml"):
            config = yaml.safe_load((PACKAGE / "configs" / name).read_text())
            assert config["sokoban_agent"]["plugin"] == "gymnasium" and config["sokoban_agent"]["max_steps"] == 20
