"""The workspace's member lists, derived from the members on disk.

A gym workspace is a uv workspace: the root ``pyproject.toml`` names its members by globs
(``[tool.uv.workspace] members``). The member packages found there are the one source of truth; from
them follow

- the root ``[project] dependencies``: every member's distribution, so that ``uv sync`` installs it;
- the root ``[tool.uv.sources]``: ``{ workspace = true }`` for each of them;
- the root ``[dependency-groups] test``: every member's own ``test`` group together (what the
  workspace's tests import), which the root's default ``dev`` group includes;
- ``workspace.toml``: a ``[plugins.<name>]`` entry (kind and path) for each member that is a gym
  plugin (declares an entry point in group ``gym``).

A member can opt out of the root venv with ``root-install = false`` under ``[tool.gym]`` in its own
``pyproject.toml`` (gym-train does: its torch must never enter the root ``uv sync``). Such a member is
left out of the first three lists, and found there it is reported and removed; it still is a uv
workspace member (``uv lock`` resolves it), installed only into the venv that runs it.

:func:`check` reports where the files differ from that, :func:`sync` rewrites what differs, and
:func:`register_member` adds one new member (``gym plugin new``). Files are edited with tomlkit:
comments and layout stay as they are, and running any of them twice changes nothing the second time.
"""

from __future__ import annotations

import fnmatch
import glob
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import tomlkit
from tomlkit.items import Array, Table

from gym_core.errors import GymError

from gym_cli.catalog import CATALOG_FILE
from gym_cli.sources import normalize_name, requirement_name

__all__ = [
    "KIND_DIRECTORIES",
    "Member",
    "find_members",
    "read_member",
    "check",
    "sync",
    "register_member",
    "is_uv_workspace",
]

# Where a plugin of each kind lives inside a workspace (`gym plugin new` puts it there).
KIND_DIRECTORIES = {"model": "plugins/models", "resources": "plugins/resources", "agent": "plugins/agents"}
ENTRY_POINT_GROUP = "gym"
ROOT_TEST_GROUP = "test"


@dataclass(frozen=True)
class Member:
    """A workspace member package: its directory (relative to the root), distribution name, the gym
    plugins it provides (entry-point names) and its ``test`` dependency group."""

    directory: str
    distribution: str
    plugins: tuple[str, ...] = ()
    test_requirements: tuple[str, ...] = ()
    root_install: bool = True
    """False when its pyproject.toml says ``[tool.gym] root-install = false``: not in the root venv."""


def _read(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text())
    except OSError as exc:
        raise GymError(f"cannot read {path}: {exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise GymError(f"{path} is not valid TOML: {exc}") from exc


def _group(pyproject: dict[str, Any], name: str, seen: frozenset[str] = frozenset()) -> list[str]:
    """The requirements of dependency group ``name``, ``{include-group = ...}`` entries expanded."""
    groups = pyproject.get("dependency-groups") or {}
    found: list[str] = []
    for entry in groups.get(name) or []:
        if isinstance(entry, str):
            found.append(entry)
        elif isinstance(entry, dict) and entry.get("include-group") not in seen | {name}:
            found.extend(_group(pyproject, entry["include-group"], seen | {name}))
    return found


def read_member(root: Path, directory: Path) -> Member:
    """The member package in ``directory`` (absolute, or relative to ``root``)."""
    directory = (root / directory).resolve()
    pyproject = _read(directory / "pyproject.toml")
    project = pyproject.get("project") or {}
    if not project.get("name"):
        raise GymError(f"{directory / 'pyproject.toml'} has no [project] name")
    plugins = tuple((project.get("entry-points") or {}).get(ENTRY_POINT_GROUP) or {})
    root_install = ((pyproject.get("tool") or {}).get("gym") or {}).get("root-install", True)
    if not isinstance(root_install, bool):
        raise GymError(
            f"{directory / 'pyproject.toml'}: [tool.gym] root-install must be true or false, not {root_install!r}"
        )
    relative = directory.relative_to(root.resolve()).as_posix()
    return Member(relative, project["name"], plugins, tuple(_group(pyproject, "test")), root_install)


def _member_globs(pyproject: dict[str, Any]) -> tuple[list[str], list[str]]:
    workspace = (pyproject.get("tool") or {}).get("uv", {}).get("workspace")
    if workspace is None:
        raise GymError("the root pyproject.toml has no [tool.uv.workspace] table: this is not a uv workspace")
    return list(workspace.get("members") or []), list(workspace.get("exclude") or [])


def find_members(root: Path) -> list[Member]:
    """The members of the uv workspace at ``root``, in the order of its member globs."""
    root = root.resolve()
    members_globs, exclude = _member_globs(_read(root / "pyproject.toml"))
    found: dict[str, Member] = {}
    for pattern in members_globs:
        for match in sorted(glob.glob(pattern, root_dir=root)):
            path = PurePosixPath(Path(match).as_posix())
            if any(fnmatch.fnmatch(str(path), ex) for ex in exclude) or not (root / path / "pyproject.toml").is_file():
                continue
            member = read_member(root, root / path)
            found.setdefault(member.directory, member)
    return list(found.values())


def _covered(directory: str, globs: Iterable[str]) -> bool:
    return any(fnmatch.fnmatch(directory, pattern) for pattern in globs)


# --- the edits ------------------------------------------------------------------------------------


class _Files:
    """The root pyproject.toml and workspace.toml as tomlkit documents, and what changed in them."""

    def __init__(self, root: Path):
        self.root = root.resolve()
        self.pyproject_path = self.root / "pyproject.toml"
        self.catalog_path = self.root / CATALOG_FILE
        self.pyproject = (
            tomlkit.parse(self.pyproject_path.read_text()) if self.pyproject_path.is_file() else tomlkit.document()
        )
        self.catalog = tomlkit.parse(self.catalog_path.read_text()) if self.catalog_path.is_file() else None
        self.changes: list[str] = []

    @property
    def is_uv_workspace(self) -> bool:
        return "workspace" in self.pyproject.get("tool", {}).get("uv", {})

    def save(self) -> None:
        if self.is_uv_workspace:
            self.pyproject_path.write_text(tomlkit.dumps(self.pyproject))
        if self.catalog is not None:
            self.catalog_path.write_text(tomlkit.dumps(self.catalog))

    # --- root pyproject.toml ---

    def _array(self, table: Any, key: str) -> Array:
        if key not in table:
            array = tomlkit.array()
            array.multiline(True)
            table[key] = array
        return table[key]

    def member_globs(self) -> Array:
        return self.pyproject["tool"]["uv"]["workspace"]["members"]

    def cover(self, directory: str) -> None:
        globs = self.member_globs()
        if not _covered(directory, [str(g) for g in globs]):
            globs.append(directory)
            self.changes.append(f"pyproject.toml: added {directory} to [tool.uv.workspace] members")

    def dependencies(self) -> Array:
        return self._array(self.pyproject["project"], "dependencies")

    def sources(self) -> Table:
        uv = self.pyproject["tool"]["uv"]
        if "sources" not in uv:
            uv["sources"] = tomlkit.table()
        return uv["sources"]

    def workspace_sourced(self) -> set[str]:
        return {
            normalize_name(name)
            for name, spec in self.sources().items()
            if isinstance(spec, dict) and spec.get("workspace")
        }

    def add_distribution(self, distribution: str) -> None:
        dependencies = self.dependencies()
        if normalize_name(distribution) not in {normalize_name(requirement_name(str(d)) or "") for d in dependencies}:
            dependencies.append(distribution)
            self.changes.append(f"pyproject.toml: added {distribution} to [project] dependencies")
        sources = self.sources()
        if normalize_name(distribution) not in {normalize_name(name) for name in sources}:
            spec = tomlkit.parse("spec = { workspace = true }")["spec"]
            spec.trivia.trail = "\n"
            _add_after_last_key(sources, distribution, spec)
            self.changes.append(f"pyproject.toml: added {distribution} = {{ workspace = true }} to [tool.uv.sources]")

    def remove_distribution(self, distribution: str, why: str = "no member provides it") -> None:
        """Drop a distribution from the root dependencies and sources (one no member provides any
        more, where its source is the workspace; or a member that opted out of the root venv)."""
        key = normalize_name(distribution)
        dependencies = self.dependencies()
        for index in reversed(range(len(dependencies))):
            if normalize_name(requirement_name(str(dependencies[index])) or "") == key:
                del dependencies[index]
                self.changes.append(f"pyproject.toml: removed {distribution} from [project] dependencies ({why})")
        sources = self.sources()
        for name in [n for n in sources if normalize_name(n) == key]:
            del sources[name]
            self.changes.append(f"pyproject.toml: removed {name} from [tool.uv.sources] ({why})")

    def set_test_group(self, requirements: list[str]) -> None:
        groups = self.pyproject.get("dependency-groups")
        if groups is None:
            groups = self.pyproject["dependency-groups"] = tomlkit.table()
        current = [str(r) for r in groups.get(ROOT_TEST_GROUP) or [] if isinstance(r, str)]
        if set(current) != set(requirements):
            array = tomlkit.array()
            array.extend(requirements)
            array.multiline(True)
            groups[ROOT_TEST_GROUP] = array
            added, removed = sorted(set(requirements) - set(current)), sorted(set(current) - set(requirements))
            what = "; ".join(
                p
                for p in (
                    f"added {', '.join(added)}" if added else "",
                    f"removed {', '.join(removed)}" if removed else "",
                )
                if p
            )
            self.changes.append(f"pyproject.toml: [dependency-groups] {ROOT_TEST_GROUP}: {what}")
        dev = self._array(groups, "dev")
        if not any(isinstance(e, dict) and e.get("include-group") == ROOT_TEST_GROUP for e in dev):
            dev.append(tomlkit.parse(f'include = {{ include-group = "{ROOT_TEST_GROUP}" }}')["include"])
            self.changes.append(f'pyproject.toml: [dependency-groups] dev now includes the "{ROOT_TEST_GROUP}" group')

    def root_test_group(self) -> list[str]:
        groups = self.pyproject.get("dependency-groups") or {}
        return [str(r) for r in groups.get(ROOT_TEST_GROUP) or [] if isinstance(r, str)]

    # --- workspace.toml ---

    def catalog_entries(self) -> dict[str, dict[str, Any]]:
        if self.catalog is None:
            return {}
        return {name: dict(spec) for name, spec in (self.catalog.get("plugins") or {}).items()}

    def add_plugin(self, name: str, kind: str, directory: str) -> None:
        if self.catalog is None:
            return
        entries = self.catalog_entries()
        if name in entries and entries[name].get("path") == directory and entries[name].get("kind") == kind:
            return
        if name in entries and entries[name].get("path") not in (None, directory):
            raise GymError(f"{CATALOG_FILE} already has a plugin {name!r} at {entries[name]['path']}")
        table = tomlkit.table()
        table["kind"] = kind
        table["path"] = directory
        plugins = self.catalog.setdefault("plugins", tomlkit.table(is_super_table=True))
        plugins[name] = table
        self.changes.append(f"{CATALOG_FILE}: added [plugins.{name}] kind = {kind!r}, path = {directory!r}")

    def remove_plugin(self, name: str) -> None:
        assert self.catalog is not None
        del self.catalog["plugins"][name]
        self.changes.append(f"{CATALOG_FILE}: removed [plugins.{name}] (its directory is gone)")


def _add_after_last_key(table: Table, key: str, item: Any) -> None:
    """``table[key] = item``, placed right after the table's last key: a comment that ends the table
    (one that introduces the next table, as often) stays where it is."""
    keys = [k.key for k, _ in table.value.body if k is not None]
    # tomlkit has no public insert-after; appending would put the key below that comment.
    insert_after = getattr(table.value, "_insert_after", None)
    if keys and insert_after is not None:
        insert_after(keys[-1], key, item)
    else:
        table[key] = item


def _kind_of(directory: str) -> str | None:
    parent = str(PurePosixPath(directory).parent)
    return next((kind for kind, where in KIND_DIRECTORIES.items() if where == parent), None)


def _sorted_requirements(requirements: Iterable[str]) -> list[str]:
    return sorted(set(requirements), key=lambda r: (normalize_name(requirement_name(r) or r), r))


def _test_union(members: Iterable[Member]) -> list[str]:
    return _sorted_requirements(r for member in members for r in member.test_requirements)


def _reconcile(files: _Files, members: list[Member]) -> list[str]:
    """Bring ``files`` in line with ``members``; returns the problems it cannot fix itself."""
    problems = []
    installed = [m for m in members if m.root_install]
    for member in installed:
        files.add_distribution(member.distribution)
    for member in members:
        if not member.root_install:
            files.remove_distribution(member.distribution, f"{member.directory} says [tool.gym] root-install = false")
    provided = {normalize_name(m.distribution) for m in members}
    for name in files.workspace_sourced() - provided:
        files.remove_distribution(name)
    files.set_test_group(_test_union(installed))
    if files.catalog is not None:
        entries = files.catalog_entries()
        for name, spec in entries.items():
            path = spec.get("path")
            if path and not Path(path).is_absolute() and not (files.root / path).is_dir():
                files.remove_plugin(name)
        listed = {spec.get("path") for spec in entries.values()}
        for member in members:
            # The catalog names server plugins, each run in a venv of its own. A framework package
            # (under packages/: gym-train's `gym train`) adds commands or hooks to gym itself, found
            # through its entry points where it is installed: nothing to catalog.
            if (
                not member.plugins
                or member.directory in listed
                or PurePosixPath(member.directory).parts[0] == "packages"
            ):
                continue
            kind = _kind_of(member.directory)
            if kind is None:
                problems.append(
                    f"{member.directory} provides the gym plugin {member.plugins[0]!r} but {CATALOG_FILE} does not list it, "
                    f"and its kind cannot be told from its directory: run `gym plugin install {member.directory}`"
                )
                continue
            files.add_plugin(member.plugins[0], kind, member.directory)
    return problems


def check(root: Path) -> list[str]:
    """What differs between the root files and what the members on disk call for (nothing written)."""
    files = _Files(root)
    problems = _reconcile(files, find_members(root))
    return files.changes + problems


def sync(root: Path) -> tuple[list[str], list[str]]:
    """Rewrite the root files from the members on disk; returns (changes made, problems left)."""
    files = _Files(root)
    problems = _reconcile(files, find_members(root))
    if files.changes:
        files.save()
    return files.changes, problems


def is_uv_workspace(root: Path) -> bool:
    """Whether ``root`` holds a uv workspace (a pyproject.toml with ``[tool.uv.workspace]``)."""
    try:
        return "workspace" in (_read(root / "pyproject.toml").get("tool") or {}).get("uv", {})
    except GymError:
        return False


def register_member(root: Path, directory: Path, kind: str, plugin_name: str, distribution: str) -> list[str]:
    """Make the plugin package in ``directory`` a member of the workspace at ``root``, everywhere it must be.

    In a uv workspace: adds the directory to the member globs when none covers it, the distribution
    to the root dependencies and sources, and its ``test`` group to the root's (neither for a member
    with ``[tool.gym] root-install = false``). In any gym workspace:
    adds ``[plugins.<plugin_name>]`` (kind and path) to workspace.toml. Returns the changes made
    (none when it was registered already).
    """
    root = root.resolve()
    files = _Files(root)
    try:
        relative = directory.resolve().relative_to(root).as_posix()
    except ValueError:
        raise GymError(f"{directory} is outside the workspace at {root}") from None
    if files.is_uv_workspace:
        files.cover(relative)
        member = read_member(root, directory)
        if normalize_name(member.distribution) != normalize_name(distribution):
            raise GymError(
                f"{directory / 'pyproject.toml'} names the distribution {member.distribution!r}, not {distribution!r}"
            )
        if member.root_install:
            files.add_distribution(distribution)
            files.set_test_group(_sorted_requirements([*files.root_test_group(), *member.test_requirements]))
    files.add_plugin(plugin_name, kind, relative)
    if files.changes:
        files.save()
    return files.changes
