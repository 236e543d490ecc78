"""`gym run` with `replicas: 3` on the counter environment, as a user runs it (real processes, real
HTTP, the scripted model and simple_agent): three processes behind one name, published by the head
and shown by `gym status`; collected rollouts each keep to one replica; a replica killed mid-collection
is restarted on its port and no rollout is lost."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from pathlib import Path

import pytest

from gym_core.auth import token_for_head
from gym_core.client import ServerClient
from gym_core.errors import ServerHTTPError
from gym_core.options import ClientConfig
from gym_core.routing import ROLLOUT_COOKIE, choose_replica

ROOT = Path(__file__).resolve().parents[3]
TURNS = [{"tool_calls": [{"name": "increment_counter", "arguments": {"count": 3}}]}, {"text": "added 3"}]
CONFIG = {
    "counter": {"plugin": "counter", "replicas": 3},
    "policy": {"plugin": "scripted", "turns": TURNS, "delay_s": 0.1},  # rollouts stay in flight a while
    "agent": {"plugin": "simple_agent", "model_server": "policy", "resources_server": "counter"},
    "server_restarts": {"attempts": 3, "window_s": 60, "backoff_s": 0.5},
}


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory, gym_run_process):
    config = tmp_path_factory.mktemp("replicas") / "servers.yaml"
    config.write_text(json.dumps(CONFIG))
    with gym_run_process(config, ready_timeout_s=120, stop_timeout_s=30) as run:
        yield run


@pytest.fixture
def collection(counter_collection):
    """``gym collect`` of the counter's tasks, 10 rollouts each, 8 at a time (conftest.CounterCollection)."""
    return counter_collection(repeats=10, parallel=8)


def test_three_processes_behind_one_name_published_and_shown_by_status(run, gym):
    row = run.row("counter")
    replicas = row["replicas"]
    assert [r["name"] for r in replicas] == ["counter#0", "counter#1", "counter#2"]
    assert len({r["pid"] for r in replicas}) == 3 and len({r["url"] for r in replicas}) == 3
    assert all(r["alive"] and r["state"] == "running" for r in replicas) and row["state"] == "running"
    assert [r["name"] for r in run.instances()] == ["counter", "policy", "agent"]  # one row per instance
    ready_table = "".join(run.lines)
    assert all(r["url"] in ready_table for r in replicas)  # the table at start names each replica

    status = gym.run("status", "--head", run.head, "--json", timeout_s=60)
    assert status.returncode == 0, status.stdout + status.stderr
    shown = {r["name"]: r for r in json.loads(status.stdout)}
    assert set(shown) == {"counter#0", "counter#1", "counter#2", "policy", "agent"}
    assert all(shown[r["name"]]["health"] == "ok" and shown[r["name"]]["instance"] == "counter" for r in replicas)


def test_collected_rollouts_each_keep_to_one_replica(run, tmp_path: Path, collection):
    """60 rollouts and no retry allowed: a call that reached another replica than its session's would
    be refused there (each replica signs its cookies with its own key) and fail the rollout. Then,
    asked directly, each rollout's session lives on exactly the replica its key hashes to."""
    out = tmp_path / "out.jsonl"
    proc = collection.start(run.head, out, "--retries", "0")
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    collection.assert_scored_once(out)
    assert collection.rows(tmp_path / "out.failures.jsonl") == []

    names = [r["name"] for r in run.row("counter")["replicas"]]
    urls = [r["url"] for r in run.row("counter")["replicas"]]

    async def owners() -> list[int]:
        found = []
        client = await ServerClient.from_head(run.head)
        direct = ServerClient(config=ClientConfig(max_attempts=1), auth_token=token_for_head(run.head), auth_urls=urls)
        async with client, direct:
            for i in range(30):
                cookies = {ROLLOUT_COOKIE: f"probe-{i}"}
                await client.post("counter", "/seed_session", {"initial_count": i}, cookies=cookies)
                holders = []
                for index, url in enumerate(urls):
                    try:
                        answer = await direct.post(url, "/tools/get_counter_value", {}, cookies=dict(cookies))
                        assert answer == {"count": i}
                        holders.append(index)
                    except ServerHTTPError as exc:
                        assert exc.status == 403  # another replica's cookie
                await client.post("counter", "/close_session", {}, cookies=cookies)
                assert holders == [choose_replica(f"probe-{i}", names)]
                found.extend(holders)
        return found

    found = asyncio.run(owners())
    assert set(found) == {0, 1, 2}  # every replica holds some sessions


def test_a_replica_killed_mid_collection_loses_no_rollout(run, tmp_path: Path, collection):
    """counter#1 is killed with -9 while rollouts are in flight: the supervisor restarts it on its port,
    the rollouts it held fail typed and are retried (with a new key, so maybe elsewhere), and the run
    ends with every (task, rollout) exactly once, scored right, and no failure."""
    victim = run.row("counter")["replicas"][1]
    out = tmp_path / "out.jsonl"
    proc = collection.start(run.head, out, "--retries", "6", "--retry-backoff", "0.5")
    try:
        deadline = time.monotonic() + 120
        while len(collection.rows(out)) < 8:
            assert proc.poll() is None and time.monotonic() < deadline, "no rows came"
            time.sleep(0.05)
        os.kill(victim["pid"], signal.SIGKILL)
        _, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    collection.assert_scored_once(out)
    assert collection.rows(tmp_path / "out.failures.jsonl") == []
    assert "were retried" in err
    deadline = time.monotonic() + 60
    while (back := run.row("counter")["replicas"][1])["state"] != "running":
        assert time.monotonic() < deadline, back
        time.sleep(0.1)
    assert back["url"] == victim["url"] and back["pid"] != victim["pid"] and back["restarts"] == 1
    assert [r["restarts"] for r in run.row("counter")["replicas"]] == [0, 1, 0]  # only the victim
    assert any("server 'counter#1'" in line and "restarting it" in line for line in run.lines)
