"""code_gen with ``execution: ray``: each unit-test run is a Ray task, sandboxed on the node that runs it.

A real local Ray (2 CPUs, started once for the module) and real servers over HTTP: the same verdicts
as local execution, the runs really made by Ray workers, a Ray failure answered 502 (retried,
never a reward), and Ray never imported when execution is local.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")  # before Ray is imported: no `uv run` per worker

import pytest
import ray

from gym_core import hookimpl
from gym_core.testing import ResourcesServerTests, RunningServers, assistant_response

import gym_code_gen.plugin
from gym_code_gen.config import CodeGenConfig
from gym_code_gen.fanout import RayExecutor
from gym_code_gen.server import CodeGenServer

FAST = {"unit_test_timeout_secs": 1, "num_processes": 2, "output_limit_mb": 1, "ray_num_cpus": 0.5}

SUM = {"inputs": ["1 2\n", "10 -3\n", "5 5\n"], "outputs": ["3\n", "7\n", "10\n"], "fn_name": None}
PROFIT = {"inputs": ["[7, 1, 5, 3, 6, 4]", "[7, 6, 4, 3, 1]"], "outputs": ["5", "0"], "fn_name": "maxProfit"}

# (tests, code): right, wrong answer, time limit, crash, a function call right and wrong.
CASES = [
    (SUM, "a, b = map(int, input().split())\nprint(a + b)"),
    (SUM, "a, b = map(int, input().split())\nprint(3)"),
    (SUM, "while True:\n    pass"),
    (SUM, "import os\nos.abort()"),
    (
        PROFIT,
        "def maxProfit(prices):\n    low, best = prices[0], 0\n    for p in prices:\n"
        "        low = min(low, p)\n        best = max(best, p - low)\n    return best",
    ),
    (PROFIT, "def maxProfit(prices):\n    return 5"),
]


def dies(request: dict[str, Any]) -> dict[str, Any]:
    """A task body whose worker dies: what a lost node looks like to the server."""
    os._exit(1)


class DyingWorkerServer(CodeGenServer):
    """A code_gen server on Ray whose tasks' workers die (a real Ray failure, not a mock of Ray)."""

    async def startup(self) -> None:
        await super().startup()
        self.executor = RayExecutor(
            self.executor.ray,
            mode=self.config.sandbox_mode,
            bwrap=None,
            num_cpus=self.config.ray_num_cpus,
            allowance_s=30,
            node_function=dies,
        )


class TinyDeadlineServer(CodeGenServer):
    """A code_gen server whose global deadline is 0.3 s of running time, to reach -1 quickly."""

    def deadline_s(self, tests: int) -> float:
        return 0.3


class HelperServers:
    @hookimpl
    def gym_register_servers(self, register):
        register(name="code_gen_dying_worker", kind="resources", server=DyingWorkerServer, config=CodeGenConfig)
        register(name="code_gen_tiny_deadline", kind="resources", server=TinyDeadlineServer, config=CodeGenConfig)


class _Servers(ResourcesServerTests):  # not collected: its `running()` starts the servers below
    instances = {
        "local": {"plugin": "code_gen", **FAST, "execution": "local"},
        "on_ray": {"plugin": "code_gen", **FAST, "execution": "ray"},
        "dying": {"plugin": "code_gen_dying_worker", **FAST, "execution": "ray"},
        "tiny_deadline": {"plugin": "code_gen_tiny_deadline", **FAST, "execution": "ray"},
    }
    instance = "on_ray"
    plugins = [gym_code_gen.plugin, HelperServers()]


@pytest.fixture(scope="module")
def servers():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        with _Servers.running() as running:
            yield running
    finally:
        ray.shutdown()


def verify(servers: RunningServers, instance: str, tests: dict, code: str) -> tuple[int, dict]:
    row = {
        "responses_create_params": {"input": "Solve it."},
        "verifier_metadata": {"unit_tests": tests, "difficulty": "easy"},
        "response": assistant_response(f"```python\n{code}\n```\n"),
    }
    reply = servers.caller(instance).post("/verify", row)
    return reply.status, reply.json()


def comparable(verdict: dict) -> dict:
    # Which limit stops a busy loop first (CPU seconds or wall clock) depends on how loaded the
    # machine is, so only that some limit stopped it is compared.
    metadata = {
        k: v for k, v in (verdict["metadata"] or {}).items() if k not in ("execution time", "traceback", "stopped_by")
    }
    if "stopped_by" in (verdict["metadata"] or {}):
        assert verdict["metadata"]["stopped_by"] in ("timeout", "cpu_limit"), verdict
    return {
        "reward": verdict["reward"],
        "result": verdict["result"],
        "metadata": metadata,
        "has_traceback": bool((verdict["metadata"] or {}).get("traceback")),
    }


def test_ray_gives_the_same_verdicts_as_local_execution(servers: RunningServers):
    expected = [[True, True, True], [True, -2], [-3], [-4], [True, True], [True, -2]]
    for (tests, code), result in zip(CASES, expected):
        local_status, local = verify(servers, "local", tests, code)
        ray_status, on_ray = verify(servers, "on_ray", tests, code)
        assert (local_status, ray_status) == (200, 200), (local, on_ray)
        assert local["result"] == result
        assert comparable(on_ray) == comparable(local)


def test_runs_are_made_by_ray_workers_not_by_the_server(servers: RunningServers):
    server = servers.servers["on_ray"]
    assert isinstance(server.executor, RayExecutor)
    assert servers.servers["local"].executor is None
    before = len(server.executor.workers)
    status, verdict = verify(servers, "on_ray", SUM, "a, b = map(int, input().split())\nprint(a + b)")
    assert status == 200 and verdict["reward"] == 1.0
    workers = server.executor.workers
    assert workers and len(workers) >= before
    assert all(pid != os.getpid() for pid, _ in workers)
    node_ids = {node.get("NodeID") for node in ray.nodes()}
    assert {node for _, node in workers} <= node_ids


def test_a_ray_failure_is_a_sandbox_failure_never_a_reward(servers: RunningServers):
    status, body = verify(servers, "dying", SUM, "a, b = map(int, input().split())\nprint(a + b)")
    assert status == 502, body
    assert body["error"]["type"] == "sandbox_failed" and "reward" not in body
    assert "Ray task" in body["error"]["message"]
    # The server still answers after the failure (the same Ray, a healthy server beside it).
    assert verify(servers, "on_ray", SUM, "print(sum(map(int, input().split())))")[1]["reward"] == 1.0


def test_the_global_deadline_counts_the_runs_time_on_their_nodes(servers: RunningServers):
    # Two tests each running 0.5 s on a node, past a deadline of 0.3 s (the driver's run on the node,
    # not the time its task waited for a CPU): every entry -1.
    tests = {"inputs": ["1\n", "2\n"], "outputs": ["1\n", "2\n"], "fn_name": None}
    status, verdict = verify(servers, "tiny_deadline", tests, "import time\ntime.sleep(0.5)\nprint(input())")
    assert status == 200 and verdict["result"] == [-1, -1] and verdict["metadata"]["error_code"] == -1


def test_ray_is_not_imported_when_execution_is_local():
    # A fresh interpreter: a local code_gen server verifies a program, and Ray stays unimported,
    # even with execution auto (no RAY_ADDRESS, no ray_head_node_address).
    script = (
        "import sys\n"
        "from gym_core.testing import running_servers, plugin_manager, HTTPCaller, assistant_response\n"
        "import gym_code_gen.plugin\n"
        "config = {'g': {'plugin': 'code_gen', 'unit_test_timeout_secs': 1, 'num_processes': 1}}\n"
        "with running_servers(config, plugin_manager(gym_code_gen.plugin)) as cfg:\n"
        "    row = {'responses_create_params': {'input': 'x'}, 'verifier_metadata': {'unit_tests': "
        "{'inputs': ['1\\n'], 'outputs': ['1\\n'], 'fn_name': None}},\n"
        "           'response': assistant_response('```python\\nprint(input())\\n```\\n')}\n"
        "    reply = HTTPCaller(cfg.instances['g'].url).post('/verify', row)\n"
        "    assert reply.status == 200 and reply.json()['reward'] == 1.0, reply.text\n"
        "print('ray' in sys.modules)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "False"
