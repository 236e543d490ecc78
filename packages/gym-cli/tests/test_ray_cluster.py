"""gym on a real multi-node Ray cluster (``ray.cluster_utils.Cluster``: a head node and a worker node on
this machine, each with a custom resource of its own), as a user runs it: `gym run` joins the cluster
(``ray: {address: ...}``), each server process runs in a Ray actor on the node its ``resources:`` asks
for (a custom resource, a node id), every server gets ``RAY_ADDRESS``; a counter environment with three
replicas keeps each rollout on one replica; a replica killed mid-collection is restarted where it was
and no rollout is lost; `gym stop` leaves no server process and no actor behind.

The config checks (``ray:``, ``resources:``) and the no-Ray start-up need no cluster and run first."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from gym_core.auth import token_for_head
from gym_core.client import ServerClient
from gym_core.config import GlobalConfig, load_config
from gym_core.errors import ConfigError, ServerHTTPError
from gym_core.options import ClientConfig
from gym_core.routing import ROLLOUT_COOKIE, choose_replica

ROOT = Path(__file__).resolve().parents[3]
TURNS = [{"tool_calls": [{"name": "increment_counter", "arguments": {"count": 3}}]}, {"text": "added 3"}]


def problems(config: dict, *overrides: str) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load_config(base=config, overrides=list(overrides), env_file=None, allocate_ports=False)
    return info.value.problems


# --- the config, without a cluster -----------------------------------------------------------------


def test_ray_key_forms():
    def ray(data: dict):
        return GlobalConfig(data).ray

    assert ray({}) is None and ray({"ray": False}) is None and ray({"ray": None}) is None
    assert ray({"ray": True}).local and ray({"ray": {}}).local and ray({"ray": {"address": "local"}}).local
    joined = ray({"ray": {"address": "10.0.0.1:6379", "placement_timeout_s": 5}})
    assert (joined.address, joined.local, joined.placement_timeout_s) == ("10.0.0.1:6379", False, 5)
    assert ray({"ray_head_node_address": "10.0.0.1:6379"}).address == "10.0.0.1:6379"  # the reference's spelling
    # The launcher writes the address of a cluster it started back: servers then join that one.
    assert ray({"ray": {}, "ray_head_node_address": "10.0.0.2:6379"}).address == "10.0.0.2:6379"


def test_bad_ray_and_resources_keys_are_reported_by_path():
    found = problems(
        {
            "ray": {"adress": "x:1"},
            "counter": {"plugin": "counter", "resources": {"num_cpu": 1}},
            "math": {"plugin": "math", "resources": {"num_gpus": -1}},
            "agent": {"plugin": "simple_agent", "resources": {"custom": {"env_node": "lots"}}},
            "policy": {"plugin": "scripted", "resources": "gpu"},
        }
    )
    assert any(p.startswith("ray.adress: unknown key (did you mean 'address'?)") for p in found), found
    assert any(
        p.startswith("counter.resources.num_cpu: unknown key (did you mean 'num_cpus'?)")
        and "custom: {num_cpu: <amount>}" in p
        for p in found
    ), found
    assert any(p.startswith("math.resources: ") and "math.resources.num_gpus" in p and ">= 0" in p for p in found)
    assert "agent.resources.custom.env_node: expected an amount > 0, got 'lots'" in found, found
    assert any(p.startswith("policy.resources: expected a mapping") for p in found), found
    assert problems({"ray": 3})[0].startswith("ray: expected true, false or a mapping")
    assert problems({"ray": {"address": "a:1", "num_cpus": 2}})[0].startswith("ray.num_cpus: sizes a local cluster")
    assert problems({"ray": {"address": "a:1"}, "ray_head_node_address": "b:2"})[0].startswith(
        "ray.address: 'a:1' differs"
    )
    assert problems({"ray": False, "ray_head_node_address": "b:2"})[0].startswith("ray: false, yet")
    # Valid ones load, and are not options of the server type.
    config = load_config(
        base={
            "ray": {},
            "c": {
                "plugin": "counter",
                "replicas": 2,
                "resources": {"num_cpus": 0.5, "custom": {"env_node": 1}, "node": "10.0.0.1"},
            },
        },
        env_file=None,
    )
    assert config.instances["c"].resources == {"num_cpus": 0.5, "custom": {"env_node": 1}, "node": "10.0.0.1"}
    assert "resources" not in config.instances["c"].options


def test_gym_config_validate_names_the_bad_resources(tmp_path: Path, gym):
    config = tmp_path / "servers.yaml"
    config.write_text(json.dumps({"ray": {}, "counter": {"plugin": "counter", "resources": {"num_gpu": 1}}}))
    done = gym.run("config", "validate", str(config))
    assert done.returncode == 2, done.stdout + done.stderr
    assert "counter.resources.num_gpu: unknown key (did you mean 'num_gpus'?)" in done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr


def test_replicas_on_several_hosts_each_get_their_own_url():
    config = GlobalConfig(
        {
            "c": {
                "plugin": "counter",
                "replicas": 2,
                "host": "10.0.0.1",
                "port": 7000,
                "replica_ports": [7000, 7001],
                "replica_hosts": ["10.0.0.1", "10.0.0.2"],
            }
        }
    )
    assert config.instances["c"].replica_urls == ["http://10.0.0.1:7000", "http://10.0.0.2:7001"]
    second = config.for_replica("c", 1).instances["c"]  # what replica 1's process binds
    assert (second.host, second.port) == ("10.0.0.2", 7001)


def test_gym_run_without_ray_never_imports_it(tmp_path: Path):
    """Start-up without Ray is unchanged: launching a config that does not ask for Ray loads no Ray."""
    config = tmp_path / "servers.yaml"
    config.write_text(json.dumps({"counter": {"plugin": "counter", "resources": {"num_cpus": 1}}}))
    script = (
        "import sys\n"
        "from rich.console import Console\n"
        "from gym_cli.launch.launcher import launch\n"
        f"with launch([{str(config)!r}], ['head_server.port=0'], isolation='none', console=Console(stderr=True),"
        " env_file=None) as state:\n"
        "    assert state.supervisor.returncodes() == {'counter': None}\n"
        "print('ray' in sys.modules, [m for m in sys.modules if m.startswith('ray.')][:3])\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip().splitlines()[-1] == "False []"
    assert "counter.resources: not used, the config asks for no Ray cluster" in done.stderr


# --- a real cluster --------------------------------------------------------------------------------


@dataclass
class Nodes:
    address: str
    head: str  # node ids
    worker: str


_FAILED_START: list[str] = []


@pytest.fixture(scope="module")
def cluster() -> Iterator[Nodes]:
    """Two Ray nodes on this machine: the head (resource ``gym_head``) and a worker (``gym_envs``)."""
    # As `gym run` does: under `uv run` (the test suite's runner) Ray would re-run `uv run` for its
    # processes. Read when Ray is imported, and inherited by the nodes' processes.
    os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
    if _FAILED_START:  # pytest calls a failed module fixture again for each test: fail them at once
        pytest.fail(f"the Ray cluster did not start: {_FAILED_START[0]}")
    # Ray's socket paths must stay short: a temp dir of our own right under /tmp, removed at the end.
    temp = tempfile.mkdtemp(prefix="gymray", dir="/tmp")
    try:
        cluster, worker = _start_cluster(temp)
    except BaseException as exc:
        _FAILED_START.append(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
        _kill_processes_naming(temp)  # every process a failed start left names our temp dir
        shutil.rmtree(temp, ignore_errors=True)
        raise
    try:
        yield Nodes(cluster.address, cluster.head_node.node_id, worker.node_id)
    finally:
        cluster.shutdown()
        _kill_processes_naming(temp)
        shutil.rmtree(temp, ignore_errors=True)


def _start_cluster(temp: str):
    from ray._private import services
    from ray.cluster_utils import Cluster

    lookup = services.get_node

    def patient_lookup(*args, **kwargs):
        # Ray gives a new node a fixed 30 s to register with the head, which a loaded 2-core machine can
        # miss while the node is in fact coming up: let its lookup wait up to 150 s.
        deadline = time.monotonic() + 150
        while True:
            try:
                return lookup(*args, **kwargs)
            except RuntimeError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    cluster = Cluster()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(services, "get_node", patient_lookup)
        try:
            # A port of its own for the head's dashboard agent: Ray's default (52365) is every other head's.
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", 0))
                agent_port = sock.getsockname()[1]
            cluster.add_node(
                num_cpus=1,
                resources={"gym_head": 1},
                temp_dir=temp,
                include_dashboard=False,
                dashboard_agent_listen_port=agent_port,
            )
            return cluster, cluster.add_node(num_cpus=1, resources={"gym_envs": 3})
        except BaseException:
            cluster.shutdown()
            raise


def _kill_processes_naming(temp: str) -> None:
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if temp.encode() in (entry / "cmdline").read_bytes():
                    os.kill(int(entry.name), signal.SIGKILL)
            except OSError:
                pass


@pytest.fixture(scope="module")
def run(cluster: Nodes, tmp_path_factory: pytest.TempPathFactory, gym_run_process):
    config = tmp_path_factory.mktemp("ray") / "servers.yaml"
    config.write_text(
        json.dumps(
            {
                "ray": {"address": cluster.address, "placement_timeout_s": 180},
                # Only the worker node has gym_envs: the three replicas must land there.
                "counter": {"plugin": "counter", "replicas": 3, "resources": {"custom": {"gym_envs": 1}}},
                # Pinned to the head node by its id (a prefix of it for the agent).
                "policy": {"plugin": "scripted", "turns": TURNS, "delay_s": 0.1, "resources": {"node": cluster.head}},
                "agent": {
                    "plugin": "simple_agent",
                    "model_server": "policy",
                    "resources_server": "counter",
                    "resources": {"node": cluster.head[:16]},
                },
                "server_restarts": {"attempts": 3, "window_s": 60, "backoff_s": 0.5},
            }
        )
    )
    with gym_run_process(config, ready_timeout_s=240, stop_timeout_s=60) as run:
        yield run


def parent_of(pid: int) -> int:
    return int(
        next(
            line.split()[1] for line in Path(f"/proc/{pid}/status").read_text().splitlines() if line.startswith("PPid:")
        )
    )


def environment_of(pid: int) -> dict[str, str]:
    pairs = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(pair.decode().split("=", 1) for pair in pairs if b"=" in pair)


def test_each_server_runs_in_an_actor_on_the_node_asked_for(run, cluster: Nodes):
    counter = run.row("counter")
    replicas = counter["replicas"]
    assert [r["name"] for r in replicas] == ["counter#0", "counter#1", "counter#2"]
    assert all(r["state"] == "running" for r in replicas)
    assert {r["node"]["id"] for r in replicas} == {cluster.worker}  # the only node with gym_envs
    assert run.row("policy")["node"]["id"] == cluster.head == run.row("agent")["node"]["id"]
    for row in [*replicas, run.row("policy"), run.row("agent")]:
        # Published at its node's address (reachable from the other nodes), on a port of its own.
        assert urlsplit(row["url"]).hostname == row["node"]["ip"]
        # Started by a Ray worker (its actor), not by gym run; it knows the cluster's address.
        assert parent_of(row["pid"]) != run.proc.pid
        assert "ServerHost" in Path(f"/proc/{parent_of(row['pid'])}/cmdline").read_text()
        assert environment_of(row["pid"])["RAY_ADDRESS"] == cluster.address
    assert len({r["url"] for r in replicas}) == 3
    assert "Ray node" in "".join(run.lines)  # the table at start says where each one runs


@pytest.fixture
def collection(counter_collection):
    """``gym collect`` of the counter's tasks, 6 rollouts each, 6 at a time (conftest.CounterCollection)."""
    return counter_collection(repeats=6, parallel=6)


def test_rollouts_keep_to_one_replica_across_nodes(run, tmp_path: Path, collection):
    """No retry allowed: a call of a rollout that reached another replica than its session's would be
    refused there (each replica signs its own cookies) and fail it. Then, asked directly, each probe
    session lives on exactly the replica its key hashes to, and every replica holds some."""
    out = tmp_path / "out.jsonl"
    proc = collection.start(run.head, out, "--retries", "0")
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    collection.assert_scored_once(out)
    assert collection.rows(tmp_path / "out.failures.jsonl") == []

    replicas = run.row("counter")["replicas"]
    names, urls = [r["name"] for r in replicas], [r["url"] for r in replicas]

    async def owners() -> list[int]:
        found = []
        client = await ServerClient.from_head(run.head)
        direct = ServerClient(config=ClientConfig(max_attempts=1), auth_token=token_for_head(run.head), auth_urls=urls)
        async with client, direct:
            for i in range(12):
                cookies = {ROLLOUT_COOKIE: f"probe-{i}"}
                await client.post("counter", "/seed_session", {"initial_count": i}, cookies=cookies)
                holders = []
                for index, url in enumerate(urls):
                    try:
                        assert await direct.post(url, "/tools/get_counter_value", {}, cookies=dict(cookies)) == {
                            "count": i
                        }
                        holders.append(index)
                    except ServerHTTPError as exc:
                        assert exc.status == 403  # another replica's cookie
                await client.post("counter", "/close_session", {}, cookies=cookies)
                assert holders == [choose_replica(f"probe-{i}", names)]
                found.extend(holders)
        return found

    assert set(asyncio.run(owners())) == {0, 1, 2}


def test_a_replica_killed_mid_collection_is_restarted_in_its_actor_and_nothing_is_lost(run, tmp_path: Path, collection):
    victim = run.row("counter")["replicas"][1]
    out = tmp_path / "out.jsonl"
    proc = collection.start(run.head, out, "--retries", "6", "--retry-backoff", "0.5")
    try:
        deadline = time.monotonic() + 120
        while len(collection.rows(out)) < 6:
            assert proc.poll() is None and time.monotonic() < deadline, "no rows came"
            time.sleep(0.05)
        os.kill(victim["pid"], signal.SIGKILL)  # the server process, on its node; its actor lives on
        _, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    collection.assert_scored_once(out)
    assert collection.rows(tmp_path / "out.failures.jsonl") == []
    deadline = time.monotonic() + 60
    while (back := run.row("counter")["replicas"][1])["state"] != "running":
        assert time.monotonic() < deadline, back
        time.sleep(0.1)
    # Restarted by the same actor: the same node and URL, a new process.
    assert back["url"] == victim["url"] and back["node"] == victim["node"] and back["pid"] != victim["pid"]
    assert [r["restarts"] for r in run.row("counter")["replicas"]] == [0, 1, 0]
    assert any("server 'counter#1'" in line and "restarting it" in line for line in run.lines)


def test_resources_no_node_has_are_a_config_error_before_anything_starts(cluster: Nodes, tmp_path: Path, gym):
    config = tmp_path / "servers.yaml"
    config.write_text(
        json.dumps(
            {
                "ray": {"address": cluster.address},
                "counter": {"plugin": "counter", "resources": {"custom": {"gpu_box": 1}}},
                "policy": {"plugin": "scripted", "turns": TURNS, "resources": {"node": "no-such-node"}},
            }
        )
    )
    done = gym.run("run", str(config), "--isolation", "none", "head_server.port=0", timeout_s=180)
    output = done.stdout + done.stderr
    assert done.returncode == 2, output
    assert "counter.resources: no node of the Ray cluster has gpu_box 1; its nodes: " in output
    assert f"{cluster.worker[:12]} " in output and "gym_envs 3" in output  # what each node has
    assert "policy.resources.node: no alive node of the Ray cluster is 'no-such-node'" in output
    assert "Traceback" not in output and "placing" not in output  # nothing was placed or started


def test_gym_status_says_which_node_each_server_runs_on(run, cluster: Nodes, gym):
    shown = gym.run("status", "--head", run.head, env={"COLUMNS": "250"}, timeout_s=60)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert "Ray node" in shown.stdout
    rows = {line.split("│")[1].strip(): line for line in shown.stdout.splitlines() if line.count("│") > 5}
    for name in ("counter#0", "counter#1", "counter#2"):
        assert cluster.worker[:12] in rows[name] and cluster.head[:12] not in rows[name]
    for name in ("policy", "agent"):
        assert cluster.head[:12] in rows[name] and cluster.worker[:12] not in rows[name]


def test_gym_stop_leaves_no_server_and_no_actor(run, gym):
    servers = [r["pid"] for r in run.row("counter")["replicas"]] + [run.row(n)["pid"] for n in ("policy", "agent")]
    actors = {parent_of(pid) for pid in servers}
    done = gym.run("stop", "--head", run.head, "--timeout", "60")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "left running" not in done.stdout + done.stderr  # gym run stopped them itself, in order
    assert run.proc.wait(timeout=60) is not None
    deadline = time.monotonic() + 60
    while alive := [pid for pid in [*servers, *actors] if _running(pid)]:
        assert time.monotonic() < deadline, f"still running: {alive}"
        time.sleep(0.2)


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"
