"""The open-files limit of processes with many connections (servers, the collector). A leaf module
(it imports only :mod:`resource`), so that the collector can raise its limit without importing a
server framework."""

from __future__ import annotations

import resource

__all__ = ["raise_open_files_limit"]

# Where the hard limit is "unlimited" (macOS reports that), the kernel still refuses more than its own
# per-process maximum: ask for this much instead.
_UNLIMITED_TARGET = 1 << 20


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
