"""gym collect against real servers: rows, resume, kill -9, Ctrl+C, malformed input, failures, which agent;
and when things go wrong: one collection per output file, duplicates dropped on resume,
infrastructure failures retried within the run (a server killed with -9 and restarted on its port), a
per-rollout deadline enforced and passed down, and bad paths or options caught before anything starts."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from litestar import Litestar, Request, post

from gym_core.client import TIMEOUT_HEADER, ServerClient
from gym_core.config import GlobalConfig, load_config
from gym_core.head import build_head_app
from gym_core.options import ClientConfig
from gym_core.plugins import get_plugin_manager
from gym_core.serving import ServerThread, build_server
from gym_core.testing import running_servers, wait_until

from gym_cli.rollouts import CollectOptions, CollectSummary, collect_rollouts, run_async

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


def test_collect_writes_scored_rows_and_profile(tmp_path, gym):
    out = tmp_path / "out.jsonl"
    with running_servers(counter_config()) as config:
        result = gym(
            "collect",
            "--input",
            str(COUNTER_TASKS),
            "--output",
            str(out),
            "--agent",
            "agent",
            "--repeats",
            "3",
            "--parallel",
            "4",
            "--head",
            config.head_url,
            "--temperature",
            "0.3",
        )
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
        # The rollout's wall time, to the millisecond: what `gym report` plots.
        assert isinstance(row["latency_s"], float)
        assert row["latency_s"] == round(row["latency_s"], 3)
    profile = json.loads((tmp_path / "out.profile.json").read_text())
    assert profile["overall"]["num_rollouts"] == n_tasks * 3
    assert "pass@1" in profile["overall"]


def test_rerun_resumes_without_duplicates(tmp_path, gym):
    out = tmp_path / "out.jsonl"
    with running_servers(counter_config()) as config:
        first = gym(
            "collect",
            "--input",
            str(COUNTER_TASKS),
            "--output",
            str(out),
            "--agent",
            "agent",
            "--repeats",
            "2",
            "--head",
            config.head_url,
            "--no-profile",
        )
        assert first.exit_code == 0
        # A torn last line, as a kill during a write leaves it.
        with out.open("a") as f:
            f.write('{"task_index": 0, "rollout_ind')
        second = gym(
            "collect",
            "--input",
            str(COUNTER_TASKS),
            "--output",
            str(out),
            "--agent",
            "agent",
            "--repeats",
            "3",
            "--head",
            config.head_url,
            "--no-profile",
        )
    assert second.exit_code == 0, second.output
    keys = [(r["task_index"], r["rollout_index"]) for r in rows(out)]
    n_tasks = len(COUNTER_TASKS.read_text().splitlines())
    assert len(keys) == len(set(keys)) == n_tasks * 3
    assert "resuming" in second.output


def test_kill_9_midway_loses_nothing(tmp_path, gym):
    """Kill the collector hard while rollouts are in flight; the re-run ends with exactly tasks × repeats."""
    out = tmp_path / "out.jsonl"
    repeats = 20
    args = [
        "--input",
        str(COUNTER_TASKS),
        "--output",
        str(out),
        "--agent",
        "agent",
        "--repeats",
        str(repeats),
        "--parallel",
        "4",
        "--no-profile",
    ]
    with running_servers(counter_config(delay_s=0.02)) as config:
        proc = gym.start(
            "collect", *args, "--head", config.head_url, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (not out.exists() or len(out.read_bytes().splitlines()) < 10):
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        partial = len(rows_tolerant(out))
        n_tasks = len(COUNTER_TASKS.read_text().splitlines())
        assert 0 < partial < n_tasks * repeats
        result = gym("collect", *args, "--head", config.head_url)
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


def test_malformed_input_reports_line_numbers(tmp_path, gym):
    tasks = tmp_path / "tasks.jsonl"
    good = json.dumps({"responses_create_params": {"input": "hi"}})
    tasks.write_text("\n".join([good, "{not json", good, json.dumps({"no_params": 1}), "[1, 2]"]) + "\n")
    result = gym(
        "collect",
        "--input",
        str(tasks),
        "--output",
        str(tmp_path / "o.jsonl"),
        "--agent",
        "a",
        "--head",
        "http://127.0.0.1:9",
    )
    assert result.exit_code == 2
    assert f"{tasks}:2: not valid JSON" in result.output
    assert f"{tasks}:4: missing 'responses_create_params'" in result.output
    assert f"{tasks}:5: a task must be a JSON object" in result.output
    assert not (tmp_path / "o.jsonl").exists()


def test_failing_rollouts_go_to_failures_file_and_run_goes_on(tmp_path, gym):
    tasks = tmp_path / "tasks.jsonl"
    good = {"responses_create_params": {"input": "add"}, "initial_count": 0, "expected_count": 3}
    bad = {"responses_create_params": {"input": "add"}, "initial_count": "not a number", "expected_count": 3}
    tasks.write_text("\n".join(json.dumps(r) for r in [good, bad, good]) + "\n")
    out = tmp_path / "out.jsonl"
    with running_servers(counter_config()) as config:
        result = gym(
            "collect",
            "--input",
            str(tasks),
            "--output",
            str(out),
            "--agent",
            "agent",
            "--head",
            config.head_url,
            "--no-profile",
        )
    assert result.exit_code == 1  # some rollouts failed
    assert sorted(r["task_index"] for r in rows(out)) == [0, 2]
    failures = rows(tmp_path / "out.failures.jsonl")
    assert [(f["task_index"], f["rollout_index"]) for f in failures] == [(1, 0)]
    # The agent's typed reason (the counter refused the task's initial_count), not just "an HTTP error".
    assert failures[0]["reason"] == "validation_error" and failures[0]["status"] == 424
    assert "initial_count" in failures[0]["message"]


def test_unknown_agent_is_refused_before_any_rollout(tmp_path, gym):
    """--agent is checked against the running config first, not by failing every
    row; so is a task's agent_ref."""
    out = tmp_path / "out.jsonl"
    named = tmp_path / "named.jsonl"
    named.write_text(json.dumps({"responses_create_params": {"input": "hi"}, "agent_ref": {"name": "agnet"}}) + "\n")
    with running_servers(counter_config()) as config:
        result = gym(
            "collect",
            "--input",
            str(COUNTER_TASKS),
            "--output",
            str(out),
            "--agent",
            "agnt",
            "--head",
            config.head_url,
            "--limit",
            "2",
            "--no-profile",
        )
        not_agent = gym(
            "collect",
            "--input",
            str(COUNTER_TASKS),
            "--output",
            str(out),
            "--agent",
            "counter",
            "--head",
            config.head_url,
            "--no-profile",
        )
        by_ref = gym("collect", "--input", str(named), "--output", str(out), "--head", config.head_url, "--no-profile")
    assert result.exit_code == 2, result.output
    assert "--agent: no server instance named 'agnt' (did you mean 'agent'?)" in result.output
    assert "agents: agent" in result.output
    assert not_agent.exit_code == 2 and "'counter' is a resources server, not an agent" in not_agent.output
    assert by_ref.exit_code == 2 and "agent_ref: no server instance named 'agnet'" in by_ref.output
    assert not out.exists() and not (tmp_path / "out.failures.jsonl").exists()


def test_no_head_server_is_a_clear_error(tmp_path, gym):
    result = gym(
        "collect",
        "--input",
        str(COUNTER_TASKS),
        "--output",
        str(tmp_path / "o.jsonl"),
        "--agent",
        "agent",
        "--head",
        "http://127.0.0.1:9",
        "--no-profile",
    )
    assert result.exit_code == 2  # nothing answers at the head: a usage error, as --help says (nothing was collected)
    assert "head" in result.output and "127.0.0.1:9" in result.output and "gym run" in result.output


def test_collect_against_gym_run_uses_its_only_agent(tmp_path, gym_run, gym):
    """The README tour, `gym run CONFIG` then `gym collect --input --output` with no
    --agent and tasks without agent_ref, runs every task through the config's only agent."""
    head = gym_run(COUNTER_SCRIPTED)
    out = tmp_path / "out.jsonl"
    result = gym("collect", "--input", str(COUNTER_TASKS), "--output", str(out), "--head", head, "--no-profile")
    assert result.exit_code == 0, result.output
    collected = rows(out)
    assert len(collected) == len(COUNTER_TASKS.read_text().splitlines())
    assert {row["agent"] for row in collected} == {"counter_agent"}
    assert all(row["final_count"] == row["initial_count"] + 3 for row in collected)
    assert not (tmp_path / "out.failures.jsonl").exists()  # nothing failed: no failures file


def test_several_agents_and_tasks_naming_none_is_a_usage_error(tmp_path, gym):
    """With several agents, no --agent and tasks without agent_ref, collect stops before any rollout
    (exit 2) and names the agents; tasks that name theirs run."""
    config = {
        **counter_config(),
        "other_agent": {"plugin": "simple_agent", "model_server": "policy", "resources_server": "counter"},
    }
    out = tmp_path / "out.jsonl"
    named = tmp_path / "named.jsonl"
    named.write_text(
        "".join(
            json.dumps({**json.loads(line), "agent_ref": {"name": "other_agent"}}) + "\n"
            for line in COUNTER_TASKS.read_text().splitlines()
        )
    )
    with running_servers(config) as running:
        refused = gym(
            "collect", "--input", str(COUNTER_TASKS), "--output", str(out), "--head", running.head_url, "--no-profile"
        )
        accepted = gym(
            "collect",
            "--input",
            str(named),
            "--output",
            str(tmp_path / "named_out.jsonl"),
            "--head",
            running.head_url,
            "--no-profile",
        )
    assert refused.exit_code == 2, refused.output
    assert "2 agents (agent, other_agent)" in refused.output and "--agent NAME" in refused.output
    assert not out.exists()
    assert accepted.exit_code == 0, accepted.output
    assert {row["agent"] for row in rows(tmp_path / "named_out.jsonl")} == {"other_agent"}


def test_interrupted_collect_exits_130_and_keeps_its_rows(tmp_path, gym):
    out = tmp_path / "out.jsonl"
    with running_servers(counter_config(delay_s=0.05)) as config:
        proc = gym.start(
            "collect",
            "--input",
            str(COUNTER_TASKS),
            "--output",
            str(out),
            "--agent",
            "agent",
            "--repeats",
            "50",
            "--parallel",
            "2",
            "--no-profile",
            "--head",
            config.head_url,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
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


def test_sigterm_to_collect_serve_stops_the_servers_it_started(tmp_path, gym):
    """`timeout`, a batch scheduler or `kill` sends SIGTERM: the servers `--serve` started must stop
    with it, not live on as orphans."""
    config = tmp_path / "slow.yaml"
    config.write_text(json.dumps({**counter_config(delay_s=30.0), "head_server": {"port": 0}}))
    out = tmp_path / "out.jsonl"
    proc = gym.start(
        "collect",
        "--serve",
        str(config),
        "--isolation",
        "none",
        "--input",
        str(COUNTER_TASKS),
        "--output",
        str(out),
        "--no-profile",
    )
    seen = proc.read_until("All servers ready", 120)
    # Children are listed under the thread that forked them (the supervisor's spawner thread): read every thread's.
    children = [
        int(p) for task in Path(f"/proc/{proc.pid}/task").iterdir() for p in (task / "children").read_text().split()
    ]
    assert len(children) == 3  # counter, policy, agent
    proc.send_signal(signal.SIGTERM)
    output, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, "".join(seen) + output
    for pid in children:  # gone, or at most a zombie that was reaped already
        assert (
            not Path(f"/proc/{pid}").exists()
            or "Z" in Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        )


# --- when things go wrong ---------------------------------------------------------------------------

N_TASKS = len(COUNTER_TASKS.read_text().splitlines())


def collect_args(out: Path, head: str, *extra: str) -> list[str]:
    return [
        "collect",
        "--input",
        str(COUNTER_TASKS),
        "--output",
        str(out),
        "--agent",
        "agent",
        "--head",
        head,
        "--no-profile",
        *extra,
    ]


def open_files(pid: int) -> set[str]:
    found = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            found.add(os.readlink(fd))
    return found


# --- one collection per output file ----------------------------------------------------------------


def test_second_collect_on_the_same_output_fails_fast_naming_the_first(tmp_path, gym):
    """Two real processes: while the first collects into out.jsonl, a second on the same file exits 2
    at once, saying who holds it; the first goes on undisturbed."""
    out = tmp_path / "out.jsonl"
    with running_servers(counter_config(delay_s=20.0)) as config:  # the first stays busy
        first = gym.start(
            *collect_args(out, config.head_url, "--limit", "1"), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        try:
            # The first is collecting once it holds the output (today: the output file, open to append).
            wait_until(
                lambda: first.poll() is not None or any(p.startswith(str(out)) for p in open_files(first.pid)),
                "the first collection to open its output",
            )
            assert first.poll() is None
            second = gym.run(*collect_args(out, config.head_url, "--limit", "1"), timeout_s=60)
        finally:
            first.send_signal(signal.SIGINT)
            first.communicate(timeout=60)
    assert second.returncode == 2, second.stderr
    assert "being written by another collection" in second.stderr
    assert f"pid {first.pid} on {socket.gethostname()}" in second.stderr
    assert "gym collect" in second.stderr and "since" in second.stderr
    assert "Traceback" not in second.stderr
    assert not out.exists() or rows(out) == []  # the second wrote nothing


def test_the_lock_is_released_when_its_holder_is_killed(tmp_path, gym):
    """kill -9 cannot leave a stale lock: the next collection on the same output runs."""
    out = tmp_path / "out.jsonl"
    with running_servers(counter_config(delay_s=20.0)) as config:
        first = gym.start(
            *collect_args(out, config.head_url, "--limit", "1"), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        wait_until(lambda: any(p.startswith(str(out)) for p in open_files(first.pid)), "the first to open its output")
        first.kill()
        first.wait()
    with running_servers(counter_config()) as config:
        result = gym(
            "collect",
            "--input",
            str(COUNTER_TASKS),
            "--output",
            str(out),
            "--agent",
            "agent",
            "--head",
            config.head_url,
            "--no-profile",
        )
    assert result.exit_code == 0, result.output
    assert len(rows(out)) == N_TASKS


def test_resume_drops_duplicate_rows_and_says_how_many(tmp_path, gym):
    out = tmp_path / "out.jsonl"
    with running_servers(counter_config()) as config:
        args = [
            "collect",
            "--input",
            str(COUNTER_TASKS),
            "--output",
            str(out),
            "--agent",
            "agent",
            "--head",
            config.head_url,
            "--no-profile",
        ]
        assert gym(*args).exit_code == 0
        lines = out.read_text().splitlines(keepends=True)
        with out.open("a") as f:  # what two concurrent collections used to leave
            f.writelines([lines[0], lines[2], lines[0]])
        second = gym(*args, "--repeats", "2")
    assert second.exit_code == 0, second.output
    assert "dropped 3 duplicate rows" in second.output
    keys = [(r["task_index"], r["rollout_index"]) for r in rows(out)]
    assert len(keys) == len(set(keys)) == N_TASKS * 2


# --- infrastructure failures are retried within the run (the collector's half) -----------------------


@contextlib.contextmanager
def servers_except(config: dict[str, Any], missing: str) -> Iterator[GlobalConfig]:
    """The head and every instance of ``config`` in threads, except ``missing``: the head lists it,
    nothing answers on its port."""
    plugins = get_plugin_manager()
    global_config = load_config(
        base={"head_server": {"port": 0}, **config},
        env_file=None,
        server_types=plugins.servers(),
        load_errors=plugins.load_errors,
    )
    threads = [ServerThread(build_head_app(global_config), port=global_config.head_port).start()]
    try:
        for name, instance in global_config.instances.items():
            if name != missing:
                threads.append(
                    ServerThread(
                        build_server(global_config, name, plugins).build_app(), instance.host, instance.port
                    ).start()
                )
        yield global_config
    finally:
        for thread in reversed(threads):
            thread.stop()


@pytest.mark.parametrize("victim", ["agent", "counter", "policy"])
def test_kill_9_of_a_server_mid_collection_ends_with_every_rollout_once_in_one_run(tmp_path, victim, gym):
    """`gym collect --serve`, one of its servers killed with -9 while rollouts are in flight and
    restarted by the launcher on its port: the rollouts that failed meanwhile are retried, and the
    same run ends with every (task, rollout) exactly once and no failure."""
    config = tmp_path / "servers.yaml"
    config.write_text(json.dumps({**counter_config(delay_s=0.05), "head_server": {"port": 0}}))
    out = tmp_path / "out.jsonl"
    repeats = 8
    proc = gym.start(
        "collect",
        "--serve",
        str(config),
        "--isolation",
        "none",
        "--input",
        str(COUNTER_TASKS),
        "--output",
        str(out),
        "--agent",
        "agent",
        "--repeats",
        str(repeats),
        "--parallel",
        "4",
        "--retries",
        "6",
        "--retry-backoff",
        "1",
        "--no-profile",
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        wait_until(
            lambda: proc.poll() is not None or (out.exists() and len(out.read_bytes().splitlines()) >= 4),
            "the first rows",
            timeout_s=180,
        )
        assert proc.poll() is None
        children = [
            int(p) for task in Path(f"/proc/{proc.pid}/task").iterdir() for p in (task / "children").read_text().split()
        ]
        [pid] = [
            pid for pid in children if f"GYM_INSTANCE={victim}\0".encode() in Path(f"/proc/{pid}/environ").read_bytes()
        ]
        os.kill(pid, signal.SIGKILL)
        _, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    keys = [(r["task_index"], r["rollout_index"]) for r in rows(out)]
    assert len(keys) == len(set(keys)) == N_TASKS * repeats
    assert not (tmp_path / "out.failures.jsonl").exists()  # nothing failed: no failures file
    assert "were retried" in err


def test_sessions_lost_in_a_restart_are_retried_not_scored(tmp_path, gym):
    """The resources server restarts while rollouts wait on the model: their sessions are gone, the
    agent fails them with a typed reason (session_expired / invalid_session, not a 5xx), and the
    collector retries them in the same run: every row is scored on its own seeded state."""
    out = tmp_path / "out.jsonl"
    plugins = get_plugin_manager()
    config = load_config(
        base={"head_server": {"port": 0}, **counter_config(delay_s=2.0)},
        env_file=None,
        server_types=plugins.servers(),
        load_errors=plugins.load_errors,
    )
    counter = config.instances["counter"]
    threads = [ServerThread(build_head_app(config), port=config.head_port).start()]
    for name in ("policy", "agent"):
        instance = config.instances[name]
        threads.append(
            ServerThread(build_server(config, name, plugins).build_app(), instance.host, instance.port).start()
        )
    first = build_server(config, "counter", plugins)
    restarted = None
    try:
        counter_thread = ServerThread(first.build_app(), counter.host, counter.port).start()
        collector = gym.start(
            *collect_args(
                out, config.head_url, "--limit", "3", "--parallel", "3", "--retries", "2", "--retry-backoff", "0.1"
            ),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        wait_until(lambda: len(first.sessions) >= 3, "three seeded sessions")  # the rollouts now wait on the model
        counter_thread.stop()
        restarted = ServerThread(
            build_server(config, "counter", plugins).build_app(), counter.host, counter.port
        ).start()
        _, err = collector.communicate(timeout=120)
    finally:
        for thread in [restarted, *reversed(threads)]:
            if thread is not None:
                thread.stop()
    assert collector.returncode == 0, err
    collected = rows(out)
    assert sorted(r["task_index"] for r in collected) == [0, 1, 2]
    assert all(row["final_count"] == row["initial_count"] + 3 for row in collected)  # never a blank state
    assert "were retried" in err


def test_a_rollout_is_retried_at_most_n_times_then_recorded_as_failed(tmp_path, gym):
    """The agent never comes up: each rollout is tried 1 + --retries times, then goes to the failures
    file with its typed reason and the number of attempts."""
    out = tmp_path / "out.jsonl"
    with servers_except(counter_config(), "agent") as config:
        result = gym(
            "collect",
            "--input",
            str(COUNTER_TASKS),
            "--output",
            str(out),
            "--agent",
            "agent",
            "--head",
            config.head_url,
            "--limit",
            "2",
            "--retries",
            "2",
            "--retry-backoff",
            "0.01",
            "--no-profile",
        )
    assert result.exit_code == 1, result.output
    failures = rows(tmp_path / "out.failures.jsonl")
    assert sorted((f["task_index"], f["rollout_index"]) for f in failures) == [(0, 0), (1, 0)]
    assert {f["reason"] for f in failures} == {"ServerUnavailableError"}
    assert {f["attempts"] for f in failures} == {3}
    assert "4 attempts failed for an infrastructure reason and were retried" in result.output


def test_a_task_error_is_not_retried(tmp_path, gym):
    """A 4xx (the task itself is bad) fails at once: retrying cannot help."""
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(
        json.dumps({"responses_create_params": {"input": "add"}, "initial_count": "x", "expected_count": 3}) + "\n"
    )
    with running_servers(counter_config()) as config:
        result = gym(
            "collect",
            "--input",
            str(tasks),
            "--output",
            str(tmp_path / "out.jsonl"),
            "--agent",
            "agent",
            "--head",
            config.head_url,
            "--retries",
            "3",
            "--no-profile",
        )
    assert result.exit_code == 1, result.output
    [failure] = rows(tmp_path / "out.failures.jsonl")
    assert failure["attempts"] == 1 and failure["status"] < 500


# --- the per-rollout deadline (the collector's half) ---------------------------------------------------


def test_the_rollout_deadline_is_enforced(tmp_path, gym):
    """The model is slow (3 s per answer): with --rollout-timeout 1 the rollout fails as a timeout
    rather than wait for it (the collector's old limits allowed two hours)."""
    out = tmp_path / "out.jsonl"
    with running_servers(counter_config(delay_s=3.0)) as config:
        result = gym.run(*collect_args(out, config.head_url, "--limit", "1", "--rollout-timeout", "1"), timeout_s=25)
    assert result.returncode == 1, result.stderr
    [failure] = rows(tmp_path / "out.failures.jsonl")
    assert failure["reason"] == "ServerTimeoutError"
    assert not rows(out)


def test_rollout_timeout_must_be_positive(tmp_path, gym):
    for bad in ("0", "-5"):
        result = gym(
            "collect",
            "--input",
            str(COUNTER_TASKS),
            "--output",
            str(tmp_path / "o.jsonl"),
            "--agent",
            "agent",
            "--head",
            "http://127.0.0.1:9",
            "--rollout-timeout",
            bad,
        )
        assert result.exit_code == 2
        assert "--rollout-timeout" in result.output


def test_the_deadline_is_passed_down_with_each_run(tmp_path):
    """Each /run carries what is left of its rollout's deadline (x-gym-timeout), so that the agent
    and the servers behind it can stop in time; a recording endpoint stands in for the agent."""
    seen: list[str | None] = []

    @post("/run")
    async def run(request: Request) -> dict[str, float]:
        seen.append(request.headers.get(TIMEOUT_HEADER))
        return {"reward": 1.0}

    tasks = [{"responses_create_params": {"input": "hi"}}] * 3
    options = CollectOptions(tmp_path / "out.jsonl", tmp_path / "failures.jsonl", "agent", rollout_timeout_s=5.0)

    async def collect(url: str) -> CollectSummary:
        async with ServerClient(urls={"agent": url}, config=ClientConfig(max_attempts=1)) as client:
            return await collect_rollouts(client, tasks, [(t, 0) for t in range(3)], options, CollectSummary())

    with ServerThread(Litestar([run])) as agent:
        summary = run_async(collect(agent.url))
    assert summary.done == 3
    assert len(seen) == 3 and all(value is not None and 0 < float(value) <= 5.0 for value in seen), seen


# --- bad paths and options are caught before anything starts --------------------------------------------


def unwritable_path(tmp_path: Path) -> Path:
    """A path no one may create a file at: sysfs refuses even root (who ignores permission bits)."""
    if not Path("/sys/kernel").is_dir():
        pytest.skip("needs sysfs")
    return Path("/sys/kernel/gym-collect-test.jsonl")


@pytest.mark.parametrize("case", ["directory", "under a file", "unwritable"])
def test_an_unusable_output_is_refused_before_the_servers_start(tmp_path, case, gym):
    """Checked before --serve starts anything: the servers would otherwise start (minutes, for a
    real model) only for a traceback at the first row."""
    (tmp_path / "a_file").write_text("x")
    output, message = {
        "directory": (tmp_path, "is a directory"),
        "under a file": (tmp_path / "a_file" / "out.jsonl", f"{tmp_path / 'a_file'} is a file, not a directory"),
        "unwritable": (unwritable_path(tmp_path), "cannot write it"),
    }[case]
    config = tmp_path / "servers.yaml"
    config.write_text(json.dumps({**counter_config(), "head_server": {"port": 0}}))
    result = gym(
        "collect",
        "--serve",
        str(config),
        "--isolation",
        "none",
        "--input",
        str(COUNTER_TASKS),
        "--output",
        str(output),
        "--no-profile",
    )
    assert result.exit_code == 2, result.output
    assert f"--output {output}" in result.output and message in result.output
    assert "All servers ready" not in result.output


def test_a_bad_port_is_a_config_error_not_a_traceback(tmp_path, gym):
    config = tmp_path / "servers.yaml"
    config.write_text("counter:\n  plugin: counter\n  port: 11803x\nhead_server:\n  port: 0\n")
    result = gym("run", str(config), "--isolation", "none")
    assert result.exit_code == 2, result.output
    assert "counter.port: '11803x' is not a port number" in result.output
    head = gym("run", str(config), "--isolation", "none", "counter.port=0", "head_server.port=70000")
    assert head.exit_code == 2, head.output
    assert "head_server.port: 70000 is out of range" in head.output


def test_a_misspelt_option_reads_as_an_unknown_option(tmp_path, gym):
    """`gym run --isolaton none CONFIG` used to read as "config file not found: --isolaton"."""
    result = gym("run", "--isolaton", "none", str(COUNTER_SCRIPTED))
    assert result.exit_code == 2, result.output
    assert "No such option '--isolaton'" in result.output and "Did you mean '--isolation'?" in result.output
    assert "config file not found" not in result.output


# --- start-up -------------------------------------------------------------------------------------------


def test_defining_the_commands_imports_none_of_what_running_them_needs():
    """`gym --help` imports every command module (and `gym plugin list` all of them too): theirs must
    leave rich, the launcher, the catalog (tomlkit), asyncio, the collector, the venv manager and the
    server stack to the moment a command runs. Fix: import those inside the command's function (and
    name types under TYPE_CHECKING)."""
    heavy = [
        "rich",
        "gym_cli.launch",
        "tomlkit",
        "asyncio",
        "gym_cli.rollouts",
        "gym_core.client",
        "gym_cli.catalog",
        "gym_cli.sources",
        "gym_cli.venvs",
        "gym_cli.plugin_tests",
        "gym_cli.report",
        "gym_core.serving",
        "litestar",
        "uvicorn",
    ]
    code = (
        "import json, pkgutil, sys\nimport gym_cli.commands\nfrom gym_cli.main import cli\n"
        "names = [m.name for m in pkgutil.iter_modules(gym_cli.commands.__path__)]\n"
        "for name in names: __import__('gym_cli.commands.' + name)\n"
        "cli()\n"
        f"print(json.dumps(names))\nprint([m for m in {heavy!r} if m in sys.modules])"
    )
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    modules, imported = loaded.stdout.splitlines()
    assert {"collect", "plugin", "plugin_new", "report", "test", "workspace"} <= set(
        json.loads(modules)
    )  # all were seen
    assert imported == "[]", loaded.stdout + loaded.stderr


def test_the_collector_tunes_its_gc_without_the_server_stack():
    """`run_async` tunes the garbage collector from the leaf gym_core.process_tuning, not gym_core.serving."""
    code = (
        "import sys\nfrom gym_cli.rollouts import run_async\n"
        "async def nothing(): return 7\n"
        "assert run_async(nothing()) == 7\n"
        "print([m for m in ('gym_core.serving', 'litestar', 'uvicorn') if m in sys.modules])"
    )
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert loaded.stdout.strip() == "[]", loaded.stdout + loaded.stderr


def test_the_collector_raises_its_open_files_limit():
    """One connection per rollout in flight: run_async, which runs `gym collect`, lifts the soft limit
    on open files to the hard one (gym_core.process_tuning)."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    low = min(
        (hard if hard != resource.RLIM_INFINITY else 1 << 20) - 1, max(256, len(os.listdir("/proc/self/fd")) + 64)
    )
    resource.setrlimit(resource.RLIMIT_NOFILE, (low, hard))

    async def soft_limit() -> int:
        return resource.getrlimit(resource.RLIMIT_NOFILE)[0]

    try:
        assert run_async(soft_limit()) > low
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
