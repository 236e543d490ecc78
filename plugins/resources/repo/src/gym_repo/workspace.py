"""A session's workspace: a repository held in memory, copied into the sandbox for each command.

The workspace is a map from relative paths to entries (a file's bytes and executable bit, a
symbolic link's target, an empty directory). Nothing the model writes ever lands on the host's
disk: each command runs in a fresh sandbox whose size-capped scratch directory receives the
workspace, and the workspace's new state is read back from a tar stream the sandbox writes after
the command (:func:`snapshot_script`, :func:`read_snapshot`). Closing or expiring the session drops
the map, which deletes the workspace.

Paths given by the model are checked here (:meth:`Workspace.resolve`): relative, no ``..`` that
leaves the workspace, and symbolic links followed inside the workspace only; anything else is a
:class:`WorkspaceError` with a message for the model.
"""

from __future__ import annotations

import io
import os
import posixpath
import shlex
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Entry", "Snapshot", "Workspace", "WorkspaceError", "load_repository", "snapshot_script", "read_snapshot"]

WORK = "/tmp/work"  # the workspace inside the sandbox: the command's working directory
META = "/tmp/.gym"  # gym's own files in a run (the command, the prelude); never part of the workspace
LINK_DEPTH = 40  # symbolic links followed while resolving one path, at most


class WorkspaceError(Exception):
    """A path or an operation the workspace refuses; the message is for the model."""


@dataclass(frozen=True, slots=True)
class Entry:
    kind: str  # "file", "link" or "dir"
    data: bytes = b""  # a file's content
    target: str = ""  # a link's target, as written
    executable: bool = False

    @property
    def size(self) -> int:
        return len(self.data) + len(self.target)


def normalize(path: str) -> str:
    """``path`` as a workspace-relative path without ``.`` or ``..`` components; a WorkspaceError
    when it is absolute, empty, holds a NUL, or climbs out of the workspace."""
    if not isinstance(path, str) or "\0" in path:
        raise WorkspaceError(f"path {path!r} is not a valid path")
    if path.startswith("/"):
        raise WorkspaceError(f"path {path!r} is absolute: give a path relative to the workspace root")
    parts: list[str] = []
    for part in path.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if not parts:
                raise WorkspaceError(f"path {path!r} leaves the workspace")
            parts.pop()
        else:
            parts.append(part)
    return "/".join(parts)


class Workspace:
    """The files of one session, capped at ``max_bytes`` in all."""

    def __init__(self, entries: dict[str, Entry] | None = None, *, max_bytes: int = 16 << 20):
        self.entries: dict[str, Entry] = dict(entries or {})
        self.max_bytes = max_bytes
        self.check_size()

    def size(self) -> int:
        return sum(e.size + len(p) for p, e in self.entries.items())

    def check_size(self) -> None:
        if self.size() > self.max_bytes:
            raise WorkspaceError(f"the workspace would exceed its size limit of {self.max_bytes} bytes")

    def copy(self) -> Workspace:
        return Workspace(self.entries, max_bytes=self.max_bytes)

    def _is_dir(self, path: str) -> bool:
        if path == "":
            return True
        entry = self.entries.get(path)
        if entry is not None:
            return entry.kind == "dir"
        prefix = path + "/"
        return any(p.startswith(prefix) for p in self.entries)

    def resolve(self, path: str, *, follow_last: bool = True) -> str:
        """``path`` with every symbolic link followed, inside the workspace; a WorkspaceError when
        a link points out of it (absolute, or climbing past the root) or links loop."""
        pending = normalize(path).split("/") if normalize(path) else []
        done: list[str] = []
        hops = 0
        while pending:
            part = pending.pop(0)
            if part == "..":  # only from a link's target
                if not done:
                    raise WorkspaceError(f"path {path!r} leads out of the workspace through a symbolic link")
                done.pop()
                continue
            candidate = "/".join([*done, part])
            entry = self.entries.get(candidate)
            if entry is not None and entry.kind == "link" and (pending or follow_last):
                hops += 1
                if hops > LINK_DEPTH:
                    raise WorkspaceError(f"path {path!r}: too many levels of symbolic links")
                if entry.target.startswith("/"):
                    raise WorkspaceError(
                        f"path {path!r} goes through the symbolic link {candidate!r} to {entry.target!r}, "
                        "outside the workspace"
                    )
                pending = [p for p in entry.target.split("/") if p not in ("", ".")] + pending
                continue
            done.append(part)
        return "/".join(done)

    # --- what the tools do ----------------------------------------------------------------------

    def read(self, path: str) -> bytes:
        real = self.resolve(path)
        entry = self.entries.get(real)
        if entry is None:
            if self._is_dir(real):
                raise WorkspaceError(f"{path!r} is a directory")
            raise WorkspaceError(f"no file {path!r} in the workspace")
        if entry.kind != "file":
            raise WorkspaceError(f"{path!r} is a directory")
        return entry.data

    def write(self, path: str, data: bytes) -> None:
        real = self.resolve(path)
        if real == "":
            raise WorkspaceError("cannot write to the workspace root")
        old = self.entries.get(real)
        if old is not None and old.kind == "dir" or old is None and self._is_dir(real):
            raise WorkspaceError(f"{path!r} is a directory")
        parts = real.split("/")
        for i in range(1, len(parts)):
            parent = self.entries.get("/".join(parts[:i]))
            if parent is not None and parent.kind == "file":
                raise WorkspaceError(f"{'/'.join(parts[:i])!r} is a file, not a directory")
        trial = dict(self.entries)
        for i in range(1, len(parts)):  # a written file replaces the empty-directory markers above it
            if trial.get("/".join(parts[:i]), Entry("x")).kind == "dir":
                del trial["/".join(parts[:i])]
        trial[real] = Entry("file", data, executable=bool(old and old.executable))
        Workspace(trial, max_bytes=self.max_bytes)  # the size check
        self.entries = trial

    def list(self, path: str = "", *, recursive: bool = True) -> list[str]:
        real = self.resolve(path)
        if real and not self._is_dir(real):
            if real in self.entries:
                return [normalize(path)]
            raise WorkspaceError(f"no file or directory {path!r} in the workspace")
        prefix = real + "/" if real else ""
        names: set[str] = set()
        for p, entry in self.entries.items():
            if not p.startswith(prefix):
                continue
            rest = p[len(prefix) :]
            if not recursive and "/" in rest:
                names.add(rest.split("/", 1)[0] + "/")
                continue
            names.add(rest + ("/" if entry.kind == "dir" else ""))
        return sorted(names)


# --- repositories from rows ------------------------------------------------------------------------


def _checked_member(name: str, where: str) -> str:
    try:
        clean = normalize(name)
    except WorkspaceError:
        raise WorkspaceError(f"{where}: member {name!r} lies outside the repository") from None
    return clean


def load_repository(source: str | dict[str, str], *, max_bytes: int, base: Path | None = None) -> Workspace:
    """The repository a row names: files inline (``{path: text}``), a directory, or a ``.tar``,
    ``.tar.gz``/``.tgz`` or ``.zip`` file (relative paths are taken from ``base``). Archives' members
    must stay inside; links in a directory or a tar are kept as links (resolved inside only)."""
    entries: dict[str, Entry] = {}
    if isinstance(source, dict):
        for name, text in source.items():
            if not isinstance(text, str):
                raise WorkspaceError(f"repository file {name!r}: content must be a string")
            entries[_checked_member(name, "repository")] = Entry("file", text.encode())
        return Workspace(entries, max_bytes=max_bytes)
    path = Path(source)
    if not path.is_absolute() and base is not None:
        path = base / path
    if path.is_dir():
        for item in sorted(path.rglob("*")):
            rel = item.relative_to(path).as_posix()
            if "__pycache__" in rel.split("/") or rel.split("/")[0] == ".git":
                continue
            if item.is_symlink():
                entries[rel] = Entry("link", target=str(item.readlink()))
            elif item.is_file():
                entries[rel] = Entry("file", item.read_bytes(), executable=bool(item.stat().st_mode & 0o111))
            elif item.is_dir() and not any(item.iterdir()):
                entries[rel] = Entry("dir")
            _budget(entries, max_bytes, source)
        return Workspace(entries, max_bytes=max_bytes)
    if not path.is_file():
        raise WorkspaceError(f"repository {source!r}: no such directory or archive")
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as archive:
            for info in archive.infolist():
                name = _checked_member(info.filename, str(source))
                if not name:
                    continue
                if info.is_dir():
                    entries.setdefault(name, Entry("dir"))
                else:
                    if info.file_size > max_bytes:
                        raise WorkspaceError(f"repository {source!r} exceeds the workspace size limit")
                    executable = bool((info.external_attr >> 16) & 0o111)
                    entries[name] = Entry("file", archive.read(info), executable=executable)
                _budget(entries, max_bytes, source)
        return Workspace(_drop_filled_dirs(entries), max_bytes=max_bytes)
    try:
        archive = tarfile.open(path)
    except tarfile.TarError as exc:
        raise WorkspaceError(f"repository {source!r} is not a directory, a tar or a zip file: {exc}") from None
    with archive:
        entries = _tar_entries(archive, str(source), max_bytes)
    return Workspace(entries, max_bytes=max_bytes)


def _budget(entries: dict[str, Entry], max_bytes: int, source: object) -> None:
    if sum(e.size for e in entries.values()) > max_bytes:
        raise WorkspaceError(f"repository {source!r} exceeds the workspace size limit of {max_bytes} bytes")


def _drop_filled_dirs(entries: dict[str, Entry]) -> dict[str, Entry]:
    """Keep a directory entry only where nothing else lies under it."""
    filled = {"/".join(p.split("/")[:i]) for p in entries for i in range(1, p.count("/") + 1)}
    return {p: e for p, e in entries.items() if not (e.kind == "dir" and p in filled)}


def _tar_entries(archive: tarfile.TarFile, where: str, max_bytes: int, strip: str = "") -> dict[str, Entry]:
    entries: dict[str, Entry] = {}
    for member in archive:
        name = member.name
        if strip:
            if name == strip:
                continue
            if not name.startswith(strip + "/"):
                continue
            name = name[len(strip) + 1 :]
        name = _checked_member(name, where)
        if not name or "__pycache__" in name.split("/"):
            continue
        if member.isdir():
            entries.setdefault(name, Entry("dir"))
        elif member.issym():
            entries[name] = Entry("link", target=member.linkname)
        elif member.isfile():
            if member.size > max_bytes:
                raise WorkspaceError(f"{where}: exceeds the workspace size limit of {max_bytes} bytes")
            handle = archive.extractfile(member)
            data = handle.read() if handle else b""
            entries[name] = Entry("file", data, executable=bool(member.mode & 0o111))
        # hard links, devices, fifos: not part of a workspace
        _budget(entries, max_bytes, where)
    return _drop_filled_dirs(entries)


# --- a command's run -------------------------------------------------------------------------------


def sandbox_files(workspace: Workspace, extra: dict[str, bytes] | None = None) -> dict[str, bytes]:
    """The files of a run: the workspace's regular files under ``work/`` (the sandbox's scratch is
    ``/tmp``), and ``extra`` (gym's own, under ``.gym/``; ``.gym/bin/`` is made with them)."""
    files = {f"work/{p}": e.data for p, e in workspace.entries.items() if e.kind == "file"}
    files[".gym/bin/.made"] = b""
    for name, data in (extra or {}).items():
        files[f".gym/{name}"] = data
    return files


def _python_links(interpreter: str) -> str:
    """The line that puts ``python`` and ``python3`` in ``.gym/bin``: one ``ln`` when the
    interpreter's directory has both names for it (as a virtual environment's or pyenv's has), else two."""
    folder = posixpath.dirname(interpreter)
    real = os.path.realpath(interpreter)
    names = [posixpath.join(folder, n) for n in ("python", "python3")]
    if all(os.path.realpath(n) == real for n in names):
        return f"ln -s -t {META}/bin " + " ".join(shlex.quote(n) for n in names)
    return " && ".join(f"ln -s {shlex.quote(interpreter)} {META}/bin/{n}" for n in ("python", "python3"))


def prelude(workspace: Workspace, interpreter: str) -> str:
    """Shell lines that finish placing the workspace (empty directories, links, executable bits)
    and put ``python``/``python3`` (the sandbox's interpreter) first on the PATH. Every program
    started in the sandbox costs milliseconds, so the lines start as few as they can."""
    dirs = [] if any(e.kind == "file" for e in workspace.entries.values()) else [WORK]  # else the files made it
    links: list[str] = []
    executables: list[str] = []
    for path, entry in sorted(workspace.entries.items()):
        where = f"{WORK}/{path}"
        if entry.kind == "dir":
            dirs.append(where)
        elif entry.kind == "link":
            dirs.append(posixpath.dirname(where))
            links.append(f"ln -s {shlex.quote(entry.target)} {shlex.quote(where)}")
        elif entry.executable:
            executables.append(shlex.quote(where))
    lines = [_python_links(interpreter)]
    if dirs:
        lines.append("mkdir -p " + " ".join(shlex.quote(d) for d in dict.fromkeys(dirs)))
    lines += links
    if executables:
        lines.append("chmod +x " + " ".join(executables))
    return "\n".join(lines) + "\n"


def snapshot_script(timeout_s: float, *, stdin_file: str | None = None) -> str:
    """The run's program (``sh``): the prelude, the command (``.gym/command``) under ``timeout``
    with its output in ``/dev/shm``, then a tar stream on stdout holding the workspace's new state
    (``work/``) and the command's ``out``, ``err`` and ``status``. (Each program it starts costs
    milliseconds: it starts ``sh``, the prelude's ``ln``, ``timeout``, the command's ``sh``, ``tar``.)"""
    stdin = shlex.quote(stdin_file) if stdin_file else "/dev/null"
    return f"""set -u
export PATH={META}/bin:/usr/local/bin:/usr/bin:/bin PYTHONDONTWRITEBYTECODE=1
. {META}/prelude.sh >/dev/null 2>&1
cd {WORK} || exit 97
timeout -k 1 {timeout_s:g} sh {META}/command <{stdin} >/dev/shm/out 2>/dev/shm/err
echo $? >/dev/shm/status
cd /tmp || exit 98
exec tar -c -f - --exclude=__pycache__ work -C /dev/shm out err status 2>/dev/null
"""


@dataclass
class Snapshot:
    workspace: Workspace
    stdout: bytes
    stderr: bytes
    exit_code: int | None


def read_snapshot(stream: bytes, *, max_bytes: int) -> Snapshot:
    """The workspace and the command's output from a run of :func:`snapshot_script`; a
    WorkspaceError when the stream is not one (the run was stopped before writing it)."""
    meta: dict[str, bytes] = {}
    try:
        with tarfile.open(fileobj=io.BytesIO(stream), mode="r:") as archive:
            members = archive.getmembers()
            work = [m for m in members if m.name == "work" or m.name.startswith("work/")]
            for member in members:
                if member.name in ("out", "err", "status") and member.isfile():
                    handle = archive.extractfile(member)
                    meta[member.name] = handle.read() if handle else b""
            sub = tarfile.open(fileobj=io.BytesIO(stream), mode="r:")
            with sub:
                entries = _tar_entries(sub, "the workspace", max_bytes, strip="work")
    except tarfile.TarError as exc:
        raise WorkspaceError(f"the command's workspace could not be read back: {exc}") from None
    if not work:
        entries = {}
    status = meta.get("status", b"").strip()
    return Snapshot(
        workspace=Workspace(entries, max_bytes=max_bytes),
        stdout=meta.get("out", b""),
        stderr=meta.get("err", b""),
        exit_code=int(status) if status.lstrip(b"-").isdigit() else None,
    )
