"""Plugins' isolated uv virtualenvs ("venvs"), one per plugin and set of dependencies.

- :mod:`~gym_cli.venvs.manager`: :class:`VenvManager` builds, reuses, lists and removes them.
- :mod:`~gym_cli.venvs.keys`: what a venv's key hashes.
- :mod:`~gym_cli.venvs.layout`: where they live under ``$GYM_HOME``.
- :mod:`~gym_cli.venvs.lock`: one builder per venv at a time, across processes.
- :mod:`~gym_cli.venvs.uv`: running uv.
- :mod:`~gym_cli.venvs.wheels`: compiled wheels kept for the next build.
"""

from gym_cli.venvs.keys import FORMAT_VERSION
from gym_cli.venvs.layout import MARKER, default_home
from gym_cli.venvs.manager import Venv, VenvInfo, VenvManager
from gym_cli.venvs.uv import UvNotFoundError, VenvBuildError, find_uv

__all__ = [
    "FORMAT_VERSION",
    "MARKER",
    "Venv",
    "VenvInfo",
    "VenvManager",
    "VenvBuildError",
    "UvNotFoundError",
    "default_home",
    "find_uv",
]
