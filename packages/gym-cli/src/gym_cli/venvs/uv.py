"""Running uv, which builds every venv: finding it, running it with its output logged, its errors."""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from gym_core.errors import GymError

__all__ = [
    "VenvBuildError",
    "UvNotFoundError",
    "find_uv",
    "run_uv",
    "stop_builds",
    "allow_builds",
    "uv_cache_dir",
    "TAIL_LINES",
]

TAIL_LINES = 30
"""How many of uv's last output lines a :class:`VenvBuildError` carries."""


class VenvBuildError(GymError):
    """Building the venv of ``plugin`` failed; ``output_tail`` holds the last lines uv printed."""

    def __init__(self, plugin: str, message: str, output_tail: Sequence[str] = ()):
        self.plugin = plugin
        self.message = message
        self.output_tail = list(output_tail)
        text = f"cannot build the venv of plugin {plugin!r}: {message}"
        if self.output_tail:
            text += "\n" + "\n".join(f"  | {line}" for line in self.output_tail)
        super().__init__(text)


class UvNotFoundError(VenvBuildError):
    """uv, which builds the venvs, is not installed."""


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


def _environ() -> dict[str, str]:
    """This process's environment without what would point uv at another environment."""
    env = dict(os.environ)
    for var in ("VIRTUAL_ENV", "UV_PROJECT_ENVIRONMENT", "CONDA_PREFIX", "PYTHONHOME"):
        env.pop(var, None)
    env.setdefault("NO_COLOR", "1")
    env["UV_NO_PROGRESS"] = "1"
    return env


# The uv processes run_uv waits on now. Builds run in worker threads, which an interrupted launcher waits
# for: stop_builds ends them (and the next step of a build, which would start another uv) so that
# `gym stop` is not kept waiting by a build.
_RUNNING: set[subprocess.Popen[str]] = set()
_RUNNING_LOCK = threading.RLock()  # re-entrant: stop_builds may run in a signal handler of this thread
_STOPPED = threading.Event()


def stop_builds() -> None:
    """Terminate every uv process that :func:`run_uv` is waiting on, and fail every later
    :func:`run_uv` until :func:`allow_builds`: the builds in progress end with a VenvBuildError."""
    _STOPPED.set()
    with _RUNNING_LOCK:
        running = list(_RUNNING)
    for proc in running:
        try:
            proc.terminate()
        except OSError:
            pass  # already gone


def allow_builds() -> None:
    """Let :func:`run_uv` run uv again after :func:`stop_builds`."""
    _STOPPED.clear()


def run_uv(plugin: str, args: list[str], cwd: Path, log: TextIO, log_path: Path) -> None:
    """Run ``args`` (``args[0]`` is uv) in ``cwd``, writing all its output to ``log``; a
    :class:`VenvBuildError` with the last lines when it fails."""
    log.write(f"$ (cd {cwd} && {' '.join(args)})\n")
    log.flush()
    tail: deque[str] = deque(maxlen=TAIL_LINES)
    if _STOPPED.is_set():
        raise VenvBuildError(plugin, "stopped: gym is shutting down")
    try:
        proc = subprocess.Popen(
            args,
            cwd=cwd,
            env=_environ(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
        )
    except OSError as exc:
        raise UvNotFoundError(plugin, f"cannot run uv ({args[0]}): {exc}. Install uv with `pip install uv`") from exc
    with _RUNNING_LOCK:
        _RUNNING.add(proc)
    if _STOPPED.is_set():  # stop_builds ran between the check above and now
        proc.terminate()
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
        with _RUNNING_LOCK:
            _RUNNING.discard(proc)
        log.flush()
    if returncode != 0:
        what = " ".join(a for a in args[1:3] if not a.startswith("-"))
        raise VenvBuildError(plugin, f"`uv {what}` failed with exit code {returncode} (full output: {log_path})", tail)


def uv_cache_dir(uv: str | None) -> Path | None:
    """uv's cache directory: ``$UV_CACHE_DIR``, else what ``uv cache dir`` says, else None."""
    if os.environ.get("UV_CACHE_DIR"):
        return Path(os.environ["UV_CACHE_DIR"])
    if uv:
        try:
            out = subprocess.run([uv, "cache", "dir"], capture_output=True, text=True, timeout=30)
            if out.returncode == 0 and out.stdout.strip():
                return Path(out.stdout.strip())
        except (OSError, subprocess.SubprocessError):
            pass
    return None
