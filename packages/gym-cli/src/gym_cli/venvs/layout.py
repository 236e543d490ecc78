"""Where gym keeps its venvs, and where things are inside a venv.

Under ``home`` (``$GYM_HOME``, else the user cache directory ``gym``)::

    venvs/<name>-<key>/             a plugin's venv; complete once it holds the marker ``.gym-complete``
    venvs/.locks/<name>-<key>.lock  an ``fcntl.flock`` lock held while the venv is built
    logs/<name>-<key>.log           uv's full output of the last build
    wheels/<package>-<hash>/        wheels compiled with ``[tool.uv.extra-build-variables]``, reused
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["MARKER", "default_home", "venv_python", "site_packages"]

MARKER = ".gym-complete"
"""Written last into a venv once it is fully built; a venv without it is not trusted."""


def default_home() -> Path:
    """``$GYM_HOME``, else the user cache directory of gym (``~/.cache/gym`` on Linux)."""
    from gym_core.auth import gym_home

    return gym_home()


def venv_python(venv: Path) -> Path:
    """The interpreter of the venv at ``venv``."""
    return venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def site_packages(venv: Path) -> list[Path]:
    """The site-packages directories of the venv at ``venv`` (none if it does not exist)."""
    return sorted(venv.glob("lib/python*/site-packages")) + (
        [venv / "Lib" / "site-packages"] if os.name == "nt" else []
    )
