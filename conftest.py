"""Shared by every test of the workspace (pytest loads the rootdir's conftest.py first)."""

from __future__ import annotations

import signal

# Tests stop the processes they start with SIGINT, as Ctrl+C. A shell running a command in the
# background (`cmd &` without job control, as CI runners and `nohup` do) starts it with SIGINT
# ignored, and an ignored signal stays ignored in every process started from it: gym run and gym
# collect would never see the tests' Ctrl+C. Handle it here, so that children start with SIGINT's
# default (Python then turns it into KeyboardInterrupt, as in a terminal).
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
