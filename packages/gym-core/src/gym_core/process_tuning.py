"""Process-wide settings for a process with many requests in flight (a server, the collector): the
garbage collector's thresholds and the open-files limit. A leaf module (it imports only :mod:`gc`
and :mod:`resource`) so that the collector can tune its process without importing a server
framework; :mod:`gym_core.serving` re-exports :func:`tune_gc`."""

from __future__ import annotations

import gc
import resource

__all__ = ["raise_open_files_limit", "tune_gc"]

# Where the hard limit is "unlimited" (macOS reports that), the kernel still refuses more than its own
# per-process maximum: ask for this much instead.
_UNLIMITED_TARGET = 1 << 20


def tune_gc(young_threshold: int = 50_000) -> None:
    """Garbage-collector settings for a process with many requests in flight (a server, the collector).

    What is alive now (modules, the app) is frozen out of later collections, and the youngest
    generation is collected after ``young_threshold`` net allocations instead of CPython's 700. With
    hundreds of rollouts in flight most young objects are still in use at a collection, so the default
    rescanned the same in-flight objects over and over: at 1,024 rollouts in flight the agent spent
    about 40 % of the time in collections (docs/performance.md). Reference cycles are still
    collected, a little later.
    """
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(young_threshold, older, oldest)


def raise_open_files_limit() -> int:
    """Raise this process's soft limit on open files (``RLIMIT_NOFILE``) to its hard limit, as far as
    the system allows; the soft limit now.

    Every connection is a file descriptor: an agent with 1,000 pooled connections to each of two
    servers, plus its callers' connections, needs thousands, while many systems start processes with
    a soft limit of 1,024 (macOS: 256), which makes connections fail with "Too many open files".
    The hard limit is what an unprivileged process may raise its own soft limit to; children started
    afterwards inherit it.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = _UNLIMITED_TARGET if hard == resource.RLIM_INFINITY else hard
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError):
            pass  # a system maximum below the hard limit: keep what we have
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]
