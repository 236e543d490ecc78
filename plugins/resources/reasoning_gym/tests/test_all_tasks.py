"""Every task the library lists generates a row, and scoring that row's right answer gives 1.0.

All of them (about a hundred), so that a library upgrade that breaks a task, or a task that starts
needing a download, shows up here. One seed each in the suite (about ten seconds; a few tasks load
data files for each generation); ``GYM_REASONING_GYM_SEEDS=5`` tries more seeds.
"""

from __future__ import annotations

import json
import os

import pytest
from reference_answers import reference_answer

from gym_reasoning_gym.scoring import EXCLUDED_TASKS, TUPLE_GRID_TASKS, generate_rows, score, task_names

TASKS = task_names()
SEEDS = range(int(os.environ.get("GYM_REASONING_GYM_SEEDS", "1")))


def test_the_library_lists_about_a_hundred_tasks_and_composite_is_excluded():
    assert len(TASKS) >= 100
    assert "composite" not in TASKS and "composite" in EXCLUDED_TASKS
    assert {"knights_knaves", "basic_arithmetic", "graph_color", "rush_hour", "sudoku"} <= set(TASKS)


@pytest.mark.parametrize("task", TASKS)
def test_every_task_generates_rows_that_its_own_answer_scores_one(task):
    for seed in SEEDS:
        (row,) = generate_rows({task: 1}, 1, seed)
        assert row["metadata"]["source_dataset"] == task
        assert row["answer"] is None or isinstance(row["answer"], str)
        assert json.loads(json.dumps(row)) == row  # plain JSON: what the server reads back
        text = f"<answer>{reference_answer(row)}</answer>"
        result = score(task, text, row["question"], row["answer"], row["metadata"], restore_tuple_grids=True)
        assert (result.score, result.reason) == (1.0, "scored"), (task, seed, result)
        if task in TUPLE_GRID_TASKS:
            # The reference's quirk, kept by default: the grid read from JSON is a list, never
            # equal to the parsed tuple, so a right answer gets the wrong-grid score.
            quirk = score(task, text, row["question"], row["answer"], row["metadata"])
            assert quirk.score == 0.05
