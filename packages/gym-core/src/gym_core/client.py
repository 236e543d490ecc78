"""ServerClient: how gym servers (and the collector) call each other.

One pool of keep-alive connections per client (:mod:`gym_core.http1`), server names resolved to URLs through the global
config (the head server's), cookies carried explicitly per rollout, and retries that are always
bounded: connection failures and 429/502/503/504 answers (``retry_statuses``, by default
:data:`~gym_core.failures.CLIENT_RETRY_STATUSES`: the failure table) are retried with exponential
backoff and jitter, up to ``max_attempts`` and within ``deadline_s``, unless the answer carries
:data:`FINAL_HEADER`; every request has a timeout. Failures raise
:class:`~gym_core.errors.ServerCallError` subclasses naming server, path, status and attempts.

Cookies are per rollout, not per client: a shared cookie jar would mix the sessions of the
thousands of rollouts that share one connection pool. Callers pass a ``dict`` that collects the
cookies servers set and is sent back on every later call of the same rollout.

Replicas: an instance with ``replicas: N`` has N URLs behind its name. A call that carries a
rollout's cookie dict goes to the replica chosen by rendezvous hashing of the rollout's key
(:mod:`gym_core.routing`; the key is created on the rollout's first such call and kept in the dict
as the cookie ``gym_rollout``), so ``seed_session``, tools, ``verify`` and ``close_session`` of one
rollout reach the replica holding its session, in whichever process makes them. A call without
cookies (``/run``, ``GET /tools``) holds no session: replicas take turns. A replica that is down is
not skipped: the rollout's session lived there, so the call fails typed (``ServerUnavailableError``)
and the collector's retry, with a fresh key, is routed anew.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import time
from collections.abc import Collection, Iterator, Mapping, Sequence
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

import msgspec

from gym_core.errors import ServerCallError, ServerHTTPError, ServerTimeoutError, ServerUnavailableError, did_you_mean
from gym_core.failures import CLIENT_RETRY_STATUSES, FINAL_HEADER, SERVER_UNAVAILABLE
from gym_core.http1 import ConnectionFailed, ConnectTimeout, Pool, Response, origin_of
from gym_core.options import ClientConfig
from gym_core.routing import ROLLOUT_COOKIE, Replicas, new_rollout_key, replica_name

if TYPE_CHECKING:
    from gym_core.config import GlobalConfig

__all__ = ["ServerClient", "RETRY_STATUSES", "FINAL_HEADER", "TIMEOUT_HEADER", "REQUEST_DEADLINE", "error_fields"]

# The failure table's (gym_core.failures), under the names callers have imported from here.
RETRY_STATUSES = CLIENT_RETRY_STATUSES
# On every request: how many seconds the caller waits for this attempt's answer, so that a server can
# bound its own waits by it and answer (with a typed error) before the caller gives up.
TIMEOUT_HEADER = "x-gym-timeout"
_encoder = msgspec.json.Encoder()
# When (time.monotonic()) the request a gym server is serving must be answered: set from its
# caller's TIMEOUT_HEADER, so that the calls it makes for that request never outlive its caller's wait.
REQUEST_DEADLINE: ContextVar[float | None] = ContextVar("gym_request_deadline", default=None)


class ServerClient:
    """Calls gym servers by instance name (``"math"``) or by absolute URL."""

    def __init__(
        self,
        global_config: GlobalConfig | None = None,
        *,
        config: ClientConfig | None = None,
        urls: Mapping[str, str | Sequence[str]] | None = None,
        retry_statuses: Collection[int] = RETRY_STATUSES,
        auth_token: str | None = None,
        auth_urls: Collection[str] = (),
    ):
        self.global_config = global_config
        self.config = config or ClientConfig()
        self.retry_statuses = frozenset(retry_statuses)
        # name -> (each replica's URL, the replicas by name, which route rollout keys), resolved once
        self._replicas: dict[str, tuple[tuple[str, ...], Replicas]] = {}
        for name, given in (urls or {}).items():
            self._replicas[name] = _replica_table(name, [given] if isinstance(given, str) else list(given))
        self._turns: dict[str, Iterator[int]] = {}  # replicas taking turns at calls without a rollout
        # The run's token goes to the run's servers (named, or at one of their URLs), nowhere else.
        token = auth_token or (global_config.auth_token if global_config is not None else None)
        self._auth = {"authorization": f"Bearer {token}"} if token else None
        self._authorized_urls: set[str] = {_origin(url) for url in auth_urls} if token else set()
        if token and global_config is not None:
            self._authorized_urls |= {url for i in global_config.instances.values() for url in i.replica_urls}
            self._authorized_urls |= {global_config.head_url}
        self._pool: Pool | None = None

    @classmethod
    async def from_head(
        cls, head_url: str, *, config: ClientConfig | None = None, auth_token: str | None = None
    ) -> ServerClient:
        """A client resolving names through the global config published by a running head server;
        ``auth_token`` (default: ``$GYM_AUTH_TOKEN``, else the token file ``gym run`` wrote for this
        head) is the run's token, sent to its servers."""
        from gym_core.auth import token_for_head
        from gym_core.config import GlobalConfig

        token = auth_token or token_for_head(head_url)
        probe = cls(config=config)
        headers = {"authorization": f"Bearer {token}"} if token else None
        try:
            text = await probe.request(
                "GET", head_url.rstrip("/"), "/global_config_dict_yaml", server_name="head", headers=headers
            )
        finally:
            await probe.close()
        return cls(GlobalConfig.from_yaml(text.decode()), config=config, auth_token=token)

    def url(self, server: str) -> str:
        """The base URL of a server instance (``http://host:port``; its first replica's when it has
        several), or ``server`` itself if a URL."""
        return self.replica_urls(server)[0]

    def replica_urls(self, server: str) -> tuple[str, ...]:
        """The base URL of each replica of a server instance, in replica order (one for most)."""
        return self._resolve(server)[0]

    def _resolve(self, server: str) -> tuple[tuple[str, ...], Replicas]:
        found = self._replicas.get(server)
        if found is not None:
            return found
        if server.startswith(("http://", "https://")):
            return (server.rstrip("/"),), Replicas((server,))
        if self.global_config is None:
            raise ServerCallError(server, "", "no global config to resolve server names; pass urls= or a config")
        instances = self.global_config.instances
        if server not in instances:
            raise ServerCallError(server, "", f"no server instance named {server!r}{did_you_mean(server, instances)}")
        found = self._replicas[server] = _replica_table(server, instances[server].replica_urls)
        return found

    def route(self, server: str, cookies: dict[str, str] | None = None) -> tuple[str, str]:
        """The base URL and name of the replica of ``server`` that serves a call carrying ``cookies``
        (a rollout's cookie dict: its key's replica, the key created there if new; None: the next
        replica in turn). A server with one replica is its own answer."""
        urls, replicas = self._resolve(server)
        if len(urls) == 1:
            return urls[0], replicas.names[0]
        if cookies is None:
            turns = self._turns.get(server)
            if turns is None:
                turns = self._turns[server] = itertools.cycle(range(len(urls)))
            index = next(turns)
        else:
            key = cookies.get(ROLLOUT_COOKIE)
            if key is None:
                key = cookies[ROLLOUT_COOKIE] = new_rollout_key()
            index = replicas.choose(key)
        return urls[index], replicas.names[index]

    def _get_pool(self) -> Pool:
        pool = self._pool
        if pool is None or pool.closed or pool.loop is not asyncio.get_running_loop():
            pool = self._pool = Pool(limit=self.config.pool_limit, limit_per_host=self.config.pool_limit_per_host)
        return pool

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.close()
            self._pool = None

    async def __aenter__(self) -> ServerClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def auth_headers(self, url: str) -> dict[str, str] | None:
        """The run's token header for a request to ``url`` when it is one of the run's servers, else None."""
        return self._auth if self._auth is not None and _origin(url) in self._authorized_urls else None

    async def request(
        self,
        method: str,
        server: str,
        path: str,
        *,
        body: Any = None,
        cookies: dict[str, str] | None = None,
        timeout_s: float | None = None,
        server_name: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> bytes:
        """Send one request with bounded retries; the response body on 2xx, else a typed error.

        ``body`` is any msgspec-encodable object or raw ``bytes``; ``cookies`` is updated in place
        with the cookies the server sets; ``headers`` are sent with every attempt (``Authorization``...).
        A replicated server is called at the replica :meth:`route` picks; errors name that replica.
        """
        base, replica = self.route(server, cookies)
        name = server_name or replica
        auth = self._auth if not server.startswith(("http://", "https://")) else self.auth_headers(base)
        if auth:
            headers = {**auth, **(headers or {})}
        cfg = self.config
        data = body if body is None or isinstance(body, bytes) else _encoder.encode(body)
        if data is not None:
            headers = {"content-type": "application/json", **(headers or {})}
        # Every attempt has a time limit: None means the client's default, never "no limit".
        limit = timeout_s if timeout_s is not None else cfg.timeout_s
        deadline = time.monotonic() + cfg.deadline_s
        why = f"the overall deadline of {cfg.deadline_s:g} s"
        caller_deadline = REQUEST_DEADLINE.get()
        if caller_deadline is not None and caller_deadline < deadline:
            deadline, why = caller_deadline, "the deadline of the request it serves"
        try:
            origin = origin_of(base)
        except ValueError as exc:
            raise ServerCallError(name, path, str(exc)) from None
        pool = self._get_pool()
        attempt = 0
        while True:
            attempt += 1
            attempt_limit = min(limit, max(deadline - time.monotonic(), 0.001))  # the deadline bounds it too
            try:
                attempt_headers = {**(headers or {}), TIMEOUT_HEADER: f"{attempt_limit:.3f}"}
                if cookies:
                    attempt_headers["cookie"] = "; ".join(f"{name}={value}" for name, value in cookies.items())
                # The whole attempt is bounded, the wait for a pooled connection included; the
                # connect timeout bounds only opening one (waiting for a free one is not a failure).
                resp = await pool.request(
                    method,
                    origin,
                    path,
                    attempt_headers,
                    data,
                    min(cfg.connect_timeout_s, attempt_limit),
                    pool.loop.time() + attempt_limit,
                )
                payload = resp.body
                if cookies is not None:
                    _store_cookies(resp, cookies)
                if resp.status < 400:
                    return payload
                message, error_type = error_fields(payload)
                error: ServerCallError = ServerHTTPError(
                    name, path, message, status=resp.status, attempts=attempt, error_type=error_type
                )
                retryable = resp.status in self.retry_statuses and resp.header(FINAL_HEADER) is None
            except ConnectTimeout:
                error = ServerUnavailableError(
                    name, path, f"could not connect within {cfg.connect_timeout_s:g} s", attempts=attempt
                )
                retryable = SERVER_UNAVAILABLE.client_retries
            except TimeoutError:
                if attempt_limit < limit:
                    error = ServerTimeoutError(name, path, f"no answer before {why}", attempts=attempt)
                    retryable = False
                else:
                    error = ServerTimeoutError(name, path, f"no answer within {limit:g} s", attempts=attempt)
                    retryable = cfg.retry_timeouts
            except ConnectionFailed as exc:
                # Refused, reset, or closed mid-answer (the server died): transient.
                error = ServerUnavailableError(name, path, str(exc), attempts=attempt)
                retryable = SERVER_UNAVAILABLE.client_retries
            except ValueError as exc:  # a header with a line break: the request itself is wrong
                raise ServerCallError(name, path, str(exc), attempts=attempt) from None
            if not retryable or attempt >= cfg.max_attempts:
                raise error
            delay = min(cfg.backoff_max_s, cfg.backoff_s * 2 ** (attempt - 1)) * (0.5 + random.random())
            if time.monotonic() + delay > deadline:
                raise type(error)(
                    name,
                    path,
                    f"{error.detail}; overall deadline of {cfg.deadline_s:g} s reached",
                    status=error.status,
                    attempts=attempt,
                )
            await asyncio.sleep(delay)

    async def post(
        self,
        server: str,
        path: str,
        body: Any = None,
        *,
        cookies: dict[str, str] | None = None,
        type: Any = Any,
        timeout_s: float | None = None,
    ) -> Any:
        """POST a JSON body and decode the JSON answer (as ``type`` when given)."""
        payload = await self.request("POST", server, path, body=body, cookies=cookies, timeout_s=timeout_s)
        try:
            return msgspec.json.decode(payload, type=type)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise ServerCallError(server, path, f"unexpected answer: {exc}") from exc

    async def get(self, server: str, path: str, *, type: Any = Any, timeout_s: float | None = None) -> Any:
        payload = await self.request("GET", server, path, timeout_s=timeout_s)
        return msgspec.json.decode(payload, type=type)


# Cookies are per rollout, not a jar: gym servers set plain name=value session cookies, so the
# Cookie header is the pairs joined and a Set-Cookie keeps its first pair.


def _replica_table(server: str, urls: list[str]) -> tuple[tuple[str, ...], Replicas]:
    """Each replica's URL, and their names (hashed to route rollouts; ``server``'s own when it has one)."""
    if not urls:
        raise ServerCallError(server, "", "no URL given for this server")
    names = [replica_name(server, i) for i in range(len(urls))] if len(urls) > 1 else [server]
    return tuple(url.rstrip("/") for url in urls), Replicas(names)


def _origin(url: str) -> str:
    """``scheme://host:port`` of a URL: a run's server gets its token at any path (``.../v1`` of a model)."""
    return "/".join(url.split("/", 3)[:3])


def _store_cookies(resp: Response, cookies: dict[str, str]) -> None:
    for header in resp.getall("set-cookie"):
        name, sep, value = header.partition(";")[0].partition("=")
        if sep:
            cookies[name.strip()] = value.strip()


def error_fields(payload: bytes) -> tuple[str, str | None]:
    """The message and ``type`` of a gym JSON error body, else the start of whatever the server sent."""
    try:
        body = msgspec.json.decode(payload)
        error = body.get("error") if isinstance(body, dict) else None
        if isinstance(error, dict) and "message" in error:
            kind = error.get("type")
            return str(error["message"]), kind if isinstance(kind, str) else None
        if isinstance(error, str):
            return error, None
        if isinstance(body, dict) and "detail" in body:
            return str(body["detail"]), None
    except msgspec.DecodeError:
        pass
    return payload[:500].decode(errors="replace"), None
