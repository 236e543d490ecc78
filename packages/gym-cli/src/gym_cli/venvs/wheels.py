"""Wheels compiled with build variables, kept so that later venvs need not compile them again.

llama-cpp-python, say, must be compiled with the ``CMAKE_ARGS`` of the workspace root's
``[tool.uv.extra-build-variables]``. uv's own cache does not spare the recompilation: it caches a
wheel built from an sdist per download of the sdist, and where the index's responses carry no caching
headers every resolution downloads the sdist anew, hence builds it anew. So each wheel built with
build variables is kept under ``wheels/<package>-<hash of the variables>/`` (found in uv's cache after a
build, checked file by file against what was installed, and also taken from the workspace's own
``.venv`` that ``uv sync`` built) and offered to later builds with ``--find-links``.
"""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import zipfile
from pathlib import Path

from gym_cli.sources import normalize_name
from gym_cli.venvs.keys import BuildVariables, digest
from gym_cli.venvs.layout import site_packages
from gym_cli.venvs.uv import uv_cache_dir

__all__ = ["Wheelhouse"]


class Wheelhouse:
    """The kept wheels under ``directory``, one subdirectory per package and set of build variables."""

    def __init__(self, directory: Path):
        self.directory = directory
        self._uv_cache: Path | None | bool = False  # False: not asked yet

    def path_for(self, package: str, values: dict[str, str]) -> Path:
        return self.directory / f"{package}-{digest(values)}"

    def find_links(self, variables: BuildVariables, root: Path | None, uv: str) -> list[Path]:
        """``--find-links`` directories with wheels already built with ``variables``, after taking
        the ones the workspace's ``.venv`` holds."""
        if not variables:
            return []
        if root is not None:
            for site in site_packages(root / ".venv"):
                self.harvest(site, variables, uv)
        return [d for package, values in sorted(variables.items())
                if (d := self.path_for(package, values)).is_dir() and any(d.glob("*.whl"))]

    def _cache_dir(self, uv: str | None) -> Path | None:
        if self._uv_cache is False:
            self._uv_cache = uv_cache_dir(uv)
        return self._uv_cache or None

    def harvest(self, site: Path, variables: BuildVariables, uv: str | None) -> None:
        """Keep a copy of each wheel that uv built with ``variables`` and installed into ``site``.

        uv records the variables of a build in ``<dist-info>/uv_build.json``; the wheel itself is found in
        uv's cache and accepted only if every file it holds has the hash of the installed one. Best effort:
        anything unexpected just means the next venv compiles again."""
        if not variables:
            return
        try:
            for dist_info in site.glob("*.dist-info"):
                name, _, version = dist_info.name[: -len(".dist-info")].rpartition("-")
                package = normalize_name(name)
                if package not in variables:
                    continue
                try:
                    built = json.loads((dist_info / "uv_build.json").read_text()).get("extra_build_variables")
                except (OSError, ValueError):
                    continue
                if built != variables[package]:
                    continue
                target = self.path_for(package, variables[package])
                prefix = f"{package.replace('-', '_')}-{version}-"
                if target.is_dir() and any(target.glob(f"{prefix}*.whl")):
                    continue
                installed = _record(dist_info / "RECORD")
                cache = self._cache_dir(uv)
                if cache is None or not installed:
                    continue
                candidates = [*cache.glob(f"sdists-v*/pypi/{package}/{version}/*/*/{prefix}*.whl"),
                              *cache.glob(f"sdists-v*/index/*/{package}/{version}/*/*/{prefix}*.whl")]
                for wheel in sorted(candidates, key=lambda p: p.stat().st_mtime, reverse=True):
                    if _wheel_matches(wheel, installed):
                        target.mkdir(parents=True, exist_ok=True)
                        tmp = target / f".{wheel.name}.{os.getpid()}.tmp"
                        shutil.copyfile(wheel, tmp)
                        os.replace(tmp, target / wheel.name)
                        break
        except Exception:  # noqa: BLE001 - an optimisation only
            return


def _record(path: Path) -> dict[str, str]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return {}
    return {row[0]: row[1] for row in csv.reader(io.StringIO(text)) if len(row) >= 2 and row[1]}


def _wheel_matches(wheel: Path, installed: dict[str, str]) -> bool:
    try:
        with zipfile.ZipFile(wheel) as zf:
            record_name = next(n for n in zf.namelist() if n.endswith(".dist-info/RECORD"))
            rows = csv.reader(io.StringIO(zf.read(record_name).decode("utf-8")))
            files = {row[0]: row[1] for row in rows
                     if len(row) >= 2 and row[1] and ".dist-info/" not in row[0] and ".data/" not in row[0]}
    except (OSError, StopIteration, zipfile.BadZipFile, UnicodeDecodeError, KeyError):
        return False
    return bool(files) and all(installed.get(path) == sha for path, sha in files.items())
