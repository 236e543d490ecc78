"""What a running launcher leaves on disk so that the next one can clean up after it.

Every ``gym run`` (and ``gym collect --serve``) keeps ``$GYM_HOME/runs/<its pid>.json`` up to date with
its own pid and start time and, for each server process, the pid, start time and command line::

    {"pid": 4242, "started": 881234, "cmdline": ["/.../python", "-m", "gym_cli", "run", "..."],
     "head_url": "http://127.0.0.1:11000",
     "servers": {"counter": {"pid": 4250, "started": 881301, "cmdline": ["/.../python", "-m", "gym_core.serve"]}}}

and removes it when it stops. The file is written as soon as the launcher has resolved its config, before
it builds venvs or starts anything (``servers`` stays empty until the first server starts), so that a run
still starting can be found and stopped. ``gym stop`` finds running launchers through these files
(:class:`RecordedRun`). A file whose launcher no longer runs was left by a launcher killed with
``kill -9``: :func:`clean_stale_runs` stops that launcher's leftover servers (only processes whose start
time and command line match the file: a recycled pid belongs to someone else) and removes the file.
Start times are the kernel's (``/proc/<pid>/stat``, in clock ticks since boot), so only Linux can tell
a recycled pid; elsewhere nothing is cleaned.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

__all__ = [
    "RunStateFile",
    "RecordedRun",
    "clean_stale_runs",
    "process_identity",
    "runs_dir",
    "group_alive",
    "signal_group",
    "stop_groups",
    "same_head",
]


def runs_dir(home: Path | None = None) -> Path:
    """``$GYM_HOME/runs``: one state file per running launcher."""
    from gym_cli.venvs.layout import default_home

    return (home or default_home()) / "runs"


def process_identity(pid: int) -> tuple[int, list[str]] | None:
    """The start time (clock ticks since boot) and command line of process ``pid``; None when it does
    not exist (or is a zombie) or this is not Linux."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold spaces or ')': split after the last one.
    fields = stat[stat.rindex(")") + 2 :].split()
    if fields[0] == "Z":
        return None
    return int(fields[19]), [part.decode("utf-8", "replace") for part in cmdline.split(b"\0")[:-1]]


class RunStateFile:
    """The state file of this launcher (see the module docstring). Writes are atomic."""

    def __init__(self, directory: Path, head_url: str):
        self.path = directory / f"{os.getpid()}.json"
        identity = process_identity(os.getpid())
        self._data: dict[str, Any] = {
            "pid": os.getpid(),
            "started": identity[0] if identity else None,
            "cmdline": identity[1] if identity else None,
            "head_url": head_url,
            "servers": {},
        }

    def record(self, pids: Mapping[str, int]) -> None:
        """Record the server processes now running (called after each start or restart)."""
        servers = {}
        for name, pid in pids.items():
            identity = process_identity(pid)
            servers[name] = {
                "pid": pid,
                "started": identity[0] if identity else None,
                "cmdline": identity[1] if identity else None,
            }
        self._data["servers"] = servers
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self._data))
        tmp.replace(self.path)

    def remove(self) -> None:
        with contextlib.suppress(OSError):
            self.path.unlink(missing_ok=True)


@dataclass(frozen=True)
class RecordedRun:
    """A launcher as its state file records it: its identity, its head server and its servers."""

    path: Path
    pid: int
    started: int | None
    cmdline: list[str] | None
    head_url: str
    servers: dict[str, dict[str, Any]]

    @classmethod
    def load(cls, path: Path) -> RecordedRun | None:
        """The run recorded in ``path``; None when the file is gone or unreadable."""
        try:
            data = json.loads(path.read_text())
            servers = {
                str(name): {
                    "pid": int(server["pid"]),
                    "started": server.get("started"),
                    "cmdline": server.get("cmdline"),
                }
                for name, server in dict(data.get("servers") or {}).items()
            }
            return cls(
                path=path,
                pid=int(data["pid"]),
                started=data.get("started"),
                cmdline=data.get("cmdline"),
                head_url=str(data.get("head_url") or ""),
                servers=servers,
            )
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None

    @classmethod
    def all_in(cls, directory: Path) -> list[RecordedRun]:
        """Every readable state file in ``directory``, oldest launcher first."""
        runs = [run for path in sorted(directory.glob("*.json")) if (run := cls.load(path)) is not None]
        return sorted(runs, key=lambda run: (run.started is None, run.started or 0, run.pid))

    def launcher_alive(self) -> bool:
        """Whether the launcher still runs: its pid is held by the process that wrote the file (same
        start time and, when recorded, command line), not by a process that got the pid later."""
        identity = process_identity(self.pid)
        if identity is None or identity[0] != self.started:
            return False
        return self.cmdline is None or identity[1] == self.cmdline  # files of older gyms lack the cmdline

    def server_groups(self) -> list[tuple[str, int]]:
        """The ``(name, process group)`` of each recorded server that is still running (same start time
        and command line as recorded) or whose group still has members; never a recycled pid."""
        groups = []
        for name, server in self.servers.items():
            pid = server["pid"]
            identity = process_identity(pid)
            if identity is None:
                # The server itself is gone; processes it spawned may live on in its group, whose id
                # the kernel does not give to a new process while any member lives.
                if server["started"] is not None and group_alive(pid):
                    groups.append((name, pid))
            elif list(identity) == [server["started"], server["cmdline"]]:
                groups.append((name, pid))
            # else: the pid now belongs to another process: never touch it
        return groups

    def command(self, width: int = 80) -> str:
        """The launcher's command line as the user typed it, roughly (``gym run config.yaml ...``)."""
        argv = list(self.cmdline or [])
        for index, part in enumerate(argv):
            if part == "gym_cli" or Path(part).name == "gym":
                argv = ["gym", *argv[index + 1 :]]
                break
        text = " ".join(argv) or "gym"
        return text if len(text) <= width else text[: width - 1] + "…"

    def age_s(self) -> float | None:
        """Seconds since the launcher started; None when that cannot be told (not Linux)."""
        if self.started is None:
            return None
        try:
            uptime_s = float(Path("/proc/uptime").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None
        return max(0.0, uptime_s - self.started / os.sysconf("SC_CLK_TCK"))

    def summary(self) -> str:
        """One line for people: pid, head URL, how long it has been up, its command."""
        age = self.age_s()
        up = "" if age is None else f"up {_duration(age)}, "
        return f"pid {self.pid}, head {self.head_url or '?'} ({up}{len(self.servers)} servers): {self.command()}"

    def remove(self) -> None:
        """Remove the state file (nothing when it is already gone)."""
        _remove(self.path)


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def same_head(a: str, b: str) -> bool:
    """Whether two head server URLs name the same server (``localhost`` is ``127.0.0.1``; a trailing
    ``/`` and the letter case do not matter)."""

    def key(url: str) -> tuple[str, str, int | None] | str:
        parts = urlsplit(url.strip().rstrip("/").lower())
        try:
            port = parts.port
        except ValueError:
            return url
        host = "127.0.0.1" if parts.hostname == "localhost" else parts.hostname or ""
        return parts.scheme, host, port or {"http": 80, "https": 443}.get(parts.scheme)

    return key(a) == key(b)


def clean_stale_runs(directory: Path, log: Callable[[str], None], grace_s: float = 5.0) -> list[str]:
    """Stop the leftover servers of every launcher in ``directory`` that no longer runs and remove its
    state file; the names of the servers stopped. A launcher that still runs is left alone."""
    stopped: list[str] = []
    if not directory.is_dir() or process_identity(os.getpid()) is None:  # no /proc: cannot tell who is who
        return stopped
    for path in sorted(directory.glob("*.json")):
        run = RecordedRun.load(path)
        if run is None:
            _remove(path)  # unreadable: nothing in it can be trusted to kill
            continue
        if run.pid == os.getpid() or run.launcher_alive():
            continue
        groups = run.server_groups()
        if groups:
            log(
                f"stopping {len(groups)} server(s) left running by a gym process that was killed (pid "
                f"{run.pid}): {', '.join(f'{name} (pid {pid})' for name, pid in groups)}"
            )
            stop_groups([pid for _, pid in groups], grace_s)
            stopped += [name for name, _ in groups]
        run.remove()
    return stopped


def _remove(path: Path) -> None:
    with contextlib.suppress(OSError):  # another launcher cleaning at the same time, or a read-only home
        path.unlink(missing_ok=True)


def stop_groups(pgids: list[int], grace_s: float) -> list[int]:
    """SIGTERM each process group, wait up to ``grace_s`` seconds, SIGKILL those still alive; the groups
    that had to be killed."""
    for pgid in pgids:
        signal_group(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(group_alive(pgid) for pgid in pgids):
        time.sleep(0.05)
    killed = [pgid for pgid in pgids if group_alive(pgid)]
    for pgid in killed:
        signal_group(pgid, signal.SIGKILL)
    return killed


def signal_group(pgid: int, signum: int) -> None:
    """Send ``signum`` to process group ``pgid``; nothing when it is gone or not ours."""
    try:
        os.killpg(pgid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def group_alive(pgid: int) -> bool:
    """Whether process group ``pgid`` has a member that is ours and not a zombie (a zombie waits for a
    parent, often init, to reap it: signals cannot end it)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return False  # not ours
    proc = Path("/proc")
    if not proc.is_dir():
        return True
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False
