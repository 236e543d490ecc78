"""Helpers shared by gym-core's tests: real servers on loopback, in threads of the test process."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest

from gym_core.servers import GymServer
from gym_core.serving import ServerThread


@contextlib.contextmanager
def _serve(target: Any) -> Iterator[str]:
    app = target.build_app() if isinstance(target, GymServer) else target
    with ServerThread(app) as thread:
        yield thread.url


@pytest.fixture(scope="session")
def serve():
    """``with serve(server_or_app) as url:`` runs a GymServer (or any ASGI app) with uvicorn on loopback."""
    return _serve
