"""Where a plugin's package comes from, and the names it goes by.

A plugin package has a *distribution* name (``gym-my-env``, PEP 503-normalised by
:func:`normalize_name` wherever two are compared) and registers one or more *server types*
(``my_env``) through its entry point in group ``gym``. Its :class:`PluginSource` is either a local
package directory or a requirement, which is what its venv is built from.
"""

from __future__ import annotations

import functools
import os
import re
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gym_core.errors import GymError
from gym_core.plugins import ENTRY_POINT_GROUP

from gym_cli.catalog import Catalog, CatalogEntry

__all__ = [
    "PluginSource",
    "normalize_name",
    "plugin_name_of",
    "requirement_name",
    "read_pyproject",
    "project_table",
    "source_of_directory",
    "source_of_entry",
    "looks_like_path",
    "workspace_distributions",
]

_REQUIREMENT_NAME = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)")
_BARE_REQUIREMENT = re.compile(r"\s*[A-Za-z0-9][A-Za-z0-9._-]*\s*(\[[^\]]*\])?\s*")


def normalize_name(name: str) -> str:
    """A distribution name as PEP 503 compares them: lowercase, runs of ``-_.`` made one ``-``."""
    return re.sub(r"[-_.]+", "-", name).lower()


def plugin_name_of(distribution: str) -> str:
    """The conventional server type name of a distribution: ``gym-my-env`` → ``my_env``."""
    name = normalize_name(distribution)
    return (name[4:] if name.startswith("gym-") else name).replace("-", "_")


def requirement_name(requirement: str) -> str | None:
    """The distribution name a requirement starts with (``gym-math>=0.2`` → ``gym-math``), if any."""
    match = _REQUIREMENT_NAME.match(requirement)
    return match.group(1) if match else None


def read_pyproject(directory: Path) -> dict[str, Any]:
    """``directory/pyproject.toml``, parsed; ``OSError`` or ``tomllib.TOMLDecodeError`` as they come.
    Parsed once while the file is unchanged: the result is shared, so callers must not modify it."""
    path = directory / "pyproject.toml"
    stat = os.stat(path)
    # `gym plugin list` keys every plugin's venv, each reading the same workspace and gym-core
    # pyproject.toml files: parsing them again each time was most of its run.
    return _parse_toml(os.fspath(path), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=256)
def _parse_toml(path: str, mtime_ns: int, size: int) -> dict[str, Any]:
    with open(path, "rb") as f:
        return tomllib.load(f)


def project_table(directory: Path) -> dict[str, Any]:
    """The ``[project]`` table of ``directory``'s pyproject.toml; a :class:`GymError` saying why not."""
    try:
        return read_pyproject(directory).get("project", {})
    except OSError as exc:
        raise GymError(f"cannot read {directory / 'pyproject.toml'}: {exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise GymError(f"{directory / 'pyproject.toml'} is not valid TOML: {exc}") from exc


@dataclass(frozen=True)
class PluginSource:
    """Where a plugin comes from: a local package directory (``path``) or a requirement (``requirement``,
    e.g. ``gym-math>=0.2`` from PyPI). ``name`` is the server type it is looked up by. ``version`` pins a
    bare requirement name (``gym-math`` + ``0.2.1`` installs ``gym-math==0.2.1``) and is part of the
    venv key either way. A requirement is looked up on PyPI, or on ``index_url`` instead, and also in
    ``find_links`` (directories or URLs of package files, as ``gym plugin build --out`` writes them).
    ``extras``: the package's optional dependency groups installed with it (``ray`` when the run is
    on a Ray cluster and the package declares it)."""

    name: str
    path: Path | None = None
    requirement: str | None = None
    version: str | None = None
    find_links: tuple[str, ...] = ()
    index_url: str | None = None
    extras: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if (self.path is None) == (self.requirement is None):
            raise ValueError(f"plugin {self.name!r}: give exactly one of path and requirement")
        if self.path is not None and not isinstance(self.path, Path):
            object.__setattr__(self, "path", Path(self.path))
        object.__setattr__(self, "find_links", tuple(self.find_links))
        object.__setattr__(self, "extras", tuple(sorted(set(self.extras))))

    def index_args(self) -> list[str]:
        """uv's arguments saying where the requirement and its dependencies are looked up."""
        args = [arg for link in self.find_links for arg in ("--find-links", link)]
        return args + (["--index-url", self.index_url] if self.index_url else [])

    @property
    def install_requirement(self) -> str | None:
        """The requirement handed to uv (None for a path source)."""
        if self.requirement is None:
            return None
        requirement = self.requirement
        if self.version and _BARE_REQUIREMENT.fullmatch(requirement):
            requirement = f"{requirement.strip()}=={self.version}"
        if self.extras:
            from packaging.requirements import Requirement

            parsed = Requirement(requirement)
            parsed.extras |= set(self.extras)
            requirement = str(parsed)
        return requirement

    def describe(self) -> str:
        return str(self.path) if self.path is not None else str(self.install_requirement)


def source_of_directory(directory: Path) -> tuple[PluginSource, str]:
    """The source of the plugin package in ``directory`` and its distribution name.

    The source is named after the package's (first) entry point in group ``gym``; an error says how to
    fix a directory that is not a package or declares no such entry point.
    """
    directory = directory.expanduser().resolve()
    if not directory.is_dir():
        raise GymError(
            f"{directory} is not a directory: give a plugin package directory, a PyPI requirement or a catalog name"
        )
    if not (directory / "pyproject.toml").is_file():
        raise GymError(
            f"{directory} has no pyproject.toml: a plugin is a Python package (create one with `gym plugin new`)"
        )
    project = project_table(directory)
    distribution = project.get("name") or directory.name
    names = list((project.get("entry-points") or {}).get(ENTRY_POINT_GROUP) or {})
    if not names:
        raise GymError(
            f"{directory / 'pyproject.toml'} declares no entry point in group {ENTRY_POINT_GROUP!r}: add "
            f'[project.entry-points.{ENTRY_POINT_GROUP}] {plugin_name_of(distribution)} = "<module>.plugin"'
        )
    return PluginSource(name=names[0], path=directory), distribution


def source_of_entry(entry: CatalogEntry, extras: Sequence[str] = ()) -> PluginSource:
    """The source of a catalog entry's venv (with ``extras``, those of them its package declares: all
    of them for a requirement, whose declaration is not known before it is installed)."""
    if entry.path is not None and extras:
        declared = (project_table(Path(entry.path)).get("optional-dependencies") or {}).keys()
        extras = [extra for extra in extras if extra in declared]
    return PluginSource(
        name=entry.name,
        path=entry.path,
        requirement=entry.requirement,
        find_links=entry.find_links,
        index_url=entry.index_url,
        extras=tuple(extras),
    )


def looks_like_path(target: str) -> bool:
    """Whether a command-line argument names a directory rather than a catalog name or a requirement."""
    return os.sep in target or target.startswith((".", "~")) or Path(target).is_dir()


def workspace_distributions(catalog: Catalog) -> dict[str, Path]:
    """Normalised distribution name → package directory, for the catalog's local plugins."""
    found = {}
    for entry in catalog.entries.values():
        if entry.path is not None:
            try:
                name = read_pyproject(entry.path).get("project", {}).get("name")
            except (OSError, tomllib.TOMLDecodeError):
                continue
            if name:
                found[normalize_name(name)] = entry.path
    return found
