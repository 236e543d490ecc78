"""The bash-only agent over real HTTP, in the repo environment with the scripted model: gym's agent
conformance kit (the example rows fixed by a heredoc'd `patch`, reward 1; the row left alone, 0),
then the loop's rules: one command per turn, format reminders, submit, max_steps."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gym_core.testing import AgentServerTests, RunningServers, read_rows

import gym_repo.plugin
import gym_scripted.plugin
from gym_repo.bash_agent import command_of, observation

PACKAGE = Path(__file__).resolve().parents[1]
ROWS = read_rows(PACKAGE / "data" / "example.jsonl")


def with_script(row: dict[str, Any], *texts: str) -> dict[str, Any]:
    script = [{"text": text} for text in texts]
    params = {**row["responses_create_params"], "metadata": {"scripted_turns": json.dumps(script)}}
    return {**row, "responses_create_params": params}


def fix_turn(row: dict[str, Any]) -> str:
    return f"I apply the fix.\n```bash\npatch -p1 <<'GYM_EOF'\n{row['reference_patch']}GYM_EOF\n```"


SUBMIT = "Done.\n```bash\nsubmit\n```"


class TestBashAgent(AgentServerTests):
    server_type = "bash_agent"
    plugins = [gym_repo.plugin, gym_scripted.plugin]
    environment = {"plugin": "repo", "command_timeout_s": 5}
    options = {"max_steps": 4, "observation_chars": 200}
    example_data = PACKAGE / "data" / "example.jsonl"

    def run_body(self, row):
        if row["conformance"]["reward"] == 1.0:
            return with_script(row, fix_turn(row), SUBMIT)
        return with_script(row, SUBMIT)

    def expected_reward(self, row):
        return row["conformance"]["reward"]

    def test_each_turn_runs_one_command_and_the_model_reads_its_output(self, gym_servers: RunningServers):
        row = ROWS[0]
        body = with_script(
            row, "```bash\necho hi; exit 3\n```", "no block here", "```bash\nls\n```\n```bash\nls\n```", SUBMIT
        )
        result = gym_servers.caller().post("/run", body).json()
        assert result["submitted"] is True and result["steps"] == 4 and result["reward"] == 0.0
        notes = [item["content"] for item in result["response"]["output"] if item.get("role") == "user"]
        assert notes[0] == "exit code: 3\nstdout:\nhi\n"
        assert "no ```bash block" in notes[1] and "2 ```bash blocks" in notes[2]
        assert result["num_tool_calls"] == 1  # only the well-formed turn ran a command

    def test_without_submit_the_rollout_stops_at_max_steps_and_is_verified(self, gym_servers: RunningServers):
        row = ROWS[0]
        result = (
            gym_servers.caller().post("/run", with_script(row, fix_turn(row), "```bash\ncat README.md\n```")).json()
        )
        assert result["submitted"] is False and result["steps"] == 4 and result["reward"] == 1.0

    def test_an_escape_attempt_is_an_observation_and_the_reward_stays_honest(self, gym_servers: RunningServers):
        row = ROWS[0]
        hidden = [name for name in row["hidden_tests"] if Path(name).name.startswith("test_")]
        finds = "; ".join(f"find / -path '*/{name}' 2>/dev/null" for name in hidden)
        hostile = f"```bash\n{finds}; cat /etc/shadow; ls /root\n```"
        result = gym_servers.caller().post("/run", with_script(row, hostile, SUBMIT)).json()
        notes = [item["content"] for item in result["response"]["output"] if item.get("role") == "user"]
        assert notes[0].startswith("exit code: ") and "No such file" in notes[0]  # /etc/shadow, /root: not there
        assert not any(name in notes[0] for name in hidden) and result["reward"] == 0.0


def test_the_command_of_a_reply():
    assert command_of("text\n```bash\nls -la\n```\n") == ("ls -la", None)
    assert command_of("```sh\npwd\n```")[0] == "pwd"
    assert command_of("```\nsubmit\n```")[0] == "submit"
    assert command_of("nothing")[0] is None
    assert command_of("```bash\na\n```\nand\n```bash\nb\n```") == (
        None,
        command_of("```bash\na\n```\n```sh\nb\n```")[1],
    )
    assert "2 ```bash blocks" in command_of("```bash\na\n```\nand\n```bash\nb\n```")[1]
    # A block in another language is not a command, and its closing fence opens nothing.
    reply = "```bash\nls\n```\n\nsorry\n\n```python\nx = 1\n```\n\nsorry\n\n```python\ny = 2\n```\n"
    assert command_of(reply) == ("ls", None)
    assert command_of("```python\nprint(1)\n```")[0] is None
    assert command_of("```bash\nunclosed")[0] is None


def test_the_observation_is_cut_with_a_marker():
    text = observation(json.dumps({"exit_code": 0, "stdout": "x" * 500, "stderr": ""}), 100)
    assert text.startswith("exit code: 0\nstdout:\nxxx") and text.endswith("more characters cut ...]")
    assert observation(json.dumps({"error": "path '../x' leaves the workspace"}), 100) == (
        "error: path '../x' leaves the workspace"
    )
