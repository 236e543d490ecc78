"""local_vllm_model on Ray's real local cluster, with llama.cpp's OpenAI server (SmolLM2) as the engine.

vLLM does not run on this machine (see the README), so the engine is another server speaking its
OpenAI API, launched by the same actor code with the derived vLLM arguments left out. The cluster
declares two GPUs: Ray accounts for them and hands out their ids like real ones (llama.cpp runs on
the CPU whatever CUDA_VISIBLE_DEVICES says), which checks the GPU bundles and the ids each engine gets.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Iterator

import httpx
import openai
import pytest

# Under `uv run`, Ray would start every worker through `uv run` too (slow, and it may sync the venv):
# workers run this interpreter instead. Read when Ray is imported.
os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
import ray  # noqa: E402
from ray.util import placement_group_table  # noqa: E402

from gym_core.auth import new_token
from gym_core.config import load_config
from gym_core.serving import ServerThread, build_server
from gym_core.testing import HTTPCaller, plugin_manager, wait_until

import gym_local_vllm.plugin
from gym_local_llama.engine import default_model_path
from gym_local_vllm.server import EngineLaunchError, LocalVllmModel
from gym_vllm_model.server import replica_index

PLUGINS = plugin_manager(gym_local_vllm.plugin)
LLAMA_SERVER = [
    "{python}", "-m", "llama_cpp.server", "--model", str(default_model_path()), "--model_alias", "{served_model_name}",
    "--host", "{host}", "--port", "{port}", "--n_ctx", "512", "--n_threads", "1", "--verbose", "False",
]  # fmt: skip
CHAT_ROUTE = '"POST /v1/chat/completions HTTP/1.1" 200'


@pytest.fixture(scope="module", autouse=True)
def cluster() -> Iterator[None]:
    """A one-node Ray cluster of our own (4 CPUs, 2 GPUs declared), joined by this process."""
    # address="local": our own cluster, even when another one runs on this machine.
    ray.init(address="local", num_cpus=4, num_gpus=2, include_dashboard=False, configure_logging=False)
    try:
        yield
    finally:
        ray.shutdown()


def server_for(name: str, options: dict) -> LocalVllmModel:
    """A server of instance ``name`` (each test its own, so that its placement groups are told apart)."""
    base = {"plugin": "local_vllm_model", "model": "smollm2", "engine_command": LLAMA_SERVER, "pass_vllm_args": False,
            "engine_host": "127.0.0.1", "uses_reasoning_parser": False}  # fmt: skip
    config = load_config(base={"auth_token": new_token(), name: {**base, **options}}, env_file=None,
                         server_types=PLUGINS.servers())  # fmt: skip
    server = build_server(config, name, PLUGINS)
    assert isinstance(server, LocalVllmModel)
    return server


@contextlib.contextmanager
def serving(server: LocalVllmModel) -> Iterator[str]:
    settings = server.global_config.instances[server.name]
    thread = ServerThread(server.build_app(), settings.host, settings.port).start(timeout_s=240)
    try:
        yield settings.url
    finally:
        thread.stop(timeout_s=120)


def groups_of(instance: str) -> dict[str, dict]:
    """The placement groups of ``instance`` in the cluster's table (removed ones stay listed)."""
    return {
        row["name"]: row for row in placement_group_table().values() if row["name"].startswith(f"{instance}_dp_rank_")
    }


def all_resources_free() -> bool:
    free, total = ray.available_resources(), ray.cluster_resources()
    return all(free.get(key, 0) == total[key] for key in ("CPU", "GPU"))


def process_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_two_data_parallel_engines_serve_the_openai_client_sessions_stick_and_nothing_is_left(cluster):
    server = server_for("dp2", {"vllm_serve_kwargs": {"data_parallel_size": 2}})
    with serving(server) as url:
        # One placement group per engine, one {GPU, CPU} bundle each (TP = PP = 1), packed.
        groups = groups_of("dp2")
        assert sorted(groups) == ["dp2_dp_rank_0", "dp2_dp_rank_1"]
        for row in groups.values():
            assert row["state"] == "CREATED"
            assert row["strategy"] == "STRICT_PACK"
            assert row["bundles"] == {0: {"GPU": 1.0, "CPU": 1.0}}
        # Two engines, two URLs, which are vllm_model's replicas; each engine got its own GPU.
        urls = [engine["url"] for engine in server.engines]
        assert len(set(urls)) == 2 and server.replicas == urls
        assert sorted(gpu for engine in server.engines for gpu in engine["gpu_ids"]) == ["0", "1"]
        pids = [engine["pid"] for engine in server.engines]

        # The official client on both routes, through the gym server and an engine.
        client = openai.OpenAI(base_url=f"{url}/v1", api_key=server.global_config.auth_token, max_retries=0,
                               http_client=httpx.Client(timeout=120))  # fmt: skip
        chat = client.chat.completions.create(model="smollm2", max_tokens=4, temperature=0,
                                              messages=[{"role": "user", "content": "Say hi."}])  # fmt: skip
        assert chat.model == "smollm2" and chat.choices[0].message.role == "assistant"
        assert chat.choices[0].message.content
        reply = client.responses.create(model="smollm2", input="Say hi.", max_output_tokens=4, temperature=0)
        assert reply.status in ("completed", "incomplete") and reply.output_text

        # Sessions: each one's calls all reach the engine its id hashes to; both engines get sessions.
        calls = [0, 0]
        homes: set[int] = set()
        caller_count = 0
        while homes != {0, 1}:
            caller_count += 1
            assert caller_count <= 20, "20 sessions all hashed to one engine"
            caller = HTTPCaller(url, auth_token=server.global_config.auth_token)
            for _ in range(2):
                answer = caller.post(
                    "/v1/chat/completions",
                    {
                        "model": "smollm2",
                        "max_tokens": 2,
                        "temperature": 0,
                        "messages": [{"role": "user", "content": "Hi"}],
                    },
                )
                assert answer.status == 200, answer.text
            home = replica_index(caller.cookies["gym_session_dp2"].partition(".")[0], 2)
            calls[home] += 2
            homes.add(home)
        for index, actor in enumerate(server._actors):
            _, lines = ray.get(actor.poll.remote())
            served = sum(CHAT_ROUTE in line for line in lines)
            # Plus the openai client's two calls (both routes become a vLLM chat completion).
            assert served - calls[index] in (0, 1, 2), (index, served, calls)
        assert (
            sum(sum(CHAT_ROUTE in line for line in ray.get(actor.poll.remote())[1]) for actor in server._actors)
            == sum(calls) + 2
        )

    # Shutdown: the groups are removed, the engines are gone, every CPU and GPU is free again.
    assert {row["state"] for row in groups_of("dp2").values()} == {"REMOVED"}
    wait_until(lambda: all(process_gone(pid) for pid in pids), "the engine processes exited")
    wait_until(all_resources_free, "the cluster's CPUs and GPUs are free")


def test_an_engine_that_does_not_answer_in_time_fails_start_up_with_its_last_lines(cluster):
    stuck = ["{python}", "-c", "import time; print('loading weights 1/3', flush=True); time.sleep(300)"]
    server = server_for("stuck", {"engine_command": stuck, "use_gpus": False, "startup_timeout_s": 3,
                         "vllm_serve_kwargs": {"tensor_parallel_size": 2}})  # fmt: skip
    with pytest.raises(EngineLaunchError) as info:
        asyncio.run(server.startup())
    message = str(info.value)
    assert "engine 0 did not answer GET http://127.0.0.1:" in message
    assert "startup_timeout_s=3 s" in message and "loading weights 1/3" in message
    # TP = 2 without GPUs: one group of two CPU bundles; removed with the engine and its actor.
    (row,) = groups_of("stuck").values()
    assert row["bundles"] == {0: {"CPU": 1.0}, 1: {"CPU": 1.0}}
    assert row["state"] == "REMOVED"
    wait_until(lambda: process_gone(server.engines[0]["pid"]), "the stuck engine was stopped")
    wait_until(all_resources_free, "the cluster's CPUs are free")


def test_an_engine_that_dies_fails_start_up_with_its_status_and_last_lines(cluster):
    dies = ["{python}", "-c", "import sys; print('RuntimeError: no CUDA device', file=sys.stderr); sys.exit(3)"]
    server = server_for("dies", {"engine_command": dies, "use_gpus": False})
    with pytest.raises(EngineLaunchError) as info:
        asyncio.run(server.startup())
    message = str(info.value)
    assert "engine 0 (http://127.0.0.1:" in message and "exited with status 3 during start-up" in message
    assert "RuntimeError: no CUDA device" in message
    assert {row["state"] for row in groups_of("dies").values()} == {"REMOVED"}
    wait_until(all_resources_free, "the cluster's CPUs are free")


def test_placement_the_cluster_cannot_grant_fails_start_up_naming_what_was_asked(cluster):
    server = server_for("ungranted", {"vllm_serve_kwargs": {"tensor_parallel_size": 4}, "placement_timeout_s": 2})
    with pytest.raises(EngineLaunchError) as info:
        asyncio.run(server.startup())
    message = str(info.value)
    assert "did not grant 1 placement group(s) of [{'GPU': 1.0, 'CPU': 1.0}" in message
    assert "in all: CPU=4, GPU=2" in message
    assert {row["state"] for row in groups_of("ungranted").values()} == {"REMOVED"}
