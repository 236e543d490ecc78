"""Launcher decisions that need no processes: Ray only when asked for."""

from __future__ import annotations

import sys

import pytest
from rich.console import Console

from gym_core.config import GlobalConfig
from gym_core.errors import GymError

from gym_cli._launcher import _maybe_start_ray


def test_no_ray_unless_asked():
    sys.modules.pop("ray", None)
    _maybe_start_ray(GlobalConfig({"env": {"plugin": "counter"}}), [], Console(quiet=True))
    assert "ray" not in sys.modules


def test_asking_for_ray_without_it_is_a_clear_error():
    # Ray is not a dependency of gym (yet): asking for it says how to get it.
    config = GlobalConfig({"ray_head_node_address": "ray://10.0.0.1:10001"})
    with pytest.raises(GymError, match="ray_head_node_address is set.*pip install ray"):
        _maybe_start_ray(config, [], Console(quiet=True))
    with pytest.raises(GymError, match="plugins sandbox.*pip install ray"):
        _maybe_start_ray(GlobalConfig({}), ["sandbox"], Console(quiet=True))
