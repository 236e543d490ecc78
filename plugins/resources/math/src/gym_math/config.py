"""Options of the ``math`` resources server (light: no sympy or math-verify import)."""

from __future__ import annotations

from typing import Annotated

from msgspec import Meta

from gym_core import ServerConfig

__all__ = ["MathConfig"]


class MathConfig(ServerConfig, kw_only=True):
    verify_timeout_s: Annotated[
        float, Meta(gt=0, description="hard limit per verification: a pathological expression cannot stall the server")
    ] = 5.0
