"""Session affinity over several vLLM replicas (three stub servers), and failover when one goes down."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator

import openai
import pytest

from gym_core.auth import new_token
from gym_core.testing import HTTPCaller, plugin_manager, running_servers

import gym_vllm_model.plugin
from gym_vllm_model.server import replica_index
from gym_vllm_model.testing import StubVllm

SESSIONS = 60  # enough that every replica gets sessions (a miss has odds of about 1e-10)


@pytest.fixture
def replicas() -> Iterator[list[StubVllm]]:
    stubs = [StubVllm(f"replica{i}").start() for i in range(3)]
    try:
        yield stubs
    finally:
        for stub in stubs:
            stub.stop()


def served_by(stubs: list[StubVllm]) -> dict[str, list[int]]:
    """For each session marker (the text of the user message), the replicas its calls reached, in order."""
    seen: dict[str, list[int]] = {}
    for index, stub in enumerate(stubs):
        for body in stub.completions():
            seen.setdefault(body["messages"][-1]["content"], []).append(index)
    return seen


def call(caller: HTTPCaller, marker: str) -> None:
    reply = caller.post("/v1/responses", {"input": marker})
    assert reply.status == 200, reply.text


def test_sessions_stay_on_their_replica_and_fail_over_when_it_goes_down(replicas):
    # No cooldown: a session that moved must stay where it moved by itself, not because its replica is skipped.
    options = {
        "base_url": [stub.url for stub in replicas],
        "model": "stub-model",
        "replica_cooldown_s": 0,
        "max_attempts": 1,
    }
    config = {"auth_token": new_token(), "policy": {"plugin": "vllm_model", **options}}
    with running_servers(config, plugins=plugin_manager(gym_vllm_model.plugin)) as running:
        url = running.instances["policy"].url
        callers = {f"s{i}": HTTPCaller(url, auth_token=running.auth_token) for i in range(SESSIONS)}
        for _ in range(2):
            for marker, caller in callers.items():
                call(caller, marker)
        seen = served_by(replicas)
        home = {}
        for marker, caller in callers.items():
            (replica,) = set(seen[marker])  # both calls of a session reached one replica
            session_id = caller.cookies["gym_session_policy"].partition(".")[0]
            assert replica == replica_index(session_id, 3), marker  # the SHA-256 rule, not a per-process choice
            home[marker] = replica
        assert set(home.values()) == {0, 1, 2}  # replicas got disjoint sets of sessions, each some

        # Replica 1 goes down (connection refused): its sessions move to the next replica and stay
        # there, even once it is back; the others' sessions never move.
        for stub in replicas:
            stub.clear()
        replicas[1].stop()
        for marker, caller in callers.items():
            call(caller, marker)
        replicas[1].start()
        for marker, caller in callers.items():
            call(caller, marker)
        seen = served_by(replicas)
        for marker, replica in home.items():
            expected = [2, 2] if replica == 1 else [replica, replica]
            assert seen[marker] == expected, (marker, replica, seen[marker])

        # Every replica failing: a typed, final error naming them, never a hang or a 500.
        for stub in replicas:
            stub.fail_status = 500
        request = urllib.request.Request(
            f"{url}/v1/responses",
            data=json.dumps({"input": "x"}).encode(),
            method="POST",
            headers={"authorization": f"Bearer {running.auth_token}", "content-type": "application/json"},
        )
        with pytest.raises(urllib.error.HTTPError) as failure:
            urllib.request.urlopen(request, timeout=60)
        error = json.loads(failure.value.read())["error"]
        assert (failure.value.code, error["type"]) == (502, "upstream_unavailable")
        assert failure.value.headers["x-gym-final"] == "1"  # this server tried every replica: no retry on top
        assert all(stub.url in error["message"] for stub in replicas)


def test_the_openai_client_keeps_one_replica_per_client(replicas):
    # The official client keeps the session cookie (httpx's cookie jar): one client, one session, one replica.
    config = {
        "auth_token": new_token(),
        "policy": {"plugin": "vllm_model", "base_url": [stub.url for stub in replicas], "model": "stub-model"},
    }
    with running_servers(config, plugins=plugin_manager(gym_vllm_model.plugin)) as running:
        for index in range(6):
            client = openai.OpenAI(
                base_url=f"{running.instances['policy'].url}/v1", api_key=running.auth_token, max_retries=0
            )
            try:
                for _ in range(3):
                    assert client.responses.create(model="m", input=f"client{index}").output_text == f"client{index}"
            finally:
                client.close()
    seen = served_by(replicas)
    assert all(len(seen[f"client{index}"]) == 3 and len(set(seen[f"client{index}"])) == 1 for index in range(6)), seen
