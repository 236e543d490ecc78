"""A right answer for any generated row, for the tests: the row's oracle ``answer`` when it has one,
else one built from its metadata (a tasks whose scorer checks validity rather than an oracle:
graph colouring, logic, Rubik's cube) or found by a small solver (Rush Hour, BoxNet)."""

from __future__ import annotations

import json
from collections import deque
from typing import Any

SIZE = 6
PRIMARY_ROW = 2


def reference_answer(row: dict[str, Any]) -> str:
    if row["answer"] is not None:
        return row["answer"]
    metadata = row["metadata"]
    task = metadata["source_dataset"]
    if task == "graph_color":
        return json.dumps(metadata["possible_answer"])
    if task == "propositional_logic":
        return metadata["example_answer"]
    if task == "rubiks_cube":
        return metadata["example_correct_answer"]
    if task == "rush_hour":
        return solve_rush_hour(metadata["board_config"])
    if task == "boxnet":
        return json.dumps(plan_boxnet(metadata["initial_state"]))
    raise AssertionError(f"no reference answer for {task}: add one here")


def _moves(board: str):
    """(move, next board) for every one-cell move of every car on a 6x6 board string
    ('o' empty, 'x' wall, letters cars)."""
    for car in sorted(set(board) - {"o", "x"}):
        cells = [i for i, c in enumerate(board) if c == car]
        horizontal = cells[1] - cells[0] == 1
        stride = 1 if horizontal else SIZE
        for step in (-1, 1):
            edge = cells[0] if step < 0 else cells[-1]
            nxt = edge + step * stride
            if not 0 <= nxt < SIZE * SIZE or board[nxt] != "o":
                continue
            if horizontal and nxt // SIZE != edge // SIZE:
                continue
            free = cells[-1] if step < 0 else cells[0]
            b = list(board)
            b[nxt], b[free] = car, "o"
            yield f"{car}{'+' if step > 0 else '-'}1", "".join(b)


def solve_rush_hour(board: str) -> str:
    """Breadth-first search until car A reaches the right edge of its row. The library names the
    cars A, B, C... in the sorted order of the board's labels, which may skip letters."""
    cars = sorted(set(board) - {"o", "x"})
    board = board.translate(str.maketrans({car: chr(ord("A") + i) for i, car in enumerate(cars)}))
    goal = PRIMARY_ROW * SIZE + SIZE - 1
    seen = {board: None}
    queue = deque([board])
    while queue:
        state = queue.popleft()
        if state[goal] == "A":
            path = []
            while seen[state] is not None:
                move, state = seen[state]
                path.append(move)
            return " ".join(reversed(path))
        for move, nxt in _moves(state):
            if nxt not in seen:
                seen[nxt] = (move, state)
                queue.append(nxt)
    raise AssertionError("unsolvable board")


def plan_boxnet(state: dict[str, list[str]]) -> list[dict[str, str]]:
    """Walk each box to its target's square (one row, then one column at a time), then match it."""

    def coords(square: str) -> tuple[float, float]:
        r, c = square.split("_")
        return float(r), float(c)

    where = {item: square for square, items in state.items() for item in items}
    plan = []
    for box in (item for item in where if item.startswith("box_")):
        r, c = coords(where[box])
        tr, tc = coords(where["target_" + box[4:]])
        while (r, c) != (tr, tc):
            nr, nc = (r + (1 if tr > r else -1), c) if r != tr else (r, c + (1 if tc > c else -1))
            plan.append({f"Agent[{r}, {c}]": f"move({box}, square[{nr}, {nc}])"})
            r, c = nr, nc
        plan.append({f"Agent[{r}, {c}]": f"move({box}, target_{box[4:]})"})
    return plan
