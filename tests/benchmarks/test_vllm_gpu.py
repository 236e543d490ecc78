"""The GPU-free parts of ``benchmarks/vllm_gpu.py``: its clients and counters, against stub vLLM replicas.

The measurement itself needs vLLM and a GPU (docs/performance.md records a run on an H100); here its
gym side runs for real (``gym run --isolation none``, ``vllm_model`` in front of two :class:`StubVllm`
replicas), so a change that breaks how it routes, counts or renders fails before the next GPU session.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from benchmarks import __main__ as harness
from benchmarks import vllm_gpu
from benchmarks._common import gym_servers
from gym_vllm_model.testing import StubVllm

METRICS = """\
# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="smollm2"} 1200.0
vllm:prefix_cache_queries_total{engine="1",model_name="smollm2"} 300.0
vllm:prefix_cache_hits_total{engine="0",model_name="smollm2"} 900.0
vllm:prefix_cache_hits_created 1.7e9
vllm:num_requests_running{engine="0",model_name="smollm2"} 4.0
"""


def test_prefix_cache_counters_sum_every_engine_and_ignore_the_rest():
    assert vllm_gpu.prefix_cache_counters(METRICS) == {"hits": 900.0, "queries": 1500.0}
    assert vllm_gpu.prefix_cache_counters("") == {"hits": 0.0, "queries": 0.0}


def test_without_vllm_the_measurement_says_what_it_needs():
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--only", "vllm_gpu", "--output", tempfile.mkdtemp()],
        cwd=vllm_gpu.ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1
    assert "vllm_gpu needs" in done.stderr and "GPU" in done.stderr


@pytest.fixture(scope="module")
def stub_run():
    """Two stub replicas, and gym's servers as the measurement configures them (the Ray-placed
    engine replaced by ``vllm_model`` on the first stub: no vLLM here)."""
    b, c = StubVllm(), StubVllm()
    b.start()
    c.start()
    config = vllm_gpu.servers_config(Path("/unused"), b.url, [b.url, c.url])
    config.pop("ray")
    config["policy_model"] = {
        "plugin": "vllm_model",
        "model": "smollm2",
        "base_url": b.url,
        "uses_reasoning_parser": False,
    }
    with gym_servers(config) as state:
        yield state, b, c


def test_gym_and_direct_clients_count_the_same_tokens(stub_run):
    state, b, _ = stub_run
    gym = asyncio.run(vllm_gpu.gym_tokens_per_s(state.config.head_url, "single_agent", 4, 15))
    direct = asyncio.run(vllm_gpu.direct_tokens_per_s(b.url, 4, 15, 64))
    assert gym["errors"] == direct["errors"] == 0 and gym["rollouts"] == direct["requests"] == 15
    # The stub echoes the last user message: both paths sent the same 15 prompts, so the same tokens.
    assert gym["tokens"] == direct["tokens"] > 0


def test_affine_chats_stay_on_one_replica_and_unpinned_ones_spread(stub_run):
    state, b, c = stub_run
    url = next(row["url"] for row in state.rows if row["name"] == "pair_model").rstrip("/")
    token = state.config.auth_token

    def replicas_per_chat(arm: str) -> dict[str, set[str]]:
        seen: dict[str, set[str]] = {}
        for name, stub in (("b", b), ("c", c)):
            for _, body in stub.requests:
                system = (body.get("messages") or [{}])[0].get("content") or ""
                if isinstance(system, str) and system.startswith(f"[{arm} chat "):
                    seen.setdefault(system.split("]")[0], set()).add(name)
        return seen

    for arm in ("affine", "none"):
        row = asyncio.run(vllm_gpu.affinity_arm(url, token, [], arm, 16, 3, 8))
        assert row["errors"] == 0 and row["chats"] == 16
        assert row["prefix_hit_rate"] is None  # no /metrics roots given: no rate made up
    affine, unpinned = replicas_per_chat("affine"), replicas_per_chat("none")
    assert len(affine) == len(unpinned) == 16
    assert all(len(replicas) == 1 for replicas in affine.values())  # every turn on the chat's replica
    assert any(len(replicas) == 2 for replicas in unpinned.values())  # a new session per call moves


def test_the_quickstart_through_the_cli_and_the_table(stub_run):
    state, _, _ = stub_run
    with tempfile.TemporaryDirectory() as tmp:
        quick = vllm_gpu.quickstart(state.config.head_url, Path(tmp))
    assert quick["exit"] == 0, quick["stderr_tail"]
    assert quick["done_event"]["done"] == 60 and quick["done_event"]["failed"] == 0
    assert quick["profile"]["overall"]["num_rollouts"] == 60
    result = {
        "device": "stub", "model": "m", "gpu_share": 0.25, "engine_ready_s": {"b": 1, "c": 2},
        "ray_engine_error": "EngineLaunchError: boom", "quickstart": quick,
        "levels": {"1": {"gym": {"rollouts": 1, "tokens_per_s": 1.0, "rollouts_per_s": 1.0, "errors": 0},
                         "direct": {"tokens_per_s": 2.0, "errors": 0}, "ratio": 0.5}},
        "affinity": {"affine": {"chats": 1, "turns": 2, "tokens_per_s": 3.0, "p50_ms": 1.0, "prefix_hit_rate": 0.7,
                                "errors": 0}},
    }  # fmt: skip
    table = "\n".join(harness._vllm_gpu(result))
    assert "did not start: EngineLaunchError: boom" in table
    assert "| 1 | 1 | 1.0 | 1.0 | 2.0 | 0.5 | 0 + 0 |" in table
    assert "| session-affine (cookie kept) | 1 × 2 | 3.0 | 1.0 | 0.7 | 0 |" in table
