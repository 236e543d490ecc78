from __future__ import annotations

from gym_core import ServerConfig


class MathConfig(ServerConfig, kw_only=True):
    # Hard limit per verification: a pathological expression cannot stall the server.
    verify_timeout_s: float = 5.0
