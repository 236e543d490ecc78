"""A real model as the judge, offline: equivalence_llm_judge asking local_llama (the embedded
SmolLM2) through gym collect. The small model is a weak judge, so the verdict itself is not
asserted; what is: the rollout is scored (not failed), the judge's request is the environment's
prompt, and its reply is the local model's own Response, read by the verdict rule."""

from __future__ import annotations

import json

from click.testing import CliRunner

from gym_core.judge import label_verdict
from gym_core.testing import running_servers

from gym_cli.main import cli

TASK = {
    "responses_create_params": {
        "input": [{"role": "user", "content": "What is the capital of France? Answer in one word."}]
    },
    "expected_answer": "Paris",
}


def test_local_llama_judges_a_rollout_end_to_end(tmp_path):
    config = {
        "env": {
            "plugin": "equivalence_llm_judge",
            "judge_model_server": "judge",
            "check_twice_swap": False,
            "judge_responses_create_params": {"max_output_tokens": 24, "temperature": 0.0},
        },
        "judge": {"plugin": "local_llama", "temperature": 0.0, "max_tokens": 24},
        "policy": {"plugin": "scripted", "turns": [{"text": "Paris"}]},
        "agent": {"plugin": "simple_agent", "model_server": "policy", "resources_server": "env", "max_steps": 1},
    }
    tasks, out = tmp_path / "tasks.jsonl", tmp_path / "out.jsonl"
    tasks.write_text(json.dumps(TASK) + "\n")
    with running_servers(config) as running:
        result = CliRunner().invoke(
            cli(),
            ["collect", "--input", str(tasks), "--output", str(out), "--head", running.head_url, "--no-profile"],
            catch_exceptions=False,
        )
    assert result.exit_code == 0, result.output
    [row] = [json.loads(line) for line in out.read_text().splitlines()]
    assert row["reward"] in (0.0, 1.0)
    [evaluation] = row["judge_evaluations"]
    prompt = evaluation["responses_create_params"]["input"][-1]["content"]
    assert "Paris" in prompt and "capital of France" in prompt  # the grader template, filled
    reply = evaluation["response"]
    assert reply["object"] == "response" and reply["usage"]["output_tokens"] > 0
    text = "".join(part["text"] for item in reply["output"] if item["type"] == "message" for part in item["content"])
    assert text.strip()  # the local model answered; the verdict rule read this text
    equal = label_verdict(text)  # the default (guarded) reading: the last label outside echoed data
    assert row["reward"] == (1.0 if equal else 0.0)
