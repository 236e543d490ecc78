"""Replicas behind one name: the rendezvous hash (fixed vectors, balance, minimal movement), the
``replicas`` key of a config, and ServerClient's routing against real counter replicas on loopback:
every call of a rollout reaches the one replica holding its session, whatever process routes it."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from gym_core.client import ServerClient
from gym_core.config import GlobalConfig, load_config
from gym_core.errors import ConfigError, ServerHTTPError, ServerUnavailableError
from gym_core.head import build_head_app
from gym_core.options import ClientConfig
from gym_core.plugins import get_plugin_manager
from gym_core.routing import (
    ROLLOUT_COOKIE,
    Replicas,
    choose_replica,
    new_rollout_key,
    rendezvous_order,
    replica_name,
    replica_weight,
)
from gym_core.serving import ServerThread, build_server
from gym_core.testing import running_servers

NAMES = [replica_name("counter", i) for i in range(3)]

# --- the hash -------------------------------------------------------------------------------------


def test_weights_and_choices_are_fixed_vectors():
    """These values are the routing contract between gym processes (and releases): a change here
    sends live rollouts to replicas that do not hold their sessions. Never update them to pass."""
    assert replica_weight("rollout-0", "counter#0") == 1668540252195213957
    assert [choose_replica(f"rollout-{i}", NAMES) for i in range(12)] == [1, 0, 2, 0, 1, 2, 2, 2, 2, 0, 0, 2]
    assert rendezvous_order("rollout-0", NAMES) == [1, 2, 0]
    # Separated fields: moving a character from the replica's name to the key changes the weight.
    assert replica_weight("bc", "a") != replica_weight("c", "ab")


def test_another_interpreter_makes_the_same_choices():
    """Nothing process-local (str hash randomisation, dict order) enters the choice."""
    keys = [f"k{i}" for i in range(200)]
    script = (
        "import json, sys; from gym_core.routing import Replicas; "
        f"print(json.dumps([Replicas({NAMES!r}).choose(k) for k in {keys!r}]))"
    )
    other = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONHASHSEED": "12345", "PATH": ""},
        timeout=60,
    )
    assert json.loads(other.stdout) == [Replicas(NAMES).choose(k) for k in keys]


def test_choose_is_the_heaviest_weight_and_the_head_of_the_order():
    replicas = Replicas(NAMES)
    for i in range(500):
        key = f"key-{i}"
        weights = [replica_weight(key, name) for name in NAMES]
        assert replicas.choose(key) == weights.index(max(weights)) == replicas.order(key)[0]
        assert sorted(replicas.order(key)) == [0, 1, 2]


def test_keys_spread_evenly():
    for n in (2, 3, 4, 8):
        replicas = Replicas([replica_name("env", i) for i in range(n)])
        counts = Counter(replicas.choose(f"rollout-{i}") for i in range(20_000))
        expected = 20_000 / n
        assert sorted(counts) == list(range(n))
        assert all(abs(c - expected) < 0.06 * expected for c in counts.values()), counts
    # Random keys, as the client makes them, spread too.
    counts = Counter(Replicas(NAMES).choose(new_rollout_key()) for _ in range(6_000))
    assert all(1_700 < c < 2_300 for c in counts.values()), counts


def test_removing_a_replica_moves_only_its_keys_to_their_next_choice():
    four = [replica_name("env", i) for i in range(4)]
    without_2 = [four[0], four[1], four[3]]
    moved = 0
    for i in range(4_000):
        key = f"rollout-{i}"
        before = four[Replicas(four).choose(key)]
        after = without_2[Replicas(without_2).choose(key)]
        if before != four[2]:
            assert after == before  # keys of the replicas that stay never move
        else:
            moved += 1
            assert after == four[Replicas(four).order(key)[1]]  # to the next heaviest
    assert 800 < moved < 1_200  # about a quarter: replica 2's share


def test_adding_a_replica_moves_keys_only_onto_it():
    three = [replica_name("env", i) for i in range(3)]
    four = [*three, replica_name("env", 3)]
    for i in range(3_000):
        key = f"rollout-{i}"
        after = four[Replicas(four).choose(key)]
        assert after in (three[Replicas(three).choose(key)], four[3])


def test_an_empty_replica_list_is_refused():
    with pytest.raises(ValueError):
        Replicas([])


# --- the config -----------------------------------------------------------------------------------


def _load(**counter: Any) -> GlobalConfig:
    plugins = get_plugin_manager()
    return load_config(
        base={"head_server": {"port": 0}, "counter": {"plugin": "counter", **counter}},
        env_file=None,
        server_types=plugins.servers(),
        load_errors=plugins.load_errors,
    )


def test_replicas_get_distinct_free_ports_published_in_the_config():
    config = _load(replicas=3)
    counter = config.instances["counter"]
    assert counter.replicas == 3 and counter.replica_names == ["counter#0", "counter#1", "counter#2"]
    assert len(set(counter.replica_ports)) == 3 and counter.replica_ports[0] == counter.port
    assert config.data["counter"]["replica_ports"] == counter.replica_ports
    assert counter.replica_urls == [f"http://127.0.0.1:{p}" for p in counter.replica_ports]
    assert "replicas" not in counter.options and "replica_ports" not in counter.options  # not server options
    # What a process reads back from the published config is the same.
    published = GlobalConfig.from_yaml(config.to_yaml()).instances["counter"]
    assert published.replica_urls == counter.replica_urls


def test_each_replica_process_gets_its_own_port_and_knows_the_others():
    config = _load(replicas=2)
    counter = config.instances["counter"]
    second = config.for_replica("counter", 1).instances["counter"]
    assert second.port == counter.replica_ports[1] and second.options["port"] == counter.replica_ports[1]
    assert second.replica_urls == counter.replica_urls
    assert config.instances["counter"].port == counter.replica_ports[0]  # the original is untouched


def test_one_replica_is_the_default_and_changes_nothing():
    counter = _load().instances["counter"]
    assert counter.replicas == 1 and counter.replica_ports == [] and counter.replica_names == ["counter"]
    assert counter.replica_urls == [counter.url]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"replicas": 0}, "counter.replicas: 0 is not a number of replicas"),
        ({"replicas": "two"}, "counter.replicas: 'two' is not a number of replicas"),
        ({"replicas": True}, "counter.replicas: True is not a number of replicas"),
        ({"replicas": 1.5}, "counter.replicas: 1.5 is not a number of replicas"),
        ({"replicas": 2, "replica_ports": [0]}, "counter.replica_ports: expected a list of 2 ports"),
        ({"replicas": 2, "replica_ports": [0, 70000]}, "counter.replica_ports[1]: 70000 is out of range"),
        ({"replicas": 2, "replica_ports": [5000, 5000]}, "counter.replica_ports: a port appears twice"),
        ({"replicas": 2, "port": 5001, "replica_ports": [5000, 5002]}, "the first replica's port must be counter.port"),
    ],
)
def test_bad_replica_settings_are_config_errors_naming_the_key(value, message):
    with pytest.raises(ConfigError) as info:
        _load(**value)
    assert message in str(info.value)


def test_replica_ports_given_are_kept_and_clash_with_other_instances_is_refused():
    config = _load(replicas=2, replica_ports=[0, 23_456])
    counter = config.instances["counter"]
    assert counter.replica_ports[1] == 23_456 and counter.replica_ports[0] == counter.port != 0
    plugins = get_plugin_manager()
    with pytest.raises(ConfigError, match="port 23456 is also used by"):
        load_config(
            base={
                "a": {"plugin": "counter", "port": 23_456},
                "counter": {"plugin": "counter", "replicas": 2, "replica_ports": [0, 23_456]},
            },
            env_file=None,
            server_types=plugins.servers(),
        )


# --- routing against real replicas ------------------------------------------------------------------


def _config(replicas: int = 3, **extra: Any) -> dict[str, Any]:
    return {"counter": {"plugin": "counter", "replicas": replicas}, **extra}


async def _rollout(client: ServerClient, key: str, initial: int, add: int) -> dict[str, str]:
    """seed → increment → verify, with a rollout key fixed by the test; the cookies, left open."""
    cookies = {ROLLOUT_COOKIE: key}
    await client.post("counter", "/seed_session", {"initial_count": initial}, cookies=cookies)
    await client.post("counter", "/tools/increment_counter", {"count": add}, cookies=cookies)
    verdict = await client.post(
        "counter",
        "/verify",
        {"expected_count": initial + add, "response": {"output": []}, "responses_create_params": {"input": "count"}},
        cookies=cookies,
    )
    assert verdict["reward"] == 1.0 and verdict["final_count"] == initial + add
    return cookies


async def _holders(urls: list[str], cookies: dict[str, str], token: str | None) -> dict[int, int]:
    """Ask every replica directly, by URL, for this rollout's counter: index -> HTTP status."""
    statuses = {}
    async with ServerClient(config=ClientConfig(max_attempts=1), auth_token=token, auth_urls=urls) as direct:
        for index, url in enumerate(urls):
            try:
                await direct.post(url, "/tools/get_counter_value", {}, cookies=dict(cookies))
                statuses[index] = 200
            except ServerHTTPError as exc:
                statuses[index] = exc.status
    return statuses


def test_every_call_of_a_rollout_reaches_one_replica_and_sessions_are_disjoint():
    """60 rollouts over 3 counter replicas (each its own signing key, the run's token required): each
    rollout's state lives on exactly the replica its key hashes to, the others refuse its cookie, and
    every replica holds some rollouts."""
    token = "t" * 32
    with running_servers(_config(auth_token=token)) as config:
        urls = config.instances["counter"].replica_urls

        async def main() -> dict[int, list[str]]:
            held: dict[int, list[str]] = {i: [] for i in range(3)}
            async with ServerClient(config) as client:
                for i in range(60):
                    key = f"rollout-{i}"
                    cookies = await _rollout(client, key, initial=i, add=2)
                    statuses = await _holders(urls, cookies, token)
                    owner = choose_replica(key, NAMES)
                    assert statuses[owner] == 200, statuses
                    assert [s for j, s in statuses.items() if j != owner] == [403, 403]  # not their cookie
                    held[owner].append(key)
                    await client.post("counter", "/close_session", {}, cookies=cookies)
            return held

        held = asyncio.run(main())
    assert sum(len(keys) for keys in held.values()) == 60
    assert all(len(keys) >= 10 for keys in held.values()), {i: len(k) for i, k in held.items()}


def test_a_rollout_without_a_key_gets_one_and_keeps_it():
    with running_servers(_config()) as config:

        async def main() -> tuple[dict[str, str], str]:
            async with ServerClient(config) as client:
                cookies: dict[str, str] = {}
                await client.post("counter", "/seed_session", {"initial_count": 4}, cookies=cookies)
                key = cookies[ROLLOUT_COOKIE]
                for _ in range(5):  # would fail with 403 on any other replica
                    await client.post("counter", "/tools/increment_counter", {"count": 1}, cookies=cookies)
                verdict = await client.post(
                    "counter",
                    "/verify",
                    {"expected_count": 9, "response": {"output": []}, "responses_create_params": {"input": "count"}},
                    cookies=cookies,
                )
                assert verdict["reward"] == 1.0
                assert cookies[ROLLOUT_COOKIE] == key
                return cookies, key

        cookies, key = asyncio.run(main())
    assert len(key) == 16 and "gym_session_counter" in cookies


def test_calls_without_a_rollout_take_turns():
    client = ServerClient(urls={"counter": ["http://127.0.0.1:1", "http://127.0.0.1:2", "http://127.0.0.1:3"]})
    assert [client.route("counter")[1] for _ in range(6)] == NAMES * 2
    # The fixed vector: rollout-0 goes to counter#1.
    assert client.route("counter", {ROLLOUT_COOKIE: "rollout-0"}) == ("http://127.0.0.1:2", "counter#1")
    assert client.url("counter") == "http://127.0.0.1:1" and len(client.replica_urls("counter")) == 3
    single = ServerClient(urls={"one": "http://127.0.0.1:9"})
    cookies: dict[str, str] = {}
    assert single.route("one", cookies) == ("http://127.0.0.1:9", "one") and cookies == {}  # no key needed


@contextlib.contextmanager
def _replicas_except(down: int) -> Iterator[GlobalConfig]:
    """Counter with 3 replicas in threads, replica ``down`` not running (its port refuses)."""
    plugins = get_plugin_manager()
    config = load_config(base={"head_server": {"port": 0}, **_config()}, env_file=None, server_types=plugins.servers())
    threads = [ServerThread(build_head_app(config), port=config.head_port).start()]
    try:
        for index in range(3):
            if index != down:
                own = config.for_replica("counter", index)
                threads.append(
                    ServerThread(
                        build_server(own, "counter", plugins).build_app(), "127.0.0.1", own.instances["counter"].port
                    ).start()
                )
        yield config
    finally:
        for thread in reversed(threads):
            thread.stop()


def test_a_dead_replica_fails_only_its_rollouts_typed_and_naming_it():
    """No failover: the rollout's session lived on the dead replica. The failure is typed (the
    collector retries it with a fresh key); rollouts of the other replicas go on."""
    keys = [f"rollout-{i}" for i in range(12)]  # choices: [1, 0, 2, 0, 1, 2, 2, 2, 2, 0, 0, 2]
    with _replicas_except(down=2) as config:

        async def main() -> dict[str, str]:
            outcome = {}
            async with ServerClient(config, config=ClientConfig(max_attempts=2, backoff_s=0.01)) as client:
                for i, key in enumerate(keys):
                    try:
                        await _rollout(client, key, initial=i, add=1)
                        outcome[key] = "ok"
                    except ServerUnavailableError as exc:
                        assert exc.server == "counter#2" and exc.path == "/seed_session"
                        outcome[key] = "down"
            return outcome

        outcome = asyncio.run(main())
    assert {k for k, v in outcome.items() if v == "down"} == {k for k in keys if choose_replica(k, NAMES) == 2}
    assert list(outcome.values()).count("ok") == 6


def test_the_head_publishes_replicas_and_a_client_from_the_head_routes_to_them():
    with running_servers(_config(replicas=2)) as config:

        async def main() -> tuple[list[dict], tuple[str, ...]]:
            client = await ServerClient.from_head(config.head_url)
            async with client:
                rows = await client.get(config.head_url, "/server_instances")
                await _rollout(client, "rollout-3", initial=1, add=1)
                return rows, client.replica_urls("counter")

        rows, urls = asyncio.run(main())
    [row] = rows
    assert [r["name"] for r in row["replicas"]] == ["counter#0", "counter#1"]
    assert [r["url"] for r in row["replicas"]] == list(urls) == config.instances["counter"].replica_urls
