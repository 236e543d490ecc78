"""Building, reusing, listing and removing plugins' venvs.

Every server instance of ``gym run`` runs in the venv of its plugin: gym-core and the plugin (both
editable when they are local directories) and nothing else, so plugins with conflicting dependencies
run side by side. The layout is in :mod:`gym_cli.venvs.layout`, the key in :mod:`gym_cli.venvs.keys`.

Why a venv is built in place and not in a temporary directory renamed at the end: uv writes the venv's
absolute path into ``bin/activate*`` and into the shebang of every console script it installs, so a
renamed venv has broken scripts (only ``bin/python`` keeps working, it is a symlink to the base
interpreter). The build therefore happens directly under the final name, serialised across threads and
processes by a lock file, and the completion marker is written last. A directory without the marker is
an interrupted or failed build: the next builder (holding the lock, so nobody is writing into it)
deletes it and starts over. Readers only trust directories with the marker, and they look for it
without taking the lock, so reusing a venv costs a stat and no uv call.

gym-core: a local package directory (the workspace's) is installed editable. Otherwise gym-core is
what gym itself was installed with, and no index has it: its wheel is rebuilt from the installed
files (:func:`~gym_cli.venvs.wheels.installed_wheel`, kept under ``$GYM_HOME/wheels/gym-core``) and
installed from that file, so a published plugin's ``gym-core>=...`` is satisfied by the running gym.

Build variables: ``uv pip install`` honours the workspace root's ``[tool.uv.extra-build-variables]``
when uv runs with the root as its working directory (checked with uv 0.13.9: from elsewhere the build
is ``-march=native``), so uv runs there. A plugin outside any workspace may declare the table in its
own pyproject.toml; it is then handed to uv through a generated ``--config-file``. Wheels compiled with
them are kept (:mod:`gym_cli.venvs.wheels`).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import time
import tomllib
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gym_cli.sources import PluginSource
from gym_cli.venvs.keys import (
    FORMAT_VERSION,
    BuildVariables,
    build_variables,
    digest,
    find_workspace_root,
    installed_core,
    key_material,
    record_digest,
)
from gym_cli.venvs.layout import MARKER, default_home, site_packages, venv_python
from gym_cli.venvs.lock import FileLock
from gym_cli.venvs.uv import UvNotFoundError, VenvBuildError, find_uv, run_uv
from gym_cli.venvs.wheels import Wheelhouse, installed_wheel

__all__ = ["Venv", "VenvInfo", "VenvManager"]

Console = Callable[[str], None]


@dataclass(frozen=True)
class Venv:
    """A ready venv: run ``python -m gym_core.serve`` with ``python``."""

    name: str
    path: Path
    python: Path
    key: str
    reused: bool


@dataclass(frozen=True)
class VenvInfo:
    """One directory under ``venvs/``, as :meth:`VenvManager.list_venvs` sees it."""

    name: str
    key: str
    path: Path
    complete: bool
    source: str | None = None
    created: float | None = None


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9_.-]+", "-", name.lower()).strip("-.") or "plugin"


def _toml_config(variables: BuildVariables) -> str:
    lines = ["[extra-build-variables]"]
    for package, values in sorted(variables.items()):
        inner = ", ".join(f"{json.dumps(k)} = {json.dumps(v)}" for k, v in sorted(values.items()))
        lines.append(f"{json.dumps(package)} = {{ {inner} }}")
    return "\n".join(lines) + "\n"


class VenvManager:
    """Builds, reuses, lists and removes plugins' venvs under ``home``.

    ``uv``: the uv executable (default: :func:`~gym_cli.venvs.uv.find_uv`, looked up only when something
    must be built). ``core_path``: the gym-core package directory installed (editable) into every venv;
    by default the one the running interpreter imports, or, when that is not a local package, the
    installed gym-core as a wheel (see the module docstring). ``python``: the interpreter request for
    ``uv venv`` (default: the running one). ``console``: called with one line per progress event.
    """

    def __init__(
        self,
        home: Path | str | None = None,
        uv: str | None = None,
        core_path: Path | str | None = None,
        python: str | None = None,
        console: Console | None = None,
    ):
        self.home = Path(home).expanduser().absolute() if home is not None else default_home()
        self.venvs_dir = self.home / "venvs"
        self.locks_dir = self.venvs_dir / ".locks"
        self.logs_dir = self.home / "logs"
        self.wheels_dir = self.home / "wheels"
        self.wheelhouse = Wheelhouse(self.wheels_dir)
        self._uv = uv
        if core_path is not None:
            self.core_path: Path | None = Path(core_path).expanduser().resolve()
            self.core_requirement: str | None = None
        else:
            self.core_path, self.core_requirement = installed_core()
        self.core_record = record_digest("gym-core") if self.core_requirement else None
        self.python = python
        self.console: Console = console or (lambda line: None)

    # -- keys --------------------------------------------------------------------------------------

    def _workspace_root(self, source: PluginSource) -> Path | None:
        for start in (self.core_path, source.path):
            if start is not None:
                root = find_workspace_root(Path(start))
                if root is not None:
                    return root
        return None

    def _plugin_dir(self, source: PluginSource) -> Path | None:
        if source.path is None:
            return None
        path = Path(source.path).expanduser().resolve()
        if not (path / "pyproject.toml").is_file():
            raise VenvBuildError(source.name, f"{path} is not a Python package (it has no pyproject.toml)")
        return path

    def key_material(self, source: PluginSource) -> dict[str, Any]:
        """Everything the venv key of ``source`` hashes."""
        plugin_dir = self._plugin_dir(source)
        try:
            variables, _ = build_variables(source, self._workspace_root(source))
            return key_material(
                source,
                plugin_dir,
                core_path=self.core_path,
                core_requirement=self.core_requirement,
                python=self.python,
                variables=variables,
                core_record=self.core_record,
            )
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise VenvBuildError(source.name, f"cannot read a pyproject.toml: {exc}") from exc

    def key_for(self, source: PluginSource) -> str:
        """The 12-hex-digit key of ``source``'s venv."""
        return digest(self.key_material(source))

    def venv_dir(self, source: PluginSource, key: str | None = None) -> Path:
        return self.venvs_dir / f"{_slug(source.name)}-{key or self.key_for(source)}"

    # -- public API --------------------------------------------------------------------------------

    def lookup(self, source: PluginSource) -> Venv | None:
        """The complete venv of ``source`` if it is built, else None. Builds nothing."""
        key = self.key_for(source)
        return self._complete(source.name, self.venv_dir(source, key), key)

    def ensure(self, source: PluginSource, on_building: Callable[[PluginSource], None] | None = None) -> Venv:
        """The venv of ``source``: reused when complete (no uv call), else built (see the module
        docstring), ``on_building`` told when its build starts."""
        key = self.key_for(source)
        path = self.venv_dir(source, key)
        venv = self._complete(source.name, path, key)
        if venv is not None:
            self.console(f"reused venv for {source.name}")
            return venv
        lock = FileLock(
            self.locks_dir / f"{path.name}.lock",
            on_wait=lambda: self.console(f"waiting for another build of the venv for {source.name}…"),
        )
        with lock:
            venv = self._complete(source.name, path, key)
            if venv is not None:
                self.console(f"reused venv for {source.name}")
                return venv
            self.console(f"building venv for {source.name}…")
            if on_building is not None:
                on_building(source)
            started = time.monotonic()
            self._build(source, path, key)
            self.console(f"built venv for {source.name} in {time.monotonic() - started:.1f} s")
        return Venv(source.name, path, venv_python(path), key, reused=False)

    def ensure_many(
        self,
        sources: Iterable[PluginSource],
        max_parallel: int = 2,
        on_ready: Callable[[PluginSource, Venv], None] | None = None,
        on_building: Callable[[PluginSource], None] | None = None,
    ) -> list[Venv]:
        """:meth:`ensure` each source, up to ``max_parallel`` builds at a time; venvs in the order of
        ``sources``, each passed to ``on_ready`` (in this thread, in that order) once it is ready;
        ``on_building`` is told each build that starts (from the thread that builds it).
        Every build runs to its end; the first failure is then raised (the others are reported
        through the console)."""
        sources = list(sources)
        if not sources:
            return []
        pool = ThreadPoolExecutor(max_workers=max(1, min(max_parallel, len(sources))), thread_name_prefix="gym-venv")
        try:
            futures = [pool.submit(self.ensure, source, on_building) for source in sources]
            results: list[Venv] = []
            errors: list[BaseException] = []
            for source, future in zip(sources, futures):
                try:
                    results.append(future.result())
                    if on_ready is not None:
                        on_ready(source, results[-1])
                except Exception as exc:
                    errors.append(exc)
                    self.console(f"failed to build the venv for {source.name}")
        except BaseException:
            pool.shutdown(wait=True, cancel_futures=True)
            raise
        pool.shutdown(wait=True)
        if errors:
            raise errors[0]
        return results

    def list_venvs(self) -> list[VenvInfo]:
        """Every venv directory, complete or not (an incomplete one is being built, or is the remains of
        a failed build that the next build deletes)."""
        infos: list[VenvInfo] = []
        if not self.venvs_dir.is_dir():
            return infos
        for path in sorted(self.venvs_dir.iterdir()):
            if path.name.startswith(".") or not path.is_dir():
                continue
            name, _, key = path.name.rpartition("-")
            marker = path / MARKER
            if marker.is_file():
                try:
                    meta = json.loads(marker.read_text())
                except (OSError, ValueError):
                    meta = {}
                infos.append(
                    VenvInfo(
                        meta.get("name", name),
                        meta.get("key", key),
                        path,
                        True,
                        meta.get("source"),
                        meta.get("created"),
                    )
                )
            else:
                infos.append(VenvInfo(name, key, path, False))
        return infos

    def remove(self, name: str) -> list[Path]:
        """Delete every venv of plugin ``name`` (or the one directory so named); the paths removed."""
        removed: list[Path] = []
        for info in self.list_venvs():
            if name not in (info.name, info.path.name):
                continue
            with FileLock(self.locks_dir / f"{info.path.name}.lock"):
                shutil.rmtree(info.path, ignore_errors=True)
            (self.logs_dir / f"{info.path.name}.log").unlink(missing_ok=True)
            removed.append(info.path)
        return removed

    # -- building ----------------------------------------------------------------------------------

    def _complete(self, name: str, path: Path, key: str) -> Venv | None:
        python = venv_python(path)
        if (path / MARKER).is_file() and python.exists():
            return Venv(name, path, python, key, reused=True)
        return None

    def core_install_args(self) -> list[str]:
        """What ``uv pip install`` is given for gym-core: its directory (editable), else the wheel of the
        installed gym-core, else (no RECORD to rebuild it from) its requirement, for an index to answer."""
        if self.core_path is not None:
            return ["-e", str(self.core_path)]
        if not self.core_requirement:
            return []
        try:
            return [str(installed_wheel("gym-core", self.wheels_dir / "gym-core"))]
        except (OSError, ValueError) as exc:
            self.console(f"cannot rebuild gym-core's wheel ({exc}); asking the index for {self.core_requirement}")
            return [self.core_requirement]

    def wheel_find_links(self, source: PluginSource, uv: str) -> list[str]:
        """``--find-links DIR`` for each kept wheel built with the build variables ``source`` is
        installed with (one subdirectory of the wheelhouse per package and variables)."""
        root = self._workspace_root(source)
        variables, _ = build_variables(source, root)
        args: list[str] = []
        for link in self.wheelhouse.find_links(variables, root, uv):
            args += ["--find-links", str(link)]
        return args

    def _uv_bin(self, plugin: str) -> str:
        uv = self._uv or find_uv()
        if not uv:
            raise UvNotFoundError(
                plugin,
                "uv is not installed; gym builds plugins' venvs with it. Install it with "
                "`pip install uv` (or see https://docs.astral.sh/uv/getting-started/installation/)",
            )
        return uv

    def _build(self, source: PluginSource, path: Path, key: str) -> None:
        uv = self._uv_bin(source.name)
        plugin_dir = self._plugin_dir(source)
        root = self._workspace_root(source)
        variables, needs_config = build_variables(source, root)
        cwd = root or plugin_dir or self.home
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        self.venvs_dir.mkdir(parents=True, exist_ok=True)
        # Remains of an interrupted or failed build: we hold the lock, so nobody is writing there.
        if path.is_symlink() or path.is_file():
            path.unlink()
        elif path.exists():
            shutil.rmtree(path)
        log_path = self.logs_dir / f"{path.name}.log"
        python_request = self.python or sys.executable
        try:
            with open(log_path, "w", encoding="utf-8") as log:
                log.write(f"# gym venv build of {source.name} ({plugin_dir or source.describe()}) key {key}\n")
                run_uv(
                    source.name, [uv, "venv", "--no-project", "--python", python_request, str(path)], cwd, log, log_path
                )
                # Bytecode compiled once here: servers start without compiling their imports, even
                # where bytecode is never written at import time (PYTHONDONTWRITEBYTECODE, read-only
                # venvs); without it that was about a second of every warm `gym run`.
                args = [uv, "pip", "install", "--compile-bytecode", "--python", str(venv_python(path))]
                if needs_config:
                    config = path / "gym-uv.toml"
                    config.write_text(_toml_config(variables))
                    args += ["--config-file", str(config)]
                args += self.wheel_find_links(source, uv)
                args += source.index_args()
                args += self.core_install_args()
                if plugin_dir is not None:
                    args += ["-e", f"{plugin_dir}[{','.join(source.extras)}]" if source.extras else str(plugin_dir)]
                else:
                    args.append(str(source.install_requirement))
                run_uv(source.name, args, cwd, log, log_path)
            for site in site_packages(path):
                self.wheelhouse.harvest(site, variables, uv)
            meta = {
                "format": FORMAT_VERSION,
                "name": source.name,
                "key": key,
                "source": str(plugin_dir) if plugin_dir is not None else source.describe(),
                "python": python_request,
                "created": time.time(),
            }
            tmp = path / f"{MARKER}.tmp"
            tmp.write_text(json.dumps(meta, indent=2) + "\n")
            os.replace(tmp, path / MARKER)
        except BaseException:
            shutil.rmtree(path, ignore_errors=True)
            raise
