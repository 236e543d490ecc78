"""gym collect against real servers: rows, resume, kill -9, Ctrl+C, malformed input, failures, which agent."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from click.testing import CliRunner

from gym_core.testing import running_servers

from gym_cli.main import cli

HERE = Path(__file__).resolve()
ROOT = HERE.parents[3]
COUNTER_TASKS = ROOT / "plugins/resources/counter/data/example.jsonl"
COUNTER_SCRIPTED = ROOT / "plugins/resources/counter/configs/counter_scripted.yaml"

TURNS = [{"tool_calls": [{"name": "increment_counter", "arguments": {"count": 3}}]}, {"text": "added 3"}]


def counter_config(delay_s: float = 0.0) -> dict:
    return {
        "counter": {"plugin": "counter"},
        "policy": {"plugin": "scripted", "turns": TURNS, "delay_s": delay_s},
        "agent": {"plugin": "simple_agent", "model_server": "policy", "resources_server": "counter"},
    }


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def invoke(*args: str):
    return CliRunner().invoke(cli(), list(args), catch_exceptions=False)


def test_collect_writes_scored_rows_and_profile(tmp_path):
    out = tmp_path / "out.jsonl"
    with running_servers(counter_config()) as config:
        result = invoke("collect", "--input", str(COUNTER_TASKS), "--output", str(out), "--agent", "agent",
                        "--repeats", "3", "--parallel", "4", "--head", config.head_url, "--temperature", "0.3")
    assert result.exit_code == 0, result.output
    collected = rows(out)
    n_tasks = len(COUNTER_TASKS.read_text().splitlines())
    assert len(collected) == n_tasks * 3
    assert sorted((r["task_index"], r["rollout_index"]) for r in collected) == [
        (t, r) for t in range(n_tasks) for r in range(3)
    ]
    for row in collected:
        # +3 from the scripted tool call: reward 1 exactly when expected = initial + 3.
        assert row["final_count"] == row["initial_count"] + 3
        assert row["reward"] == float(row["expected_count"] == row["initial_count"] + 3)
        assert row["responses_create_params"]["temperature"] == 0.3  # sampling override reached the task
        assert row["response"]["output"][0]["type"] == "function_call"
    profile = json.loads((tmp_path / "out.profile.json").read_text())
    assert profile["overall"]["num_rollouts"] == n_tasks * 3
    assert "pass@1" in profile["overall"]


def test_rerun_resumes_without_duplicates(tmp_path):
    out = tmp_path / "out.jsonl"
    with running_servers(counter_config()) as config:
        first = invoke("collect", "--input", str(COUNTER_TASKS), "--output", str(out), "--agent", "agent",
                       "--repeats", "2", "--head", config.head_url, "--no-profile")
        assert first.exit_code == 0
        # A torn last line, as a kill during a write leaves it.
        with out.open("a") as f:
            f.write('{"task_index": 0, "rollout_ind')
        second = invoke("collect", "--input", str(COUNTER_TASKS), "--output", str(out), "--agent", "agent",
                        "--repeats", "3", "--head", config.head_url, "--no-profile")
    assert second.exit_code == 0, second.output
    keys = [(r["task_index"], r["rollout_index"]) for r in rows(out)]
    n_tasks = len(COUNTER_TASKS.read_text().splitlines())
    assert len(keys) == len(set(keys)) == n_tasks * 3
    assert "resuming" in second.output


def test_kill_9_midway_loses_nothing(tmp_path):
    """Kill the collector hard while rollouts are in flight; the re-run ends with exactly tasks × repeats."""
    out = tmp_path / "out.jsonl"
    repeats = 20
    args = ["--input", str(COUNTER_TASKS), "--output", str(out), "--agent", "agent", "--repeats", str(repeats),
            "--parallel", "4", "--no-profile"]
    with running_servers(counter_config(delay_s=0.02)) as config:
        proc = subprocess.Popen([sys.executable, "-m", "gym_cli", "collect", *args, "--head", config.head_url],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (not out.exists() or len(out.read_bytes().splitlines()) < 10):
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        partial = len(rows_tolerant(out))
        n_tasks = len(COUNTER_TASKS.read_text().splitlines())
        assert 0 < partial < n_tasks * repeats
        result = invoke("collect", *args, "--head", config.head_url)
    assert result.exit_code == 0, result.output
    keys = [(r["task_index"], r["rollout_index"]) for r in rows(out)]
    assert len(keys) == len(set(keys)) == n_tasks * repeats


def rows_tolerant(path: Path) -> list[dict]:
    found = []
    for line in path.read_text().splitlines():
        try:
            found.append(json.loads(line))
        except json.JSONDecodeError:
            pass
    return found


def test_malformed_input_reports_line_numbers(tmp_path):
    tasks = tmp_path / "tasks.jsonl"
    good = json.dumps({"responses_create_params": {"input": "hi"}})
    tasks.write_text("\n".join([good, "{not json", good, json.dumps({"no_params": 1}), "[1, 2]"]) + "\n")
    result = invoke("collect", "--input", str(tasks), "--output", str(tmp_path / "o.jsonl"), "--agent", "a",
                    "--head", "http://127.0.0.1:9")
    assert result.exit_code == 2
    assert f"{tasks}:2: not valid JSON" in result.output
    assert f"{tasks}:4: missing 'responses_create_params'" in result.output
    assert f"{tasks}:5: a task must be a JSON object" in result.output
    assert not (tmp_path / "o.jsonl").exists()


def test_failing_rollouts_go_to_failures_file_and_run_goes_on(tmp_path):
    tasks = tmp_path / "tasks.jsonl"
    good = {"responses_create_params": {"input": "add"}, "initial_count": 0, "expected_count": 3}
    bad = {"responses_create_params": {"input": "add"}, "initial_count": "not a number", "expected_count": 3}
    tasks.write_text("\n".join(json.dumps(r) for r in [good, bad, good]) + "\n")
    out = tmp_path / "out.jsonl"
    with running_servers(counter_config()) as config:
        result = invoke("collect", "--input", str(tasks), "--output", str(out), "--agent", "agent",
                        "--head", config.head_url, "--no-profile")
    assert result.exit_code == 1  # some rollouts failed
    assert sorted(r["task_index"] for r in rows(out)) == [0, 2]
    failures = rows(tmp_path / "out.failures.jsonl")
    assert [(f["task_index"], f["rollout_index"]) for f in failures] == [(1, 0)]
    assert failures[0]["reason"] == "ServerHTTPError"
    assert "initial_count" in failures[0]["message"]


def test_unknown_agent_is_a_failure_not_a_crash(tmp_path):
    out = tmp_path / "out.jsonl"
    with running_servers(counter_config()) as config:
        result = invoke("collect", "--input", str(COUNTER_TASKS), "--output", str(out), "--agent", "agnt",
                        "--head", config.head_url, "--limit", "2", "--no-profile")
    assert result.exit_code == 1
    failures = rows(tmp_path / "out.failures.jsonl")
    assert len(failures) == 2
    assert "did you mean 'agent'" in failures[0]["message"]


def test_no_head_server_is_a_clear_error(tmp_path):
    result = invoke("collect", "--input", str(COUNTER_TASKS), "--output", str(tmp_path / "o.jsonl"),
                    "--agent", "agent", "--head", "http://127.0.0.1:9", "--no-profile")
    assert result.exit_code == 1  # a server does not answer
    assert "head" in result.output and "127.0.0.1:9" in result.output and "gym run" in result.output


def test_collect_against_gym_run_uses_its_only_agent(tmp_path, gym_run):
    """Issue 8, bug 9c: the README tour, `gym run CONFIG` then `gym collect --input --output` with no
    --agent and tasks without agent_ref, runs every task through the config's only agent."""
    head = gym_run(COUNTER_SCRIPTED)
    out = tmp_path / "out.jsonl"
    result = invoke("collect", "--input", str(COUNTER_TASKS), "--output", str(out), "--head", head, "--no-profile")
    assert result.exit_code == 0, result.output
    collected = rows(out)
    assert len(collected) == len(COUNTER_TASKS.read_text().splitlines())
    assert {row["agent"] for row in collected} == {"counter_agent"}
    assert all(row["final_count"] == row["initial_count"] + 3 for row in collected)
    assert rows(tmp_path / "out.failures.jsonl") == []


def test_several_agents_and_tasks_naming_none_is_a_usage_error(tmp_path):
    """With several agents, no --agent and tasks without agent_ref, collect stops before any rollout
    (exit 2) and names the agents; tasks that name theirs run."""
    config = {**counter_config(), "other_agent": {"plugin": "simple_agent", "model_server": "policy",
                                                  "resources_server": "counter"}}
    out = tmp_path / "out.jsonl"
    named = tmp_path / "named.jsonl"
    named.write_text("".join(json.dumps({**json.loads(line), "agent_ref": {"name": "other_agent"}}) + "\n"
                             for line in COUNTER_TASKS.read_text().splitlines()))
    with running_servers(config) as running:
        refused = invoke("collect", "--input", str(COUNTER_TASKS), "--output", str(out), "--head", running.head_url,
                         "--no-profile")
        accepted = invoke("collect", "--input", str(named), "--output", str(tmp_path / "named_out.jsonl"),
                          "--head", running.head_url, "--no-profile")
    assert refused.exit_code == 2, refused.output
    assert "2 agents (agent, other_agent)" in refused.output and "--agent NAME" in refused.output
    assert not out.exists()
    assert accepted.exit_code == 0, accepted.output
    assert {row["agent"] for row in rows(tmp_path / "named_out.jsonl")} == {"other_agent"}


def test_interrupted_collect_exits_130_and_keeps_its_rows(tmp_path):
    out = tmp_path / "out.jsonl"
    with running_servers(counter_config(delay_s=0.05)) as config:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gym_cli", "collect", "--input", str(COUNTER_TASKS), "--output", str(out), "--agent",
             "agent", "--repeats", "50", "--parallel", "2", "--no-profile", "--head", config.head_url],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (not out.exists() or len(out.read_bytes().splitlines()) < 4):
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "re-run the same command to resume" in err
    kept = rows(out)  # every line whole
    assert 4 <= len(kept) < len(COUNTER_TASKS.read_text().splitlines()) * 50


def test_sigterm_to_collect_serve_stops_the_servers_it_started(tmp_path):
    """`timeout`, a batch scheduler or `kill` sends SIGTERM: the servers `--serve` started must stop
    with it, not live on as orphans."""
    config = tmp_path / "slow.yaml"
    config.write_text(json.dumps({**counter_config(delay_s=30.0), "head_server": {"port": 0}}))
    out = tmp_path / "out.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-m", "gym_cli", "collect", "--serve", str(config), "--isolation", "none", "--input",
         str(COUNTER_TASKS), "--output", str(out), "--no-profile"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    seen = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        seen.append(line)
        if not line or "All servers ready" in line:
            break
    assert "All servers ready" in "".join(seen), "".join(seen)
    children = [int(p) for p in Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()]
    assert len(children) == 3  # counter, policy, agent
    proc.send_signal(signal.SIGTERM)
    output, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, "".join(seen) + output
    for pid in children:  # gone, or at most a zombie that was reaped already
        assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
