from __future__ import annotations

import pytest

from gym_core.plugins import PluginManager


@pytest.fixture
def plugins() -> PluginManager:
    """A plugin manager with gym's first-party server plugins, loaded through their entry points."""
    return PluginManager()
