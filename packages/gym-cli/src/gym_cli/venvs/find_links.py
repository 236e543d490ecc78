"""The kept wheels a venv built by hand from the workspace should be offered (``--find-links``).

llama-cpp-python takes more than 15 minutes to compile here. gym keeps the wheel it was compiled into
with the workspace's build variables under ``$GYM_HOME/wheels/`` (:class:`~gym_cli.venvs.wheels.Wheelhouse`);
a venv made with ``uv pip install`` (gym-train's, say) reuses it when given these arguments::

    uv pip install --python VENV/bin/python $(uv run python -m gym_cli.venvs.find_links) ...

Printed one argument a line (``--find-links``, then the directory), nothing when no wheel is kept yet.
"""

from __future__ import annotations

from pathlib import Path

from gym_cli.venvs.keys import build_variables
from gym_cli.venvs.layout import default_home
from gym_cli.venvs.uv import find_uv
from gym_cli.venvs.wheels import Wheelhouse

__all__ = ["harvest", "wheel_find_links"]


def wheel_find_links(root: Path, home: Path | None = None) -> list[str]:
    """``--find-links DIR`` arguments for the wheels under ``<home>/wheels`` compiled with the build
    variables of the workspace at ``root`` (after keeping those the workspace's ``.venv`` holds)."""
    variables, _ = build_variables(None, root)  # pyright: ignore[reportArgumentType]  # a root: no source needed
    wheelhouse = Wheelhouse((home or default_home()) / "wheels")
    args: list[str] = []
    for directory in wheelhouse.find_links(variables, root, find_uv() or "uv"):
        args += ["--find-links", str(directory)]
    return args


def harvest(venv_site: Path, root: Path, home: Path | None = None) -> None:
    """Keep the wheels uv compiled with the workspace's build variables for the venv whose
    site-packages is ``venv_site``, so that the next venv need not compile them again."""
    variables, _ = build_variables(None, root)  # pyright: ignore[reportArgumentType]
    Wheelhouse((home or default_home()) / "wheels").harvest(venv_site, variables, find_uv())


def main() -> None:
    from gym_cli.workspace import is_uv_workspace

    root = next((d for d in (Path.cwd(), *Path.cwd().parents) if is_uv_workspace(d)), None)
    if root is None:
        raise SystemExit("not in a gym workspace: run this from the repository")
    args = wheel_find_links(root)
    if args:
        print("\n".join(args))


if __name__ == "__main__":
    main()
