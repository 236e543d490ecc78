"""Sessions: a signed cookie per caller, and a per-server store of session state with an idle TTL.

Each server instance uses its own cookie name (``gym_session_<instance>``): cookies do not isolate
by port, so two servers on 127.0.0.1 would otherwise overwrite each other's session id in the
caller's cookie jar. A session id is only created, and its cookie only set, when a handler asks
for it, so stateless endpoints cost nothing. The cookie is read and set by
:class:`gym_core.asgi.SessionMiddleware`, one of the layers in front of every gym server.
"""

from __future__ import annotations

import hashlib
import hmac
import random
import re
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["Session", "SessionStore", "SessionSigner", "cookie_name_for"]

T = TypeVar("T")


def cookie_name_for(instance: str) -> str:
    """The cookie name a server instance uses; only characters valid in a cookie name."""
    return "gym_session_" + re.sub(r"[^A-Za-z0-9_\-]", "_", instance)


class SessionSigner:
    """Signs session ids so that a client cannot pick another caller's session."""

    def __init__(self, secret: bytes | str | None = None):
        if secret is None:
            secret = secrets.token_bytes(32)
        key = secret.encode() if isinstance(secret, str) else secret
        # Keyed BLAKE2s is a MAC by design, without the HMAC construction's extra objects per call
        # (this runs on every request); its key is at most 32 bytes.
        self._key = key if len(key) <= 32 else hashlib.blake2s(key).digest()

    def _mac(self, session_id: str) -> str:
        return hashlib.blake2s(session_id.encode(), key=self._key, digest_size=16).hexdigest()

    def sign(self, session_id: str) -> str:
        return f"{session_id}.{self._mac(session_id)}"

    def unsign(self, value: str) -> str | None:
        session_id, _, mac = value.partition(".")
        if session_id and mac and hmac.compare_digest(mac, self._mac(session_id)):
            return session_id
        return None


class Session:
    """A handler's view of its caller's session. ``id`` creates the session on first access."""

    __slots__ = ("_id", "created", "forged")

    def __init__(self, session_id: str | None, *, forged: bool = False):
        self._id = session_id
        self.created = False
        # The caller sent this server's cookie but its signature did not check out (tampered,
        # or signed by another run's secret): routes that need existing state refuse it.
        self.forged = forged

    @property
    def id(self) -> str:
        if self._id is None:
            # Unique, not secret (the cookie's MAC is what a client cannot forge): no system call.
            self._id = f"{random.getrandbits(128):032x}"
            self.created = True
        return self._id

    @property
    def exists(self) -> bool:
        """Whether the caller presented a valid session cookie (or one was created in this request)."""
        return self._id is not None


class SessionStore(Generic[T]):
    """State per session id, evicted after ``ttl_s`` seconds without access, on :meth:`close`, or,
    least recently used first, when more than ``max_sessions`` are held.

    Entries are kept in access order, so eviction only looks at the front. ``evictions`` counts
    the sessions dropped for idleness or for room (not those closed).
    """

    def __init__(
        self, ttl_s: float = 3600.0, *, max_sessions: int | None = None, clock: Callable[[], float] = time.monotonic
    ):
        self.ttl_s = ttl_s
        self.max_sessions = max_sessions
        self.evictions = 0
        self._clock = clock
        self._entries: OrderedDict[str, tuple[float, T]] = OrderedDict()
        self._next_sweep = 0.0

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, session_id: str) -> bool:
        return session_id in self._entries

    def get(self, session_id: str, default: T | None = None) -> T | None:
        now = self._sweep_if_due()
        entry = self._entries.get(session_id)
        if entry is None:
            return default
        if now - entry[0] > self.ttl_s:
            del self._entries[session_id]
            self.evictions += 1
            return default
        self._entries[session_id] = (now, entry[1])
        self._entries.move_to_end(session_id)
        return entry[1]

    def set(self, session_id: str, state: T) -> None:
        now = self._sweep_if_due()
        self._entries[session_id] = (now, state)
        self._entries.move_to_end(session_id)
        if self.max_sessions is not None:
            while len(self._entries) > self.max_sessions:
                self._entries.popitem(last=False)
                self.evictions += 1

    def get_or_create(self, session_id: str, factory: Callable[[], T]) -> T:
        state = self.get(session_id)
        if state is None:
            state = factory()
            self.set(session_id, state)
        return state

    def close(self, session_id: str) -> bool:
        """Forget a session now; whether it existed."""
        return self._entries.pop(session_id, None) is not None

    def sweep(self) -> int:
        """Evict every idle session; how many were evicted."""
        now = self._clock()
        evicted = 0
        while self._entries:
            session_id, (last_used, _) = next(iter(self._entries.items()))
            if now - last_used <= self.ttl_s:
                break
            del self._entries[session_id]
            evicted += 1
        self.evictions += evicted
        return evicted

    def _sweep_if_due(self) -> float:
        now = self._clock()
        if now >= self._next_sweep:
            self.sweep()
            self._next_sweep = now + max(self.ttl_s / 10, 0.001)
        return now
