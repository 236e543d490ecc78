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
    verify_workers: Annotated[
        Annotated[int, Meta(ge=1)] | None,
        Meta(description="worker processes comparing answers; default: $GYM_MATH_VERIFY_WORKERS or min(4, CPUs)"),
    ] = None
    verify_memory_limit_mb: Annotated[
        Annotated[int, Meta(ge=64)] | None,
        Meta(description="address-space limit of each worker (None: no limit); an answer needing more scores 0"),
    ] = 4096
