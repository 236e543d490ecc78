"""Isolated uv virtual environments for plugins.

Every server instance of ``gym run`` runs in the environment of its plugin: a venv holding gym-core and
the plugin (both editable when they are local directories) and nothing else, so plugins with
conflicting dependencies can run side by side.

Layout, under ``home`` (``$GYM_HOME``, else the user cache directory ``gym``)::

    envs/<name>-<key>/            the venv; complete once it holds the marker ``.gym-complete``
    envs/.locks/<name>-<key>.lock an ``fcntl.flock`` lock held while the venv is built
    logs/<name>-<key>.log         uv's full output of the last build
    wheels/<package>-<hash>/      wheels compiled with ``[tool.uv.extra-build-variables]``, reused

``key`` hashes what the installed environment depends on (see :meth:`EnvironmentManager.key_for`); code
edits inside a local plugin do not change it and need no rebuild, since local packages are installed in
editable mode.

Why the venv is built in place and not in a temporary directory renamed at the end: uv writes the
venv's absolute path into ``bin/activate*`` and into the shebang of every console script it installs,
so a renamed venv has broken scripts (only ``bin/python`` keeps working, it is a symlink to the base
interpreter). The build therefore happens directly under the final name, serialised across threads
and processes by the lock file, and the completion marker is written last. A directory without the
marker is an interrupted or failed build: the next builder (holding the lock, so nobody is writing
into it) deletes it and starts over. Readers only trust directories with the marker, and they look for
it without taking the lock, so reusing an environment costs a stat and no uv call.

Build variables: llama-cpp-python must be compiled with the ``CMAKE_ARGS`` of the workspace root's
``[tool.uv.extra-build-variables]``. ``uv pip install`` honours that table when uv runs with the
workspace root as its working directory (checked with uv 0.13.9: from elsewhere the build is
``-march=native``), so uv runs there. A plugin outside any workspace may declare the table in its own
pyproject.toml; it is then handed to uv through a generated ``--config-file``.

uv's own cache does not spare the recompilation here: it caches a wheel built from an sdist per
download of the sdist, and where the index's responses carry no caching headers (as behind this
project's proxy) every resolution downloads the sdist anew, hence builds it anew. So wheels built with
build variables are kept in ``wheels/`` (found in uv's cache after a build, checked file by file
against what was installed, and also taken from the workspace's own ``.venv`` that ``uv sync`` built)
and offered to later builds with ``--find-links``.
"""

from __future__ import annotations

import csv
import fcntl
import hashlib
import io
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import threading
import time
import tomllib
import zipfile
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gym_core.errors import GymError

__all__ = [
    "FORMAT_VERSION",
    "MARKER",
    "PluginSource",
    "Environment",
    "EnvironmentInfo",
    "EnvironmentBuildError",
    "UvNotFoundError",
    "EnvironmentManager",
    "default_home",
    "find_uv",
    "find_workspace_root",
]

FORMAT_VERSION = 1
"""Bump when the layout or the content of environments changes: every environment is rebuilt."""

MARKER = ".gym-complete"
TAIL_LINES = 30

Console = Callable[[str], None]


# ---------------------------------------------------------------------------------------------- data


@dataclass(frozen=True)
class PluginSource:
    """Where a plugin comes from: a local package directory (``path``) or a requirement (``requirement``,
    e.g. ``gym-math>=0.2`` from PyPI). ``version`` pins a bare requirement name (``gym-math`` +
    ``0.2.1`` installs ``gym-math==0.2.1``) and is part of the environment key either way."""

    name: str
    path: Path | None = None
    requirement: str | None = None
    version: str | None = None

    def __post_init__(self) -> None:
        if (self.path is None) == (self.requirement is None):
            raise ValueError(f"plugin {self.name!r}: give exactly one of path and requirement")
        if self.path is not None and not isinstance(self.path, Path):
            object.__setattr__(self, "path", Path(self.path))

    @property
    def install_requirement(self) -> str | None:
        """The requirement handed to uv (None for a path source)."""
        if self.requirement is None:
            return None
        if self.version and re.fullmatch(r"\s*[A-Za-z0-9][A-Za-z0-9._-]*\s*(\[[^\]]*\])?\s*", self.requirement):
            return f"{self.requirement.strip()}=={self.version}"
        return self.requirement

    def describe(self) -> str:
        return str(self.path) if self.path is not None else str(self.install_requirement)


@dataclass(frozen=True)
class Environment:
    """A ready environment: run ``python -m gym_core.serve`` with ``python``."""

    name: str
    path: Path
    python: Path
    key: str
    reused: bool


@dataclass(frozen=True)
class EnvironmentInfo:
    """One directory under ``envs/``, as :meth:`EnvironmentManager.list_environments` sees it."""

    name: str
    key: str
    path: Path
    complete: bool
    source: str | None = None
    created: float | None = None


class EnvironmentBuildError(GymError):
    """Building the environment of ``plugin`` failed; ``output_tail`` holds the last lines uv printed."""

    def __init__(self, plugin: str, message: str, output_tail: Sequence[str] = ()):
        self.plugin = plugin
        self.message = message
        self.output_tail = list(output_tail)
        text = f"cannot build the environment of plugin {plugin!r}: {message}"
        if self.output_tail:
            text += "\n" + "\n".join(f"  | {line}" for line in self.output_tail)
        super().__init__(text)


class UvNotFoundError(EnvironmentBuildError):
    """uv, which builds the environments, is not installed."""


# ----------------------------------------------------------------------------------------- helpers


def default_home() -> Path:
    """``$GYM_HOME``, else the user cache directory of gym (``~/.cache/gym`` on Linux)."""
    env = os.environ.get("GYM_HOME")
    if env:
        return Path(env).expanduser().absolute()
    import platformdirs

    return Path(platformdirs.user_cache_dir("gym")).absolute()


def find_uv() -> str | None:
    """The uv executable: on PATH, else the one shipped by the ``uv`` Python package, else None."""
    found = shutil.which("uv")
    if found:
        return found
    try:
        import uv as uv_package

        path = uv_package.find_uv_bin()
    except Exception:
        return None
    return path if path and os.path.exists(path) else None


def _normalize(name: str) -> str:
    """PEP 503 normalised distribution name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9_.-]+", "-", name.lower()).strip("-.") or "plugin"


def _digest(material: Any) -> str:
    blob = json.dumps(material, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def _read_pyproject(directory: Path) -> dict[str, Any]:
    with open(directory / "pyproject.toml", "rb") as f:
        return tomllib.load(f)


def _uv_table(data: dict[str, Any], key: str) -> Any:
    return data.get("tool", {}).get("uv", {}).get(key)


def find_workspace_root(start: Path) -> Path | None:
    """The nearest directory at or above ``start`` whose pyproject.toml has ``[tool.uv.workspace]``."""
    start = start.absolute()
    for directory in (start, *start.parents):
        candidate = directory / "pyproject.toml"
        if candidate.is_file():
            try:
                if _uv_table(_read_pyproject(directory), "workspace") is not None:
                    return directory
            except (OSError, tomllib.TOMLDecodeError):
                continue
    return None


def _fingerprint(directory: Path) -> dict[str, Any]:
    """What of a local package's pyproject.toml decides what gets installed. Entry points count: an
    editable install bakes them into its metadata."""
    data = _read_pyproject(directory)
    project = data.get("project", {})
    fields = ("name", "version", "requires-python", "dependencies", "optional-dependencies", "entry-points",
              "scripts", "gui-scripts", "dynamic")
    return {
        "project": {field: project.get(field) for field in fields},
        "build-system": data.get("build-system"),
        "uv-sources": _uv_table(data, "sources"),
    }


def _default_core() -> tuple[Path | None, str | None]:
    """gym-core as the running interpreter has it: its source directory when it is a local (editable)
    package, else a requirement pinning its installed version."""
    import importlib.metadata
    import importlib.util

    try:
        spec = importlib.util.find_spec("gym_core")
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.origin:
        for directory in Path(spec.origin).resolve().parents:
            if (directory / "pyproject.toml").is_file():
                try:
                    if _read_pyproject(directory).get("project", {}).get("name") == "gym-core":
                        return directory, None
                except (OSError, tomllib.TOMLDecodeError):
                    pass
                break
    try:
        return None, f"gym-core=={importlib.metadata.version('gym-core')}"
    except importlib.metadata.PackageNotFoundError:
        return None, None


def _site_packages(venv: Path) -> list[Path]:
    return sorted(venv.glob("lib/python*/site-packages")) + ([venv / "Lib" / "site-packages"] if os.name == "nt" else [])


def _venv_python(venv: Path) -> Path:
    return venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def _toml_config(variables: dict[str, dict[str, str]]) -> str:
    lines = ["[extra-build-variables]"]
    for package, values in sorted(variables.items()):
        inner = ", ".join(f"{json.dumps(k)} = {json.dumps(v)}" for k, v in sorted(values.items()))
        lines.append(f"{json.dumps(package)} = {{ {inner} }}")
    return "\n".join(lines) + "\n"


_THREAD_LOCKS: dict[str, threading.Lock] = {}
_THREAD_LOCKS_GUARD = threading.Lock()


def _thread_lock(path: Path) -> threading.Lock:
    with _THREAD_LOCKS_GUARD:
        return _THREAD_LOCKS.setdefault(str(path), threading.Lock())


class _FileLock:
    """An exclusive ``flock`` on ``path`` (released by the kernel if the holder dies), plus a thread lock
    so that threads of one process queue up without relying on flock semantics."""

    def __init__(self, path: Path, on_wait: Callable[[], None] | None = None):
        self.path = path
        self.on_wait = on_wait
        self._fd: int | None = None
        self._thread_lock = _thread_lock(path)

    def __enter__(self) -> _FileLock:
        if not self._thread_lock.acquire(blocking=False):
            if self.on_wait:
                self.on_wait()
            self._thread_lock.acquire()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if self.on_wait:
                    self.on_wait()
                fcntl.flock(fd, fcntl.LOCK_EX)
            self._fd = fd
        except BaseException:
            self._thread_lock.release()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        fd, self._fd = self._fd, None
        try:
            if fd is not None:
                fcntl.flock(fd, fcntl.LOCK_UN)
                os.close(fd)
        finally:
            self._thread_lock.release()


# ----------------------------------------------------------------------------------------- manager


class EnvironmentManager:
    """Builds, reuses, lists and removes plugin environments under ``home``.

    ``uv``: the uv executable (default: :func:`find_uv`, looked up only when something must be built).
    ``core_path``: the gym-core package directory installed (editable) into every environment; by
    default the one the running interpreter imports, or ``gym-core==<its version>`` when that is not a
    local package. ``python``: the interpreter request for ``uv venv`` (default: the running one).
    ``console``: called with one line per progress event.
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
        self.envs_dir = self.home / "envs"
        self.locks_dir = self.envs_dir / ".locks"
        self.logs_dir = self.home / "logs"
        self.wheels_dir = self.home / "wheels"
        self._uv = uv
        if core_path is not None:
            self.core_path: Path | None = Path(core_path).expanduser().resolve()
            self.core_requirement: str | None = None
        else:
            self.core_path, self.core_requirement = _default_core()
        self.python = python
        self.console: Console = console or (lambda line: None)
        self._uv_cache_dir: Path | None | bool = False  # False: not asked yet

    # -- keys --------------------------------------------------------------------------------------

    def _python_identity(self) -> dict[str, Any]:
        if self.python is not None:
            return {"request": self.python}
        base = getattr(sys, "_base_executable", None) or sys.executable
        return {
            "implementation": sys.implementation.name,
            "version": platform.python_version(),
            "executable": os.path.realpath(base),
        }

    def _workspace_root(self, source: PluginSource) -> Path | None:
        for start in (self.core_path, source.path):
            if start is not None:
                root = find_workspace_root(Path(start))
                if root is not None:
                    return root
        return None

    def _build_variables(self, source: PluginSource, root: Path | None) -> tuple[dict[str, dict[str, str]], bool]:
        """The extra build variables in force, and whether uv must be given them by ``--config-file``
        (no workspace root: the table comes from the plugin's own pyproject.toml)."""
        if root is not None:
            table = _uv_table(_read_pyproject(root), "extra-build-variables") or {}
            return {_normalize(k): dict(v) for k, v in table.items()}, False
        if source.path is not None:
            table = _uv_table(_read_pyproject(source.path), "extra-build-variables") or {}
            return {_normalize(k): dict(v) for k, v in table.items()}, bool(table)
        return {}, False

    def _plugin_dir(self, source: PluginSource) -> Path | None:
        if source.path is None:
            return None
        path = Path(source.path).expanduser().resolve()
        if not (path / "pyproject.toml").is_file():
            raise EnvironmentBuildError(source.name, f"{path} is not a Python package (it has no pyproject.toml)")
        return path

    def key_material(self, source: PluginSource) -> dict[str, Any]:
        """Everything the environment key hashes (shown by ``gym plugin list --verbose``, say)."""
        plugin_dir = self._plugin_dir(source)
        try:
            if plugin_dir is not None:
                src: dict[str, Any] = {"path": str(plugin_dir), "package": _fingerprint(plugin_dir)}
            else:
                src = {"requirement": source.install_requirement, "version": source.version}
            if self.core_path is not None:
                core: dict[str, Any] = {"path": str(self.core_path), "package": _fingerprint(self.core_path)}
            else:
                core = {"requirement": self.core_requirement}
            root = self._workspace_root(source)
            variables, _ = self._build_variables(source, root)
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise EnvironmentBuildError(source.name, f"cannot read a pyproject.toml: {exc}") from exc
        return {
            "format": FORMAT_VERSION,
            "name": source.name,
            "source": src,
            "core": core,
            "python": self._python_identity(),
            "build_variables": variables,
        }

    def key_for(self, source: PluginSource) -> str:
        """The 12-hex-digit key of ``source``'s environment."""
        return _digest(self.key_material(source))

    def env_dir(self, source: PluginSource, key: str | None = None) -> Path:
        return self.envs_dir / f"{_slug(source.name)}-{key or self.key_for(source)}"

    # -- public API --------------------------------------------------------------------------------

    def lookup(self, source: PluginSource) -> Environment | None:
        """The complete environment of ``source`` if it is built, else None. Builds nothing."""
        key = self.key_for(source)
        return self._complete(source.name, self.env_dir(source, key), key)

    def ensure(self, source: PluginSource) -> Environment:
        """The environment of ``source``: reused when complete, else built (see the module docstring)."""
        key = self.key_for(source)
        path = self.env_dir(source, key)
        env = self._complete(source.name, path, key)
        if env is not None:
            self.console(f"reused env for {source.name}")
            return env
        lock = _FileLock(
            self.locks_dir / f"{path.name}.lock",
            on_wait=lambda: self.console(f"waiting for another build of the env for {source.name}…"),
        )
        with lock:
            env = self._complete(source.name, path, key)
            if env is not None:
                self.console(f"reused env for {source.name}")
                return env
            self.console(f"building env for {source.name}…")
            started = time.monotonic()
            self._build(source, path, key)
            self.console(f"built env for {source.name} in {time.monotonic() - started:.1f} s")
        return Environment(source.name, path, _venv_python(path), key, reused=False)

    def ensure_many(self, sources: Iterable[PluginSource], max_parallel: int = 2) -> list[Environment]:
        """:meth:`ensure` each source, up to ``max_parallel`` builds at a time; environments in the order of
        ``sources``. Every build runs to its end; the first failure is then raised (the others are
        reported through the console)."""
        sources = list(sources)
        if not sources:
            return []
        pool = ThreadPoolExecutor(max_workers=max(1, min(max_parallel, len(sources))), thread_name_prefix="gym-env")
        try:
            futures = [pool.submit(self.ensure, source) for source in sources]
            results: list[Environment] = []
            errors: list[BaseException] = []
            for source, future in zip(sources, futures):
                try:
                    results.append(future.result())
                except Exception as exc:
                    errors.append(exc)
                    self.console(f"failed to build env for {source.name}")
        except BaseException:
            pool.shutdown(wait=True, cancel_futures=True)
            raise
        pool.shutdown(wait=True)
        if errors:
            raise errors[0]
        return results

    def list_environments(self) -> list[EnvironmentInfo]:
        """Every environment directory, complete or not (an incomplete one is being built, or is the
        remains of a failed build that the next build deletes)."""
        infos: list[EnvironmentInfo] = []
        if not self.envs_dir.is_dir():
            return infos
        for path in sorted(self.envs_dir.iterdir()):
            if path.name.startswith(".") or not path.is_dir():
                continue
            name, _, key = path.name.rpartition("-")
            marker = path / MARKER
            if marker.is_file():
                try:
                    meta = json.loads(marker.read_text())
                except (OSError, ValueError):
                    meta = {}
                infos.append(EnvironmentInfo(meta.get("name", name), meta.get("key", key), path, True,
                                             meta.get("source"), meta.get("created")))
            else:
                infos.append(EnvironmentInfo(name, key, path, False))
        return infos

    def remove(self, name: str) -> list[Path]:
        """Delete every environment of plugin ``name`` (or the one directory so named); the paths removed."""
        removed: list[Path] = []
        for info in self.list_environments():
            if name not in (info.name, info.path.name):
                continue
            with _FileLock(self.locks_dir / f"{info.path.name}.lock"):
                shutil.rmtree(info.path, ignore_errors=True)
            (self.logs_dir / f"{info.path.name}.log").unlink(missing_ok=True)
            removed.append(info.path)
        return removed

    # -- building ----------------------------------------------------------------------------------

    def _complete(self, name: str, path: Path, key: str) -> Environment | None:
        python = _venv_python(path)
        if (path / MARKER).is_file() and python.exists():
            return Environment(name, path, python, key, reused=True)
        return None

    def _uv_bin(self, plugin: str) -> str:
        uv = self._uv or find_uv()
        if not uv:
            raise UvNotFoundError(
                plugin, "uv is not installed; gym builds plugin environments with it. Install it with "
                "`pip install uv` (or see https://docs.astral.sh/uv/getting-started/installation/)")
        return uv

    def _build(self, source: PluginSource, path: Path, key: str) -> None:
        uv = self._uv_bin(source.name)
        plugin_dir = self._plugin_dir(source)
        root = self._workspace_root(source)
        variables, needs_config = self._build_variables(source, root)
        cwd = root or plugin_dir or self.home
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        self.envs_dir.mkdir(parents=True, exist_ok=True)
        # Remains of an interrupted or failed build: we hold the lock, so nobody is writing there.
        if path.is_symlink() or path.is_file():
            path.unlink()
        elif path.exists():
            shutil.rmtree(path)
        log_path = self.logs_dir / f"{path.name}.log"
        python_request = self.python or sys.executable
        try:
            with open(log_path, "w", encoding="utf-8") as log:
                log.write(f"# gym env build of {source.name} ({plugin_dir or source.describe()}) key {key}\n")
                self._run_uv(source.name, [uv, "venv", "--no-project", "--python", python_request, str(path)],
                             cwd, log, log_path)
                args = [uv, "pip", "install", "--python", str(_venv_python(path))]
                if needs_config:
                    config = path / "gym-uv.toml"
                    config.write_text(_toml_config(variables))
                    args += ["--config-file", str(config)]
                for link in self._wheelhouses(variables, root, uv):
                    args += ["--find-links", str(link)]
                if self.core_path is not None:
                    args += ["-e", str(self.core_path)]
                elif self.core_requirement:
                    args.append(self.core_requirement)
                if plugin_dir is not None:
                    args += ["-e", str(plugin_dir)]
                else:
                    args.append(str(source.install_requirement))
                self._run_uv(source.name, args, cwd, log, log_path)
            for site in _site_packages(path):
                self._harvest_wheels(site, variables, uv)
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

    def _run_uv(self, plugin: str, args: list[str], cwd: Path, log: io.TextIOBase, log_path: Path) -> None:
        env = dict(os.environ)
        for var in ("VIRTUAL_ENV", "UV_PROJECT_ENVIRONMENT", "CONDA_PREFIX", "PYTHONHOME"):
            env.pop(var, None)
        env.setdefault("NO_COLOR", "1")
        env["UV_NO_PROGRESS"] = "1"
        log.write(f"$ (cd {cwd} && {' '.join(args)})\n")
        log.flush()
        tail: deque[str] = deque(maxlen=TAIL_LINES)
        try:
            proc = subprocess.Popen(args, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True, errors="replace")
        except OSError as exc:
            raise UvNotFoundError(
                plugin, f"cannot run uv ({args[0]}): {exc}. Install uv with `pip install uv`") from exc
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                log.write(line)
                tail.append(line.rstrip("\n"))
            returncode = proc.wait()
        except BaseException:
            proc.kill()
            proc.wait()
            raise
        finally:
            log.flush()
        if returncode != 0:
            what = " ".join(a for a in args[1:3] if not a.startswith("-"))
            raise EnvironmentBuildError(plugin, f"`uv {what}` failed with exit code {returncode} "
                                                f"(full output: {log_path})", tail)

    # -- wheels built with extra build variables -----------------------------------------------------

    def _wheelhouse(self, package: str, values: dict[str, str]) -> Path:
        return self.wheels_dir / f"{package}-{_digest(values)}"

    def _wheelhouses(self, variables: dict[str, dict[str, str]], root: Path | None, uv: str) -> list[Path]:
        """``--find-links`` directories with wheels already built with today's variables, after taking
        the ones the workspace's ``.venv`` holds."""
        if not variables:
            return []
        if root is not None:
            for site in _site_packages(root / ".venv"):
                self._harvest_wheels(site, variables, uv)
        return [d for package, values in sorted(variables.items())
                if (d := self._wheelhouse(package, values)).is_dir() and any(d.glob("*.whl"))]

    def _cache_dir(self, uv: str | None) -> Path | None:
        if self._uv_cache_dir is False:
            self._uv_cache_dir = None
            if os.environ.get("UV_CACHE_DIR"):
                self._uv_cache_dir = Path(os.environ["UV_CACHE_DIR"])
            elif uv:
                try:
                    out = subprocess.run([uv, "cache", "dir"], capture_output=True, text=True, timeout=30)
                    if out.returncode == 0 and out.stdout.strip():
                        self._uv_cache_dir = Path(out.stdout.strip())
                except (OSError, subprocess.SubprocessError):
                    pass
        return self._uv_cache_dir or None

    def _harvest_wheels(self, site: Path, variables: dict[str, dict[str, str]], uv: str | None) -> None:
        """Keep a copy of each wheel that uv built with ``variables`` and installed into ``site``.

        uv records the variables of a build in ``<dist-info>/uv_build.json``; the wheel itself is found in
        uv's cache and accepted only if every file it holds has the hash of the installed one. Best effort:
        anything unexpected just means the next environment compiles again."""
        if not variables:
            return
        try:
            for dist_info in site.glob("*.dist-info"):
                name, _, version = dist_info.name[: -len(".dist-info")].rpartition("-")
                package = _normalize(name)
                if package not in variables:
                    continue
                try:
                    built = json.loads((dist_info / "uv_build.json").read_text()).get("extra_build_variables")
                except (OSError, ValueError):
                    continue
                if built != variables[package]:
                    continue
                target = self._wheelhouse(package, variables[package])
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
    return bool(files) and all(installed.get(path) == digest for path, digest in files.items())
