"""A plugin's example data and configs, from its package directory or from its installed wheel, and the
server types those configs need.

A plugin's wheel holds its ``data/`` and ``configs/`` under ``<module>/examples/`` (the
``[tool.hatch.build.targets.wheel.force-include]`` table of its pyproject.toml, which `gym plugin new`
writes), so an environment installed from a wheel still has the tasks and configs its README shows:
`gym plugin examples NAME` copies them out. The server types its configs name with ``plugin:`` are the
ones it needs next to itself: `gym plugin install` installs those it finds in the same ``--find-links``
directories and names the packages of the others.
"""

from __future__ import annotations

import configparser
import importlib.metadata
import zipfile
from collections.abc import Iterable
from pathlib import Path, PurePosixPath

import yaml

from gym_cli.sources import normalize_name

__all__ = [
    "EXAMPLE_DIRS",
    "config_server_types",
    "directory_examples",
    "installed_examples",
    "wheels_registering",
]

EXAMPLE_DIRS = ("data", "configs")


def directory_examples(directory: Path) -> dict[str, Path]:
    """``data/...`` and ``configs/...`` of a package directory: relative path -> file."""
    return {
        path.relative_to(directory).as_posix(): path
        for name in EXAMPLE_DIRS
        if (directory / name).is_dir()
        for path in sorted((directory / name).rglob("*"))
        if path.is_file() and "__pycache__" not in path.parts
    }


def installed_examples(sites: Iterable[Path], distribution: str) -> dict[str, Path]:
    """The example files ``distribution`` installed into one of ``sites`` (``<module>/examples/data/...``
    in its RECORD): ``data/...`` or ``configs/...`` -> the installed file. Empty when it has none."""
    wanted = normalize_name(distribution)
    for dist in importlib.metadata.distributions(path=[str(site) for site in sites]):
        if normalize_name(dist.metadata["Name"] or "") != wanted:
            continue
        found = {}
        for file in dist.files or ():
            parts = PurePosixPath(str(file)).parts
            if len(parts) > 3 and parts[1] == "examples" and parts[2] in EXAMPLE_DIRS and parts[-1] != "RECORD":
                found["/".join(parts[2:])] = Path(str(dist.locate_file(file)))
        return dict(sorted(found.items()))
    return {}


def config_server_types(files: Iterable[Path]) -> set[str]:
    """The server types the configs among ``files`` (``configs/*.yaml``) name with ``plugin:``."""
    types: set[str] = set()
    for path in files:
        if path.suffix not in (".yaml", ".yml") or path.parent.name != "configs":
            continue
        try:
            document = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError, UnicodeDecodeError):
            continue  # `gym collect` reports a broken config where it is used
        if not isinstance(document, dict):
            continue
        for instance in document.values():
            if isinstance(instance, dict) and isinstance(instance.get("plugin"), str):
                types.add(instance["plugin"])
    return types


def wheels_registering(directories: Iterable[str], names: Iterable[str]) -> dict[str, str]:
    """Of the server types ``names``, those a wheel in ``directories`` registers as an entry point of
    group ``gym``: server type -> that wheel's distribution name (the newest file wins)."""
    wanted = set(names)
    found: dict[str, str] = {}
    for directory in directories:
        if "://" in directory or not Path(directory).is_dir():
            continue
        for wheel in sorted(Path(directory).glob("*.whl")):
            try:
                with zipfile.ZipFile(wheel) as zf:
                    dist_info = {n.split("/", 1)[0] for n in zf.namelist() if n.split("/", 1)[0].endswith(".dist-info")}
                    if len(dist_info) != 1:
                        continue
                    (info,) = dist_info
                    if f"{info}/entry_points.txt" not in zf.namelist():
                        continue
                    parser = configparser.ConfigParser(delimiters=("=",), interpolation=None)
                    parser.optionxform = str  # type: ignore[assignment]  # entry point names keep their case
                    parser.read_string(zf.read(f"{info}/entry_points.txt").decode("utf-8"))
                    metadata = zf.read(f"{info}/METADATA").decode("utf-8")
            except (OSError, zipfile.BadZipFile, KeyError, UnicodeDecodeError, configparser.Error):
                continue
            name = next(
                (line.split(":", 1)[1].strip() for line in metadata.splitlines() if line.startswith("Name:")), ""
            )
            if not name or not parser.has_section("gym"):
                continue
            for server_type in parser.options("gym"):
                if server_type in wanted:
                    found[server_type] = name
    return found
