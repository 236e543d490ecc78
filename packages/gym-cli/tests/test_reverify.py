"""gym reverify against real servers: rewards recomputed by a changed verifier with no model call,
stateful tool calls replayed, --only-failed, resuming after Ctrl+C, infrastructure failures retried
then written aside, and bad rows or missing environments refused before anything runs."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest

from gym_core import Session, tool
from gym_core.client import ServerClient
from gym_core.config import GlobalConfig, load_config
from gym_core.head import build_head_app
from gym_core.options import ClientConfig
from gym_core.plugins import get_plugin_manager
from gym_core.servers import GymServer
from gym_core.serving import ServerThread, build_server

from gym_cli.rollouts import CollectOptions, CollectSummary, collect_rollouts, pending_pairs, run_async
from gym_counter.server import CounterServer, CounterVerifyRequest, CounterVerifyResponse

ROOT = Path(__file__).resolve().parents[3]
COUNTER_TASKS = ROOT / "plugins/resources/counter/data/example.jsonl"
TASKS = [json.loads(line) for line in COUNTER_TASKS.read_text().splitlines()]
REPEATS = 2
# The scripted model adds 3 to the counter, then answers: reward 1 where expected = initial + 3.
TURNS = [{"tool_calls": [{"name": "increment_counter", "arguments": {"count": 3}}]}, {"text": "added 3"}]
CONFIG = {
    "counter": {"plugin": "counter"},
    "policy": {"plugin": "scripted", "turns": TURNS},
    "agent": {"plugin": "simple_agent", "model_server": "policy", "resources_server": "counter"},
}


class ShiftedCounter(CounterServer):
    """The counter with a changed verifier: the reference answer is now ``expected_count + 1``. Counts
    its verifications, and can be slowed down (``delay_s``) to be interrupted mid-run."""

    delay_s = 0.0

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.verified = 0

    async def verify(self, session, body: CounterVerifyRequest) -> CounterVerifyResponse:
        self.verified += 1
        await asyncio.sleep(self.delay_s)
        final = self._state(session)["count"]
        return CounterVerifyResponse(reward=float(final == body.expected_count + 1), final_count=final)


class DoublingCounter(CounterServer):
    """The counter with a changed tool: ``increment_counter`` adds twice the count."""

    @tool
    async def increment_counter(self, session: Session, count: int) -> dict:
        """Add twice `count` to the counter and return its new value."""
        return await super().increment_counter(session, 2 * count)


def shifted_reward(task: dict) -> float:
    return float(task["initial_count"] + 3 == task["expected_count"] + 1)


@contextlib.contextmanager
def serve(
    config: dict, classes: dict[str, type[GymServer]] | None = None
) -> Iterator[tuple[GlobalConfig, dict[str, GymServer]]]:
    """The head and every instance of ``config`` in threads, an instance in ``classes`` served by that
    class instead of its plugin's (a verifier changed since the collection); yields the server objects."""
    plugins = get_plugin_manager()
    global_config = load_config(
        base={"head_server": {"port": 0}, **config},
        env_file=None,
        server_types=plugins.servers(),
        load_errors=plugins.load_errors,
    )
    threads = [ServerThread(build_head_app(global_config), port=global_config.head_port).start()]
    servers: dict[str, GymServer] = {}
    try:
        for name, instance in global_config.instances.items():
            server = build_server(global_config, name, plugins)
            if name in (classes or {}):
                server = classes[name](server.config, name=name, global_config=global_config)
            servers[name] = server
            threads.append(ServerThread(server.build_app(), instance.host, instance.port).start())
        yield global_config, servers
    finally:
        for thread in reversed(threads):
            thread.stop()


def calls_of(server: GymServer, method: str) -> list[object]:
    """Record each call of ``server.<method>`` (the handler looks it up on the instance per request)."""
    calls: list[object] = []
    original = getattr(server, method)

    async def recording(*args, **kwargs):
        calls.append(args)
        return await original(*args, **kwargs)

    setattr(server, method, recording)
    return calls


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def by_pair(found: list[dict]) -> dict[tuple[int, int], dict]:
    return {(r["task_index"], r["rollout_index"]): r for r in found}


@pytest.fixture(scope="module")
def collected(tmp_path_factory) -> Path:
    """A rollouts file of the counter tasks, REPEATS each, collected with the scripted model by the
    collection engine (gym collect's own tests cover the command)."""
    out = tmp_path_factory.mktemp("collected") / "rollouts.jsonl"
    options = CollectOptions(out, out.with_name("failures.jsonl"), agent="agent", repeats=REPEATS)

    async def collect(config: GlobalConfig) -> CollectSummary:
        async with ServerClient(config, config=ClientConfig(max_attempts=1)) as client:
            return await collect_rollouts(
                client, TASKS, pending_pairs(len(TASKS), REPEATS, set()), options, CollectSummary()
            )

    with serve(CONFIG) as (config, _):
        summary = run_async(collect(config))
    assert summary.done == len(TASKS) * REPEATS and summary.failed == 0
    assert [r["reward"] for r in sorted(rows(out), key=lambda r: r["task_index"])][::REPEATS] == [
        float(t["initial_count"] + 3 == t["expected_count"]) for t in TASKS
    ]
    return out


def test_changed_verifier_rescores_every_row_without_calling_the_model(collected, tmp_path, gym):
    out = tmp_path / "reverified.jsonl"
    with serve(CONFIG, {"counter": ShiftedCounter}) as (config, servers):
        model_calls = calls_of(servers["policy"], "responses")
        agent_runs = calls_of(servers["agent"], "run")
        result = gym("reverify", str(collected), "--output", str(out), "--head", config.head_url)
    assert result.exit_code == 0, result.output
    assert model_calls == [] and agent_runs == []  # the recorded responses were verified, nothing regenerated
    assert servers["counter"].verified == len(TASKS) * REPEATS
    before, after = by_pair(rows(collected)), by_pair(rows(out))
    assert after.keys() == before.keys()
    for pair, new in after.items():
        old, task = before[pair], TASKS[pair[0]]
        assert new["reward"] == shifted_reward(task)
        assert new["previous_reward"] == old["reward"]
        # The replayed increment_counter(3) brought the new session to the recorded state.
        assert new["final_count"] == task["initial_count"] + 3
        assert {k: v for k, v in new.items() if k not in ("reward", "previous_reward")} == {
            k: v for k, v in old.items() if k != "reward"
        }
    assert list(after[0, 0])[list(after[0, 0]).index("reward") + 1] == "previous_reward"
    up = sum(shifted_reward(t) > float(t["initial_count"] + 3 == t["expected_count"]) for t in TASKS) * REPEATS
    down = sum(shifted_reward(t) < float(t["initial_count"] + 3 == t["expected_count"]) for t in TASKS) * REPEATS
    assert (up, down) == (4, 2)  # tasks 1 and 3 now pass, task 0 no longer does
    assert f"{len(TASKS) * REPEATS} rows re-verified ({up} rewards up, {down} down)" in result.output
    assert "0.167" in result.output and "0.333" in result.output  # mean reward before → after
    assert "counter" in result.output  # the diff's row per environment
    assert not (tmp_path / "reverified.failures.jsonl").exists()  # nothing failed: no failures file


def test_only_failed_copies_the_passed_rows_unchanged(collected, tmp_path, gym):
    out = tmp_path / "reverified.jsonl"
    with serve(CONFIG, {"counter": ShiftedCounter}) as (config, servers):
        result = gym("reverify", str(collected), "--output", str(out), "--only-failed", "--head", config.head_url)
    assert result.exit_code == 0, result.output
    before, after = by_pair(rows(collected)), by_pair(rows(out))
    assert after.keys() == before.keys()
    passed = [pair for pair, row in before.items() if row["reward"] == 1.0]
    assert passed and servers["counter"].verified == len(before) - len(passed)
    for pair, new in after.items():
        if pair in passed:
            assert new == before[pair]  # copied as it was: the new verifier would have failed it
        else:
            assert new["reward"] == shifted_reward(TASKS[pair[0]]) and new["previous_reward"] == 0.0
    assert f"{len(passed)} copied unchanged" in result.output


def test_replay_follows_the_environment_and_reports_changed_tools(collected, tmp_path, gym):
    """Rows of `counter` re-verified on the only instance of that environment running now (another
    name), whose increment_counter changed: the replayed state follows the new tool, and the rows whose
    tool outputs differ from the recorded ones are reported."""
    out = tmp_path / "reverified.jsonl"
    config = {"counter_v2": {"plugin": "counter"}}
    with serve(config, {"counter_v2": DoublingCounter}) as (running, _):
        result = gym("reverify", str(collected), "--output", str(out), "--head", running.head_url)
    assert result.exit_code == 0, result.output
    for pair, new in by_pair(rows(out)).items():
        task = TASKS[pair[0]]
        assert new["final_count"] == task["initial_count"] + 6
        assert new["reward"] == float(task["initial_count"] + 6 == task["expected_count"])
        assert new["resources_server"] == "counter"  # the row still says what verified it first
    assert f"{len(TASKS) * REPEATS} rows verified by counter are re-verified by counter_v2" in result.output
    assert f"{len(TASKS) * REPEATS} rows got other tool outputs than they recorded" in result.output


def test_interrupted_reverify_resumes_without_repeating_rows(collected, tmp_path, gym):
    out = tmp_path / "reverified.jsonl"
    total = len(TASKS) * REPEATS
    with serve(CONFIG, {"counter": ShiftedCounter}) as (config, servers):
        servers["counter"].delay_s = 0.3
        proc = gym.start(
            "reverify",
            str(collected),
            "--output",
            str(out),
            "--parallel",
            "1",
            "--head",
            config.head_url,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (not out.exists() or len(out.read_bytes().splitlines()) < 2):
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 130, err
        assert "re-run the same command to resume" in err
        kept = rows(out)
        assert 2 <= len(kept) < total
        servers["counter"].delay_s = 0.0
        verified_before = servers["counter"].verified
        result = gym("reverify", str(collected), "--output", str(out), "--head", config.head_url)
    assert result.exit_code == 0, result.output
    assert f"resuming: {len(kept)} of {total} rows already in" in result.output
    assert servers["counter"].verified - verified_before == total - len(kept)  # the kept rows were not redone
    after = rows(out)
    assert len(after) == len(by_pair(after)) == total
    assert all(r["reward"] == shifted_reward(TASKS[r["task_index"]]) for r in after)


def test_infrastructure_failures_are_retried_then_written_aside_never_scored(collected, tmp_path, gym):
    """The head lists the counter but nothing answers on its port: each row is tried 1 + --retries
    times, then goes to the failures file with its typed reason; the command exits 1."""
    out = tmp_path / "reverified.jsonl"
    plugins = get_plugin_manager()
    config = load_config(
        base={"head_server": {"port": 0}, "counter": {"plugin": "counter"}},
        env_file=None,
        server_types=plugins.servers(),
        load_errors=plugins.load_errors,
    )
    with ServerThread(build_head_app(config), port=config.head_port):
        result = gym(
            "reverify",
            str(collected),
            "--output",
            str(out),
            "--head",
            config.head_url,
            "--retries",
            "1",
            "--retry-backoff",
            "0",
        )
    assert result.exit_code == 1, result.output
    assert rows(out) == []
    failures = rows(tmp_path / "reverified.failures.jsonl")
    assert sorted((f["task_index"], f["rollout_index"]) for f in failures) == sorted(by_pair(rows(collected)))
    assert {f["reason"] for f in failures} == {"ServerUnavailableError"} and {f["attempts"] for f in failures} == {2}
    assert "re-run the same command to retry them" in result.output


def test_a_row_the_environment_refuses_fails_at_once_and_the_others_go_on(collected, tmp_path, gym):
    source = tmp_path / "rollouts.jsonl"
    kept = rows(collected)[:3]
    kept[1]["initial_count"] = "seven"  # the counter answers 422: the row, not the server, is wrong
    source.write_text("".join(json.dumps(r) + "\n" for r in kept))
    out = tmp_path / "reverified.jsonl"
    with serve({"counter": {"plugin": "counter"}}) as (config, _):
        result = gym("reverify", str(source), "--output", str(out), "--head", config.head_url, "--retries", "3")
    assert result.exit_code == 1, result.output
    assert sorted(by_pair(rows(out))) == sorted((r["task_index"], r["rollout_index"]) for r in (kept[0], kept[2]))
    [failure] = rows(tmp_path / "reverified.failures.jsonl")
    assert failure["line"] == 2 and failure["attempts"] == 1 and failure["status"] == 422
    assert "initial_count" in failure["message"]


def test_rows_whose_environment_is_not_running_stop_before_any_row(collected, tmp_path, gym):
    out = tmp_path / "reverified.jsonl"
    with serve(
        {
            "policy": {"plugin": "scripted", "turns": TURNS},
            "other": {"plugin": "counter"},
            "other2": {"plugin": "counter"},
        }
    ) as (config, servers):
        missing = gym("reverify", str(collected), "--output", str(out), "--head", config.head_url)
        unknown = gym(
            "reverify", str(collected), "--output", str(out), "--head", config.head_url, "--resources-server", "otehr"
        )
        wrong_kind = gym(
            "reverify", str(collected), "--output", str(out), "--head", config.head_url, "--resources-server", "policy"
        )
    assert missing.exit_code == 2, missing.output
    assert f"lines 1, 2, 3, 4, 5, 6, 7, 8 and {len(TASKS) * REPEATS - 8} more" in missing.output
    assert (
        "were verified by 'counter' (environment counter), which is not running and several instances" in missing.output
    )
    assert "running resources servers: other (counter), other2 (counter)" in missing.output
    assert unknown.exit_code == 2 and "no server instance named 'otehr' (did you mean 'other'?)" in unknown.output
    assert wrong_kind.exit_code == 2 and "'policy' is a model server, not a resources server" in wrong_kind.output
    assert not out.exists() and not (tmp_path / "reverified.failures.jsonl").exists()


def test_bad_rows_are_named_by_line_before_anything_runs(collected, tmp_path, gym):
    good = rows(collected)[0]
    lines = [
        json.dumps(good),
        "{not json",
        json.dumps({k: v for k, v in good.items() if k != "response"}),
        json.dumps({**good, "rollout_index": 1, "reward": "high"}),
        json.dumps(good),
        json.dumps({**good, "rollout_index": 2, "env_steps": 4}),
        "[1, 2]",
    ]
    source = tmp_path / "rollouts.jsonl"
    source.write_text("\n".join(lines) + "\n")
    out = tmp_path / "reverified.jsonl"
    result = gym("reverify", str(source), "--output", str(out), "--head", "http://127.0.0.1:9")
    assert result.exit_code == 2, result.output
    assert f"{source}:2: not valid JSON" in result.output
    assert f"{source}:3: not a rollout row of gym collect: missing response" in result.output
    assert f"{source}:4: reward must be a finite number, got 'high'" in result.output
    pair = f"({good['task_index']}, {good['rollout_index']})"
    assert f"{source}:5: (task_index, rollout_index) = {pair} is already on line 1" in result.output
    assert f"{source}:6: cannot be re-verified: a gymnasium rollout" in result.output
    assert f"{source}:7: a rollout row must be a JSON object, got list" in result.output
    assert not out.exists()
    same = gym("reverify", str(collected), "--output", str(collected), "--head", "http://127.0.0.1:9")
    assert same.exit_code == 2 and "is the rollouts file itself" in same.output


def test_serve_starts_the_environment_for_the_run(collected, tmp_path, gym):
    """--serve: the launcher starts the config's environment (not its model nor its agent: nothing
    here calls them), re-verifies on it and stops it; an unchanged verifier gives every row its reward again."""
    config = tmp_path / "counter.yaml"
    config.write_text(json.dumps(CONFIG))
    out = tmp_path / "reverified.jsonl"
    result = gym(
        "reverify",
        str(collected),
        "--output",
        str(out),
        "--serve",
        str(config),
        "--isolation",
        "none",
        "--set",
        "head_server.port=0",
    )
    assert result.exit_code == 0, result.output
    assert "left out policy (model), agent (agent): only resources servers" in result.output
    table = result.output[result.output.index("gym servers") : result.output.index("All servers ready")]
    assert "counter" in table and "scripted" not in table and "simple_agent" not in table
    after = rows(out)
    assert len(after) == len(TASKS) * REPEATS
    assert all(r["reward"] == r["previous_reward"] for r in after)
    assert "other tool outputs" not in result.output and "rows re-verified (0 rewards up, 0 down)" in result.output


def test_serve_shows_its_start_up_in_the_progress_mode_chosen(collected, tmp_path, gym):
    """--serve's start-up step by step, as `gym run` shows it: json events on stdout (only the resources
    server it starts: one of one), the servers' table and the rewards on stderr; plain lines, no escape
    codes, when piped."""
    from gym_cli.live import StartupEvent

    config = tmp_path / "counter.yaml"
    config.write_text(json.dumps(CONFIG))
    args = ["reverify", str(collected), "--serve", str(config), "--isolation", "none", "--set", "head_server.port=0"]
    env = {"GYM_HOME": str(tmp_path / "home")}
    as_json = gym.run(*args, "--output", str(tmp_path / "json.jsonl"), "--progress", "json", env=env)
    assert as_json.returncode == 0, as_json.stderr
    events = [msgspec.json.decode(line, type=StartupEvent) for line in as_json.stdout.splitlines()]
    steps = [(e.phase, e.state, e.name) for e in events]
    steps = [step for i, step in enumerate(steps) if step not in steps[:i]]  # waiting told again after 10 s
    assert steps == [
        ("servers", "starting", None),
        ("ready", "waiting", "counter"),
        ("ready", "ready", "counter"),
        ("ready", "all", None),
    ]
    assert all(e.total == 1 for e in events)
    assert "gym servers" in as_json.stderr and "rewards: the rollouts file → the output" in as_json.stderr

    piped = gym.run(*args, "--output", str(tmp_path / "plain.jsonl"), env=env)
    assert piped.returncode == 0, piped.stderr
    order = ["start-up: starting 1 server,", "start-up: counter ready (1/1)", "gym servers", "All servers ready"]
    at = [piped.stderr.index(step) for step in order]
    assert at == sorted(at) and "\x1b" not in piped.stderr + piped.stdout
