"""Sokoban (the environments spec, §20, "grl_sokoban"), Gymnasium-style: one move per turn.

``reset`` generates the row's level (:mod:`gym_sokoban.levels`: reproducible from ``seed``) and
shows the board; ``step`` reads one move from the model's text and plays it with gym-sokoban's
push rule. Step reward: -0.1 each move, +1 when a box lands on a target, -1 when one leaves it,
+10 when every box is on a target (so solving a one-box level earns 10.9 on the last move). The
episode ends when the level is solved (terminated) or after ``max_steps`` moves (truncated).
"""

from __future__ import annotations

import asyncio
import random
import re
from dataclasses import dataclass
from typing import Annotated, Any

from msgspec import Meta

from gym_core import ToolError
from gym_core.gymnasium_env import GymnasiumEnvironment, Reset, Step
from gym_core.schemas import SeedSessionRequest

from gym_sokoban.config import MAX_BOXES, MAX_EPISODE_STEPS, Side, SokobanConfig
from gym_sokoban.levels import MOVES, Board, GenerationError, generate, render

__all__ = ["SokobanServer", "SokobanTask", "parse_move"]

ACTION_IDS = {"1": "Up", "2": "Down", "3": "Left", "4": "Right"}
_TAGGED = re.compile(r"<action>\s*(up|down|left|right|[1-4])\s*</action>", re.IGNORECASE)
_BARE = re.compile(r"\b(up|down|left|right|[1-4])\b", re.IGNORECASE)
LEGEND = "Symbols: # wall, _ floor, O target, X box, √ box on target, P player, S player on target."
ASK = (
    "Reply with exactly one move: <action>Up</action>, <action>Down</action>, "
    "<action>Left</action> or <action>Right</action>."
)


class SokobanTask(SeedSessionRequest, kw_only=True):
    seed: int | None = None
    level_id: Any = None
    dim_room: tuple[Side, Side] | None = None
    num_boxes: Annotated[int, Meta(ge=1, le=MAX_BOXES)] | None = None
    max_steps: Annotated[int, Meta(ge=1, le=MAX_EPISODE_STEPS)] | None = None
    search_depth: Annotated[int, Meta(ge=1, le=300)] | None = None


def parse_move(text: str) -> str | None:
    """The move a text names: the first ``<action>...</action>`` tag, else the first standalone
    word up/down/left/right or digit 1-4 anywhere (which ordinary prose can match), else None."""
    text = text.strip()
    match = _TAGGED.search(text) or _BARE.search(text)
    if match is None:
        return None
    word = match.group(1)
    return ACTION_IDS.get(word) or word.capitalize()


@dataclass
class Game:
    board: Board
    max_steps: int
    steps: int = 0
    total_reward: float = 0.0


def formatted(board: Board) -> str:
    return f"Sokoban board:\n{render(board)}\n\n{LEGEND}\n{ASK}"


class SokobanServer(GymnasiumEnvironment):
    config: SokobanConfig
    actions = tuple(MOVES)
    # An episode's summed reward: at best every box onto its target and the +10; at worst
    # -0.1 for each of the most moves allowed and every box pushed off a target.
    reward_range = (-0.1 * MAX_EPISODE_STEPS - MAX_BOXES, 10.0 + MAX_BOXES)

    async def reset(self, task: SokobanTask) -> Reset:
        cfg = self.config
        rows, cols = task.dim_room or cfg.dim_room
        boxes = task.num_boxes or cfg.num_boxes
        depth = task.search_depth or cfg.search_depth
        max_steps = min(task.max_steps or cfg.max_steps, self.step_limit)
        seed = task.seed if task.seed is not None else random.SystemRandom().randrange(2**32)
        try:
            # Off the event loop: a 12x12 level with 4 boxes takes a few hundred milliseconds.
            level = await asyncio.to_thread(generate, seed, rows, cols, boxes, depth)
        except GenerationError as exc:
            raise ToolError(f"{self.name}: {exc}; try another seed or a larger dim_room", 422) from None
        board = Board.of(level)
        info: dict[str, Any] = {"seed": seed, "dim_room": [rows, cols], "num_boxes": boxes}
        if task.level_id is not None:
            info["level_id"] = task.level_id
        return Reset(Game(board, max_steps), formatted(board), info, max_steps=max_steps)

    def parse_action(self, text: str, state: Game) -> str:
        move = parse_move(text)
        if move is None and self.config.invalid_move == "penalty":
            return ""  # a step without a move
        if move is None:  # the spec's: an unreadable move is a 400 that fails the rollout, not a penalty
            raise ToolError(
                f"{self.name}: no move found in the reply; answer with <action>Up</action>, "
                "<action>Down</action>, <action>Left</action> or <action>Right</action>",
                400,
            )
        return move

    def step(self, state: Game, action: str) -> Step:
        game = state
        board = game.board
        before = board.on_target()
        moved = board.move(action) if action else False
        after = board.on_target()
        reward = -0.1
        if after > before:
            reward += 1.0
        elif after < before:
            reward -= 1.0
        success = board.solved()
        if success:
            reward += 10.0
        reward = round(reward, 10)
        game.steps += 1
        game.total_reward = round(game.total_reward + reward, 10)
        truncated = not success and game.steps >= game.max_steps
        info = {
            "action_is_effective": moved,
            "action_is_valid": bool(action),
            "success": success,
            "action_id": list(MOVES).index(action) + 1 if action else 0,
            "action_label": action or None,
            "total_reward": game.total_reward,
        }
        # The spec's: the formatted board while the episode runs, the bare board once it is over.
        observation = render(board) if success or truncated else formatted(board)
        return Step(observation, reward, success, truncated, info)
