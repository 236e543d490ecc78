"""A judge that fails is a failed rollout, never a reward of 0, end to end through `gym collect`:
math with its LLM-judge fallback, a scripted policy answering one task wrong (so the judge is asked)
and one right, and a scripted judge answering 500. The wrong one goes to the failures file with
reason judge_failed; with the judge fixed, re-running the same command collects it."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from gym_cli.main import cli

TASKS = [
    {
        "responses_create_params": {"input": [{"role": "user", "content": "What is 7 + 5? Box the answer."}]},
        "question": "What is 7 + 5?",
        "expected_answer": "12",
    },
    {
        "responses_create_params": {"input": [{"role": "user", "content": "What is 2 + 2? Box the answer."}]},
        "question": "What is 2 + 2?",
        "expected_answer": "4",
    },
]
# The policy: "13" for 7 + 5, which Math-Verify calls wrong (the judge decides); "4" for 2 + 2, right.
POLICY_RULES = [
    {"match": r"7 \+ 5", "text": "7 + 5 = \\boxed{13}"},
    {"match": r"2 \+ 2", "text": "2 + 2 = \\boxed{4}"},
]


def servers_config(judge_rules: list[dict]) -> dict:
    return {
        "head_server": {"port": 0},
        "math": {
            "plugin": "math",
            "should_use_judge": True,
            "judge_model_server": "judge",
            "judge_max_attempts": 2,
            "verify_workers": 1,
        },
        "judge": {"plugin": "scripted", "rules": judge_rules},
        "policy": {"plugin": "scripted", "rules": POLICY_RULES},
        "agent": {"plugin": "simple_agent", "model_server": "policy", "resources_server": "math", "max_steps": 1},
    }


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def collect(config: Path, tasks: Path, out: Path):
    args = [
        "collect",
        "--serve",
        str(config),
        "--isolation",
        "none",
        "--input",
        str(tasks),
        "--output",
        str(out),
        "--retries",
        "1",
        "--retry-backoff",
        "0.01",
        "--no-profile",
    ]
    return CliRunner().invoke(cli(), args, catch_exceptions=False)


def test_a_failing_judge_fails_the_rollout_and_a_rerun_collects_it(tmp_path):
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps(t) + "\n" for t in TASKS))
    out, failures = tmp_path / "out.jsonl", tmp_path / "out.failures.jsonl"
    broken, fixed = tmp_path / "broken.yaml", tmp_path / "fixed.yaml"
    broken.write_text(json.dumps(servers_config([{"match": "Assistant A's Answer", "error_status": 500}])))
    fixed.write_text(json.dumps(servers_config([{"match": "Assistant A's Answer", "text": "Equivalent. [[A=B]]"}])))

    first = collect(broken, tasks, out)
    assert first.exit_code == 1, first.output  # some rollouts failed
    # The right answer needed no judge: scored. The wrong one needed the judge: failed, not scored 0.
    assert [(r["task_index"], r["reward"], r["judge_evaluations"]) for r in rows(out)] == [(1, 1.0, None)]
    [failure] = rows(failures)
    assert (failure["task_index"], failure["rollout_index"]) == (0, 0)
    assert failure["reason"] == "judge_failed" and failure["status"] == 502
    assert failure["attempts"] == 2  # an infrastructure failure: retried in the run (--retries 1)
    assert "judge" in failure["message"]

    second = collect(fixed, tasks, out)
    assert second.exit_code == 0, second.output
    collected = {r["task_index"]: r for r in rows(out)}
    assert sorted(collected) == [0, 1] and len(rows(out)) == 2  # only the failed rollout ran again
    judged = collected[0]
    assert (judged["reward"], judged["library_reward"], judged["extracted_answer"]) == (1.0, 0.0, "13")
    assert len(judged["judge_evaluations"]) == 2  # equal in both orders
    assert rows(failures) == []  # resolved: the failures file lists what is still missing
