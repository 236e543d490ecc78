"""Sessions: signed cookies, the TTL store, and the middleware over real GymServers."""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest
from litestar import Request, get

from gym_core.servers import GymServer, ServerConfig, json_response
from gym_core.sessions import Session, SessionSigner, SessionStore, cookie_name_for

# --- SessionSigner ---------------------------------------------------------------------------------


def test_signer_roundtrip():
    signer = SessionSigner(b"k" * 32)
    assert signer.unsign(signer.sign("abc123")) == "abc123"


@pytest.mark.parametrize(
    "tamper",
    [
        lambda v: "x" + v,  # another session id, same mac
        lambda v: v[:-1] + ("0" if v[-1] != "0" else "1"),  # mac changed
        lambda v: v.split(".")[0],  # no mac
        lambda v: v.split(".")[0] + ".",  # empty mac
        lambda v: "." + v.split(".")[1],  # empty id
        lambda v: "",
        lambda v: v + "00",  # longer mac
    ],
)
def test_signer_rejects_tampered_values(tamper):
    signer = SessionSigner("secret")
    value = signer.sign("session-1")
    assert signer.unsign(tamper(value)) is None


def test_signers_with_different_secrets_disagree_and_same_secrets_agree():
    a, b = SessionSigner("one"), SessionSigner("two")
    assert b.unsign(a.sign("s")) is None
    assert SessionSigner("one").unsign(a.sign("s")) == "s"
    assert SessionSigner(b"one").unsign(a.sign("s")) == "s"  # str and bytes secrets are the same key
    # Without a secret every signer gets its own random key.
    assert SessionSigner().unsign(SessionSigner().sign("s")) is None


def test_cookie_name_is_per_instance_and_valid():
    assert cookie_name_for("math") == "gym_session_math"
    assert cookie_name_for("math") != cookie_name_for("counter")
    assert cookie_name_for("my server.v2/x") == "gym_session_my_server_v2_x"


# --- Session --------------------------------------------------------------------------------------


def test_session_id_is_created_on_first_access_only():
    session = Session(None)
    assert not session.exists and not session.created
    first = session.id
    assert session.created and session.exists and session.id == first
    existing = Session("abc")
    assert existing.exists and existing.id == "abc" and not existing.created


# --- SessionStore ---------------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_store_evicts_idle_sessions():
    clock = Clock()
    store: SessionStore[dict] = SessionStore(ttl_s=10, clock=clock)
    store.set("a", {"n": 1})
    clock.now += 10  # exactly the TTL: still alive
    assert store.get("a") == {"n": 1}
    clock.now += 10.5
    assert store.get("a") is None
    assert "a" not in store and len(store) == 0
    assert store.get("a", {"default": True}) == {"default": True}


def test_store_keeps_touched_sessions_and_evicts_the_others():
    clock = Clock()
    store: SessionStore[str] = SessionStore(ttl_s=10, clock=clock)
    store.set("touched", "t")
    store.set("idle", "i")
    clock.now += 6
    assert store.get("touched") == "t"  # access renews the TTL
    clock.now += 6  # 12 s since "idle" was used, 6 s since "touched" was
    store.set("new", "n")  # any access sweeps
    assert "idle" not in store
    assert "touched" in store and "new" in store
    assert len(store) == 2
    clock.now += 3
    assert store.get("touched") == "t"
    clock.now += 11
    assert store.sweep() == 2  # touched (11 s) and new (14 s idle)
    assert len(store) == 0


def test_store_set_renews_the_ttl():
    clock = Clock()
    store: SessionStore[int] = SessionStore(ttl_s=10, clock=clock)
    store.set("a", 1)
    clock.now += 8
    store.set("a", 2)
    clock.now += 8
    assert store.get("a") == 2


def test_store_close_forgets_a_session():
    store: SessionStore[int] = SessionStore(ttl_s=10, clock=Clock())
    store.set("a", 1)
    assert store.close("a") is True
    assert store.close("a") is False
    assert store.get("a") is None and len(store) == 0


def test_get_or_create_calls_the_factory_once():
    clock = Clock()
    store: SessionStore[list] = SessionStore(ttl_s=10, clock=clock)
    calls = []

    def factory() -> list:
        calls.append(1)
        return []

    state = store.get_or_create("s", factory)
    state.append("x")
    assert store.get_or_create("s", factory) == ["x"]
    assert len(calls) == 1
    clock.now += 11
    assert store.get_or_create("s", factory) == []  # expired: a new state
    assert len(calls) == 2


def test_store_size_stays_bounded_over_many_sessions():
    clock = Clock()
    store: SessionStore[int] = SessionStore(ttl_s=10, clock=clock)
    largest = 0
    for i in range(20_000):
        store.set(f"s{i}", i)
        clock.now += 1
        largest = max(largest, len(store))
    # Sessions live 10 s, one is created per second, sweeps run every ttl/10 s.
    assert largest <= 12
    assert store.get("s19999") == 19999


# --- the middleware over a real server ------------------------------------------------------------


class SessionServer(GymServer):
    kind = "resources"

    def routes(self) -> list[Any]:
        @get("/whoami", sync_to_thread=False)
        def whoami(request: Request) -> Any:
            state = self.session_state(request, lambda: {"calls": 0})
            state["calls"] += 1
            return json_response({"id": self.session(request).id, "calls": state["calls"]})

        @get("/stateless", sync_to_thread=False)
        def stateless(request: Request) -> Any:
            return json_response({"exists": self.session(request).exists})

        return [*super().routes(), whoami, stateless]


def set_cookies(resp: aiohttp.ClientResponse) -> list[str]:
    return resp.headers.getall("Set-Cookie", [])


async def test_cookie_is_set_only_when_a_handler_uses_the_session(serve):
    server = SessionServer(name="alpha")
    with serve(server) as url:
        async with aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar()) as http:
            async with http.get(url + "/stateless") as resp:
                assert resp.status == 200 and await resp.json() == {"exists": False}
                assert set_cookies(resp) == []
            async with http.get(url + "/health") as resp:
                assert set_cookies(resp) == []
            async with http.get(url + "/whoami") as resp:
                body = await resp.json()
                (cookie,) = set_cookies(resp)
            name, _, rest = cookie.partition("=")
            value = rest.split(";")[0]
            assert name == "gym_session_alpha" == server.cookie_name
            assert "HttpOnly" in cookie and "Path=/" in cookie
            assert server._signer.unsign(value) == body["id"] and body["calls"] == 1
            # Sent back: same session, same state, no new cookie.
            async with http.get(url + "/whoami", headers={"Cookie": f"other=1; {name}={value}"}) as resp:
                assert await resp.json() == {"id": body["id"], "calls": 2}
                assert set_cookies(resp) == []
            async with http.get(url + "/stateless", headers={"Cookie": f"{name}={value}"}) as resp:
                assert await resp.json() == {"exists": True}


async def test_forged_or_foreign_cookies_get_a_fresh_session(serve):
    server = SessionServer(name="alpha")
    with serve(server) as url:
        async with aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar()) as http:
            async with http.get(url + "/whoami") as resp:
                real_id = (await resp.json())["id"]
            forged = [
                f"{real_id}.{'0' * 32}",  # a real id with a made-up mac
                SessionSigner("another secret").sign(real_id),  # signed by someone else
                real_id,  # unsigned
            ]
            for value in forged:
                async with http.get(url + "/whoami", headers={"Cookie": f"gym_session_alpha={value}"}) as resp:
                    body = await resp.json()
                    assert body["id"] != real_id and body["calls"] == 1
                    (cookie,) = set_cookies(resp)
                    assert server._signer.unsign(cookie.split(";")[0].partition("=")[2]) == body["id"]
            # A valid cookie of another instance's name is not this server's session.
            async with http.get(
                url + "/whoami", headers={"Cookie": f"gym_session_beta={server._signer.sign(real_id)}"}
            ) as resp:
                assert (await resp.json())["id"] != real_id


async def test_two_servers_on_one_host_keep_separate_sessions_in_a_shared_jar(serve):
    alpha, beta = SessionServer(name="alpha"), SessionServer(name="beta")
    assert alpha.cookie_name != beta.cookie_name
    with serve(alpha) as url_a, serve(beta) as url_b:
        # A browser-like jar: cookies do not isolate by port, both servers are 127.0.0.1.
        async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as http:
            async with http.get(url_a + "/whoami") as resp:
                a_id = (await resp.json())["id"]
            async with http.get(url_b + "/whoami") as resp:
                b_id = (await resp.json())["id"]
            async with http.get(url_a + "/whoami") as resp:
                assert await resp.json() == {"id": a_id, "calls": 2}
            async with http.get(url_b + "/whoami") as resp:
                assert await resp.json() == {"id": b_id, "calls": 2}
    assert a_id != b_id


async def test_shared_secret_lets_a_restarted_server_accept_its_cookies(serve):
    config = ServerConfig(session_secret="shared")
    first = SessionServer(config, name="alpha")
    with serve(first) as url:
        async with aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar()) as http:
            async with http.get(url + "/whoami") as resp:
                session_id = (await resp.json())["id"]
                cookie = set_cookies(resp)[0].split(";")[0]
    second = SessionServer(ServerConfig(session_secret="shared"), name="alpha")
    with serve(second) as url:
        async with aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar()) as http:
            async with http.get(url + "/whoami", headers={"Cookie": cookie}) as resp:
                body = await resp.json()
                assert body["id"] == session_id and set_cookies(resp) == []
