"""Sokoban levels: generated from a seed, always solvable, and the rules of a move.

Generation (ours; the same level for the same arguments on every platform and Python 3.x, since
it uses only ``random.Random`` seeded with the string ``"sokoban:<seed>"`` and iterates in fixed
orders; it does not reproduce gym-sokoban's boards):

1. **Room.** A random walk carves the floor inside the border: it starts on a random inner cell
   facing a random direction, takes ``int(1.7 * (rows + cols))`` steps, turning to a random
   direction with probability 0.35 before each, staying inside the border, and carves each cell it
   reaches plus one random neighbour of it, and half the time a second (inside the border too).
2. **Solved state.** ``num_boxes + 1`` distinct floor cells are sampled (from the floor in
   row-major order): the first is the player, the others the targets, each with its box on it.
3. **Reverse play.** A breadth-first search from the solved state, up to ``search_depth`` moves
   and :data:`MAX_STATES` states, where a move is the player stepping to a free adjacent floor cell
   and, optionally, pulling along the box right behind it. Undoing a pull is a push, so every state
   it reaches is solvable. The start is the reached state with every box off its target that
   maximises (the sum over boxes of the Manhattan distance to the nearest target, the number of
   pulls), the first found on ties.
4. **Retry.** When the room is too small or no state has every box off target, generation starts
   again from step 1 with the same random stream, up to :data:`MAX_ATTEMPTS` times.
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass, field

__all__ = [
    "Level",
    "Board",
    "generate",
    "GenerationError",
    "MOVES",
    "render",
    "MAX_STATES",
    "MAX_ATTEMPTS",
]

Cell = tuple[int, int]
# The actions, in the spec's numbering (1 = Up ... 4 = Right), and their displacements.
MOVES: dict[str, Cell] = {"Up": (-1, 0), "Down": (1, 0), "Left": (0, -1), "Right": (0, 1)}
_ORDER = tuple(MOVES)
MAX_STATES = 20_000
MAX_ATTEMPTS = 50


class GenerationError(Exception):
    """No level could be generated for these arguments."""


@dataclass(frozen=True)
class Level:
    rows: int
    cols: int
    floor: frozenset[Cell]
    targets: tuple[Cell, ...]
    boxes: tuple[Cell, ...]
    player: Cell


@dataclass
class Board:
    """A level being played: the boxes and the player move."""

    level: Level
    boxes: set[Cell] = field(default_factory=set)
    player: Cell = (0, 0)

    @classmethod
    def of(cls, level: Level) -> Board:
        return cls(level, set(level.boxes), level.player)

    def on_target(self) -> int:
        return sum(box in self.level.targets for box in self.boxes)

    def solved(self) -> bool:
        return self.on_target() == len(self.level.targets)

    def move(self, action: str) -> bool:
        """Play ``action`` with gym-sokoban's push rule; whether the player moved."""
        dr, dc = MOVES[action]
        r, c = self.player
        ahead = (r + dr, c + dc)
        if ahead not in self.level.floor:
            return False
        if ahead in self.boxes:
            beyond = (r + 2 * dr, c + 2 * dc)
            if beyond not in self.level.floor or beyond in self.boxes:
                return False
            self.boxes.remove(ahead)
            self.boxes.add(beyond)
        self.player = ahead
        return True


def render(board: Board) -> str:
    """One line per row: wall ``#``, floor ``_``, target ``O``, box ``X``, box on target ``√``,
    player ``P``, player on target ``S``."""
    level = board.level
    targets = set(level.targets)
    lines = []
    for r in range(level.rows):
        line = []
        for c in range(level.cols):
            cell = (r, c)
            if cell not in level.floor:
                line.append("#")
            elif cell == board.player:
                line.append("S" if cell in targets else "P")
            elif cell in board.boxes:
                line.append("√" if cell in targets else "X")
            else:
                line.append("O" if cell in targets else "_")
        lines.append("".join(line))
    return "\n".join(lines)


def _inside(cell: Cell, rows: int, cols: int) -> Cell:
    return min(max(cell[0], 1), rows - 2), min(max(cell[1], 1), cols - 2)


def _carve(rng: random.Random, rows: int, cols: int) -> frozenset[Cell]:
    cell = (rng.randrange(1, rows - 1), rng.randrange(1, cols - 1))
    direction = rng.choice(_ORDER)
    floor = {cell}
    for _ in range(int(1.7 * (rows + cols))):
        if rng.random() < 0.35:
            direction = rng.choice(_ORDER)
        dr, dc = MOVES[direction]
        cell = _inside((cell[0] + dr, cell[1] + dc), rows, cols)
        floor.add(cell)
        for _ in range(1 + (rng.random() < 0.5)):
            nr, nc = MOVES[rng.choice(_ORDER)]
            floor.add(_inside((cell[0] + nr, cell[1] + nc), rows, cols))
    return frozenset(floor)


def _distance(boxes: tuple[Cell, ...], targets: tuple[Cell, ...]) -> int:
    return sum(min(abs(b[0] - t[0]) + abs(b[1] - t[1]) for t in targets) for b in boxes)


def _scramble(
    floor: frozenset[Cell], targets: tuple[Cell, ...], player: Cell, depth: int
) -> tuple[Cell, tuple[Cell, ...]] | None:
    """The start state of reverse play from the solved state, or None when none qualifies."""
    start = (player, targets)
    seen = {start}
    queue: deque[tuple[Cell, tuple[Cell, ...], int, int]] = deque([(player, targets, 0, 0)])
    best: tuple[tuple[int, int], Cell, tuple[Cell, ...]] | None = None
    target_set = set(targets)
    while queue:
        where, boxes, moves, pulls = queue.popleft()
        if not target_set.intersection(boxes):
            score = (_distance(boxes, targets), pulls)
            if best is None or score > best[0]:
                best = (score, where, boxes)
        if moves >= depth:
            continue
        box_set = set(boxes)
        for dr, dc in MOVES.values():
            ahead = (where[0] + dr, where[1] + dc)
            if ahead not in floor or ahead in box_set:
                continue
            behind = (where[0] - dr, where[1] - dc)
            options = [(boxes, pulls)]
            if behind in box_set:
                options.append((tuple(sorted(where if b == behind else b for b in boxes)), pulls + 1))
            for next_boxes, next_pulls in options:
                state = (ahead, next_boxes)
                if state in seen or len(seen) >= MAX_STATES:
                    continue
                seen.add(state)
                queue.append((ahead, next_boxes, moves + 1, next_pulls))
    if best is None or best[0][0] == 0:
        return None
    return best[1], best[2]


def generate(seed: int, rows: int, cols: int, num_boxes: int, search_depth: int) -> Level:
    """The level of ``seed`` (see the module's docstring); :class:`GenerationError` if none."""
    rng = random.Random(f"sokoban:{seed}")
    for _ in range(MAX_ATTEMPTS):
        floor = _carve(rng, rows, cols)
        if len(floor) < num_boxes + 3:
            continue
        picks = rng.sample(sorted(floor), num_boxes + 1)
        player, targets = picks[0], tuple(sorted(picks[1:]))
        found = _scramble(floor, targets, player, search_depth)
        if found is not None:
            return Level(rows, cols, floor, targets, found[1], found[0])
    raise GenerationError(
        f"no solvable {rows}x{cols} level with {num_boxes} box(es) for seed {seed} after {MAX_ATTEMPTS} attempts"
    )
