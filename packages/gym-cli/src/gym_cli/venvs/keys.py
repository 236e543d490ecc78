"""The key of a plugin's venv: a hash of everything the installed venv depends on.

What counts: the plugin's source (for a local package, the parts of its pyproject.toml that decide
what gets installed, entry points included; for a requirement, the requirement, version and where it
is looked up), gym-core (a local package the same way; an installed one by its version and the files
its RECORD lists), the Python interpreter, and the build variables in force. Code edits inside
a local package do not count: local packages are installed editable.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import os
import platform
import sys
import tomllib
from pathlib import Path
from typing import Any

from gym_cli.sources import PluginSource, normalize_name, read_pyproject

__all__ = [
    "FORMAT_VERSION",
    "BuildVariables",
    "digest",
    "package_fingerprint",
    "python_identity",
    "find_workspace_root",
    "build_variables",
    "installed_core",
    "record_digest",
    "key_material",
]

FORMAT_VERSION = 1
"""Bump when the layout or the content of venvs changes: every venv is rebuilt."""

BuildVariables = dict[str, dict[str, str]]
"""``[tool.uv.extra-build-variables]``: normalised package name → environment variables of its build."""


def digest(material: Any) -> str:
    """12 hex digits of the SHA-256 of ``material`` as canonical JSON."""
    blob = json.dumps(material, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def _uv_table(data: dict[str, Any], key: str) -> Any:
    return data.get("tool", {}).get("uv", {}).get(key)


def package_fingerprint(directory: Path) -> dict[str, Any]:
    """What of a local package's pyproject.toml decides what gets installed. Entry points count: an
    editable install bakes them into its metadata."""
    data = read_pyproject(directory)
    project = data.get("project", {})
    fields = (
        "name",
        "version",
        "requires-python",
        "dependencies",
        "optional-dependencies",
        "entry-points",
        "scripts",
        "gui-scripts",
        "dynamic",
    )
    return {
        "project": {field: project.get(field) for field in fields},
        "build-system": data.get("build-system"),
        "uv-sources": _uv_table(data, "sources"),
    }


def python_identity(request: str | None) -> dict[str, Any]:
    """The interpreter a venv is made with: the ``uv venv --python`` request, else the running one."""
    if request is not None:
        return {"request": request}
    base = getattr(sys, "_base_executable", None) or sys.executable
    return {
        "implementation": sys.implementation.name,
        "version": platform.python_version(),
        "executable": os.path.realpath(base),
    }


def find_workspace_root(start: Path) -> Path | None:
    """The nearest directory at or above ``start`` whose pyproject.toml has ``[tool.uv.workspace]``."""
    start = start.absolute()
    for directory in (start, *start.parents):
        if (directory / "pyproject.toml").is_file():
            try:
                if _uv_table(read_pyproject(directory), "workspace") is not None:
                    return directory
            except (OSError, tomllib.TOMLDecodeError):
                continue
    return None


def build_variables(source: PluginSource, root: Path | None) -> tuple[BuildVariables, bool]:
    """The extra build variables in force, and whether uv must be given them by ``--config-file``
    (no workspace root: the table comes from the plugin's own pyproject.toml)."""
    if root is not None:
        table = _uv_table(read_pyproject(root), "extra-build-variables") or {}
        return {normalize_name(k): dict(v) for k, v in table.items()}, False
    if source.path is not None:
        table = _uv_table(read_pyproject(source.path), "extra-build-variables") or {}
        return {normalize_name(k): dict(v) for k, v in table.items()}, bool(table)
    return {}, False


def installed_core() -> tuple[Path | None, str | None]:
    """gym-core as the running interpreter has it: its source directory when it is a local (editable)
    package, else a requirement pinning its installed version."""
    try:
        spec = importlib.util.find_spec("gym_core")
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.origin:
        for directory in Path(spec.origin).resolve().parents:
            if (directory / "pyproject.toml").is_file():
                try:
                    if read_pyproject(directory).get("project", {}).get("name") == "gym-core":
                        return directory, None
                except (OSError, tomllib.TOMLDecodeError):
                    pass
                break
    try:
        return None, f"gym-core=={importlib.metadata.version('gym-core')}"
    except importlib.metadata.PackageNotFoundError:
        return None, None


def record_digest(distribution: str) -> str | None:
    """A digest of the installed ``distribution``'s RECORD (its files and their hashes), None when it
    is not installed or has no RECORD."""
    try:
        text = importlib.metadata.distribution(distribution).read_text("RECORD")
    except importlib.metadata.PackageNotFoundError:
        return None
    return digest(text) if text else None


def key_material(
    source: PluginSource,
    plugin_dir: Path | None,
    *,
    core_path: Path | None,
    core_requirement: str | None,
    python: str | None,
    variables: BuildVariables,
    core_record: str | None = None,
) -> dict[str, Any]:
    """Everything a venv key hashes (``core_record``: :func:`record_digest` of an installed gym-core).
    Raises ``OSError``/``TOMLDecodeError`` on an unreadable pyproject."""
    if plugin_dir is not None:
        src: dict[str, Any] = {"path": str(plugin_dir), "package": package_fingerprint(plugin_dir)}
    else:
        src = {"requirement": source.install_requirement, "version": source.version}
        if source.find_links or source.index_url:  # absent otherwise: existing venvs keep their keys
            src.update(find_links=list(source.find_links), index_url=source.index_url)
    if source.extras:  # absent otherwise: existing venvs keep their keys
        src["extras"] = list(source.extras)
    if core_path is not None:
        core: dict[str, Any] = {"path": str(core_path), "package": package_fingerprint(core_path)}
    else:
        core = {"requirement": core_requirement}
        if core_record is not None:
            core["record"] = core_record
    return {
        "format": FORMAT_VERSION,
        "name": source.name,
        "source": src,
        "core": core,
        "python": python_identity(python),
        "build_variables": variables,
    }
