"""Which replica of a server instance serves a rollout: rendezvous hashing of a rollout key.

A leaf module (stdlib only), shared by :class:`~gym_core.client.ServerClient` and whatever else must
agree on the choice (a model server pinning sessions to engine replicas, placement on a cluster).

An instance with ``replicas: N`` runs N processes behind one name. Every call of one rollout must
reach the replica holding its session state, and every gym process must make the same choice
without asking anyone. So the choice is a pure function of two strings: the rollout's key and the
replicas' names (``counter#0``, ``counter#1``...). Rendezvous (highest random weight) hashing gives
each replica the weight ``blake2b(replica, key)`` (:func:`replica_weight`) and picks the heaviest: keys spread evenly, and
removing a replica moves only the keys it held (each to its next heaviest), which a modulo of the
hash would not. Names, not URLs, are hashed, so a key goes to the same replica index in every run.

The key is the rollout's, not the session cookie's: the cookie is issued by the replica that served
``seed_session``, after the choice had to be made. A rollout's key travels as the cookie
:data:`ROLLOUT_COOKIE` in the rollout's cookie dict, which every call of the rollout carries anyway.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Sequence

__all__ = [
    "ROLLOUT_COOKIE",
    "Replicas",
    "replica_name",
    "replica_weight",
    "rendezvous_order",
    "choose_replica",
    "new_rollout_key",
]

ROLLOUT_COOKIE = "gym_rollout"
"""The cookie holding a rollout's routing key, set by the caller's client on the rollout's first call
to a replicated instance and sent with every later call of the rollout."""


def replica_name(instance: str, index: int) -> str:
    """The name of replica ``index`` of ``instance`` (``counter#1``): its process, log prefix and hash input."""
    return f"{instance}#{index}"


def replica_weight(key: str, replica: str) -> int:
    """The weight of ``replica`` for ``key``: the first 64 bits (big-endian) of
    ``blake2b(replica + "\\0" + key, digest_size=8)``, NUL-separated so that ``("ab", "c")`` and
    ``("a", "bc")`` differ. The same in every process and on every platform."""
    digest = hashlib.blake2b(f"{replica}\0{key}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


class Replicas:
    """The replicas of one instance, by name, ready to route keys: :func:`replica_weight` for each,
    with the hash of each name's prefix computed once (a route costs one hash update per replica)."""

    __slots__ = ("names", "_prefixes")

    def __init__(self, names: Sequence[str]):
        if not names:
            raise ValueError("no replicas to choose from")
        self.names = tuple(names)
        self._prefixes = [hashlib.blake2b(f"{name}\0".encode(), digest_size=8) for name in self.names]

    def __len__(self) -> int:
        return len(self.names)

    def choose(self, key: str) -> int:
        """The index of the replica that serves ``key``: the heaviest (the lowest index on a tie)."""
        data = key.encode()
        best, best_digest = 0, b""
        for index, prefix in enumerate(self._prefixes):
            hasher = prefix.copy()
            hasher.update(data)
            digest = hasher.digest()  # 8 bytes, big-endian: bytes order as the integers do
            if digest > best_digest:
                best, best_digest = index, digest
        return best

    def order(self, key: str) -> list[int]:
        """The indexes from the heaviest for ``key`` to the lightest: the first is the key's replica,
        the next the one it moves to if that one is removed."""
        weights = [replica_weight(key, name) for name in self.names]
        return sorted(range(len(self.names)), key=lambda i: (-weights[i], i))


def rendezvous_order(key: str, replicas: Sequence[str]) -> list[int]:
    """The indexes of ``replicas`` (their names) from the heaviest for ``key`` to the lightest."""
    return Replicas(replicas).order(key)


def choose_replica(key: str, replicas: Sequence[str]) -> int:
    """The index of the replica (among ``replicas``, their names) that serves ``key``."""
    return Replicas(replicas).choose(key)


def new_rollout_key() -> str:
    """A fresh random rollout key (16 hex digits): rollouts spread evenly over the replicas, and a
    retried rollout gets a new key, so it may land on another replica."""
    return secrets.token_hex(8)
