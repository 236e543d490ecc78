"""The open-files limit: servers and the collector raise their soft limit to the hard one."""

from __future__ import annotations

import os
import resource

from gym_core.process_tuning import raise_open_files_limit


def test_soft_limit_is_raised_to_the_hard_limit():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    ceiling = hard if hard != resource.RLIM_INFINITY else 1 << 20
    # Lowered as a fresh system starts processes (1,024 on many): above what is open now, below the hard limit.
    low = min(ceiling - 1, max(256, len(os.listdir("/proc/self/fd")) + 64))
    resource.setrlimit(resource.RLIMIT_NOFILE, (low, hard))
    try:
        raised = raise_open_files_limit()
        assert raised == resource.getrlimit(resource.RLIMIT_NOFILE)[0] == ceiling > low
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
