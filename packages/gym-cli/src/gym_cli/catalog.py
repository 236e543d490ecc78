"""The gym catalog, ``workspace.toml``: which plugins exist, their kind, and where they come from.

Found by ``$GYM_WORKSPACE`` or by walking up from the current directory. Outside a workspace it is
the user's catalog, ``$GYM_HOME/workspace.toml``, where ``gym plugin install`` records published
plugins; until then it is empty and plugins come from the Python environment running gym only.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import tomlkit

from gym_core.errors import GymError

__all__ = ["CATALOG_FILE", "CatalogEntry", "Catalog", "find_catalog", "user_catalog_file"]

CATALOG_FILE = "workspace.toml"


@dataclass(frozen=True)
class CatalogEntry:
    """One ``[plugins.<name>]`` table: a server type's name, its kind, and its package's source
    (``find_links`` and ``index_url``: where a requirement is looked up besides PyPI)."""

    name: str
    kind: str | None
    path: Path | None = None
    requirement: str | None = None
    find_links: tuple[str, ...] = ()
    index_url: str | None = None

    @property
    def source(self) -> str:
        return str(self.path) if self.path is not None else (self.requirement or "")


class Catalog:
    """The plugins of ``workspace.toml`` (none when ``file`` is None), by server type name."""

    def __init__(self, file: Path | None):
        self.file = file
        self.root = file.parent if file is not None else Path.cwd()
        self._doc = tomlkit.parse(file.read_text()) if file is not None and file.is_file() else tomlkit.document()
        self.entries: dict[str, CatalogEntry] = {}
        for name, spec in (self._doc.get("plugins") or {}).items():
            path = spec.get("path")
            self.entries[name] = CatalogEntry(
                name=name,
                kind=spec.get("kind"),
                path=(self.root / path).resolve() if path else None,
                requirement=spec.get("requirement"),
                find_links=tuple(spec.get("find-links") or ()),
                index_url=spec.get("index-url"),
            )

    @property
    def in_workspace(self) -> bool:
        """Whether this is a workspace's catalog (a file that exists, not the user's catalog)."""
        return self.file is not None and self.file.is_file() and self.file.resolve() != user_catalog_file().resolve()

    @property
    def core_path(self) -> Path | None:
        """gym-core's package directory, installed into every plugin's venv."""
        path = (self._doc.get("core") or {}).get("path")
        return (self.root / path).resolve() if path else None

    def add(
        self,
        name: str,
        *,
        kind: str | None,
        path: Path | None = None,
        requirement: str | None = None,
        find_links: tuple[str, ...] = (),
        index_url: str | None = None,
    ) -> CatalogEntry:
        """Record a plugin (replacing an entry of that name) and save the file, comments kept."""
        if self.file is None:
            raise GymError(f"no {CATALOG_FILE} found here or above; create one or set $GYM_WORKSPACE")
        table = tomlkit.table()
        if kind:
            table["kind"] = kind
        if path is not None:
            try:
                table["path"] = str(path.resolve().relative_to(self.root))
            except ValueError:
                table["path"] = str(path.resolve())
        if requirement:
            table["requirement"] = requirement
        if find_links:
            table["find-links"] = list(find_links)
        if index_url:
            table["index-url"] = index_url
        self.file.parent.mkdir(parents=True, exist_ok=True)
        plugins = self._doc.setdefault("plugins", tomlkit.table(is_super_table=True))
        plugins[name] = table
        self.file.write_text(tomlkit.dumps(self._doc))
        entry = CatalogEntry(name, kind, path.resolve() if path else None, requirement, tuple(find_links), index_url)
        self.entries[name] = entry
        return entry


def find_catalog(start: Path | None = None) -> Catalog:
    """The catalog of the workspace containing ``start`` (default: the current directory)."""
    env = os.environ.get("GYM_WORKSPACE")
    if env:
        path = Path(env)
        return Catalog(path / CATALOG_FILE if path.is_dir() else path)
    here = (start or Path.cwd()).resolve()
    for directory in (here, *here.parents):
        candidate = directory / CATALOG_FILE
        if candidate.is_file():
            return Catalog(candidate)
    user = user_catalog_file()
    return Catalog(user if user.is_file() else None)


def user_catalog_file() -> Path:
    """The catalog used outside any workspace: ``$GYM_HOME/workspace.toml`` (it may not exist yet)."""
    from gym_core.auth import gym_home

    return gym_home() / CATALOG_FILE
