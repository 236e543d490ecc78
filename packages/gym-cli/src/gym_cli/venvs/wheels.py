"""Wheels compiled with build variables, kept so that later venvs need not compile them again.

llama-cpp-python, say, must be compiled with the ``CMAKE_ARGS`` of the workspace root's
``[tool.uv.extra-build-variables]``. uv's own cache does not spare the recompilation: it caches a
wheel built from an sdist per download of the sdist, and where the index's responses carry no caching
headers every resolution downloads the sdist anew, hence builds it anew. So each wheel built with
build variables is kept under ``wheels/<package>-<hash of the variables>/`` (found in uv's cache after a
build, checked file by file against what was installed, and also taken from the workspace's own
``.venv`` that ``uv sync`` built) and offered to later builds with ``--find-links``.

Also kept here: the wheel of an installed distribution rebuilt from its files
(:func:`installed_wheel`). Outside the workspace, gym-core is no local directory and no index has
it, so every venv installs the gym-core gym itself runs with, from such a wheel.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import importlib.metadata
import io
import json
import os
import shutil
import zipfile
from pathlib import Path, PurePosixPath

from gym_cli.sources import normalize_name
from gym_cli.venvs.keys import BuildVariables, digest
from gym_cli.venvs.layout import site_packages
from gym_cli.venvs.uv import uv_cache_dir

__all__ = ["Wheelhouse", "installed_wheel"]


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
        return [
            d
            for package, values in sorted(variables.items())
            if (d := self.path_for(package, values)).is_dir() and any(d.glob("*.whl"))
        ]

    def _cache_dir(self, uv: str | None) -> Path | None:
        if self._uv_cache is False:
            self._uv_cache = uv_cache_dir(uv)
        return self._uv_cache if isinstance(self._uv_cache, Path) else None

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
                candidates = [
                    *cache.glob(f"sdists-v*/pypi/{package}/{version}/*/*/{prefix}*.whl"),
                    *cache.glob(f"sdists-v*/index/*/{package}/{version}/*/*/{prefix}*.whl"),
                ]
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
            files = {
                row[0]: row[1]
                for row in rows
                if len(row) >= 2 and row[1] and ".dist-info/" not in row[0] and ".data/" not in row[0]
            }
    except (OSError, StopIteration, zipfile.BadZipFile, UnicodeDecodeError, KeyError):
        return False
    return bool(files) and all(installed.get(path) == sha for path, sha in files.items())


# What an installer adds to a .dist-info directory: not part of the wheel (PEP 376, PEP 610, uv's own).
_INSTALLER_FILES = {"INSTALLER", "REQUESTED", "direct_url.json", "RECORD", "uv_cache.json", "uv_build.json"}
_ZIP_TIME = (2020, 1, 1, 0, 0, 0)  # fixed timestamps: the same files give the same wheel


def _wheel_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def installed_wheel(distribution: str, directory: Path) -> Path:
    """A wheel of the installed ``distribution``, rebuilt from the files its RECORD lists, kept under
    ``directory/<record digest>/`` and reused while the installed files stay the same.

    Files an installer added (``INSTALLER``, ``direct_url.json``...) and files outside the
    distribution's install root (console scripts) are left out: installing the wheel recreates the
    scripts from ``entry_points.txt``. Raises :class:`FileNotFoundError` when the distribution is not
    installed, has no RECORD, or a file it lists is gone, and :class:`ValueError` when it is an
    editable install (its files live elsewhere)."""
    try:
        dist = importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError as exc:
        raise FileNotFoundError(f"{distribution} is not installed") from exc
    record = dist.read_text("RECORD")
    if not record or not dist.files:
        raise FileNotFoundError(f"the installed {distribution} has no RECORD: reinstall it with pip or uv")
    direct_url = json.loads(dist.read_text("direct_url.json") or "{}")
    if direct_url.get("dir_info", {}).get("editable"):
        raise ValueError(
            f"{distribution} is installed editable from {direct_url.get('url')}: install its source directory"
        )
    name = dist.metadata["Name"].replace("-", "_")
    version = dist.version
    dist_info = f"{name}-{version}.dist-info"
    wheel_meta = dist.read_text("WHEEL") or ""
    tags = [line.split(":", 1)[1].strip() for line in wheel_meta.splitlines() if line.startswith("Tag:")]
    tag = tags[0] if len(tags) == 1 else "py3-none-any"
    target_dir = directory / digest(record)
    target = target_dir / f"{name}-{version}-{tag}.whl"
    if target.is_file():
        return target
    entries: list[tuple[str, bytes]] = []
    for file in dist.files:
        parts = PurePosixPath(str(file)).parts
        if not parts or parts[0] == ".." or str(file).endswith(".pyc") or "__pycache__" in parts:
            continue
        if parts[0].endswith(".dist-info"):
            if parts[-1] in _INSTALLER_FILES:
                continue
            parts = (dist_info, *parts[1:])  # the name a wheel of this version must use
        entries.append(("/".join(parts), Path(str(dist.locate_file(file))).read_bytes()))
    rows = [(path, _wheel_hash(data), str(len(data))) for path, data in entries]
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerows([*rows, (f"{dist_info}/RECORD", "", "")])
    entries.append((f"{dist_info}/RECORD", buffer.getvalue().encode()))
    target_dir.mkdir(parents=True, exist_ok=True)
    tmp = target_dir / f".{target.name}.{os.getpid()}.tmp"
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for path, data in sorted(entries, key=lambda e: (e[0].startswith(dist_info), e[0])):  # dist-info last
            info = zipfile.ZipInfo(path, _ZIP_TIME)
            info.external_attr = 0o644 << 16
            zf.writestr(info, data, compress_type=zipfile.ZIP_DEFLATED)
    os.replace(tmp, target)
    return target
