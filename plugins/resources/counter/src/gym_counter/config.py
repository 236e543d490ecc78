"""Options of the ``counter`` resources server: the options every server has, nothing more."""

from __future__ import annotations

from gym_core import ServerConfig

__all__ = ["CounterConfig"]


class CounterConfig(ServerConfig, kw_only=True):
    pass
