"""What the hidden tests' two drivers share, shipped beside them into the verification's sandbox as
``/tmp/.gym/_driver.py`` (never imported by gym).

:mod:`gym_repo.runner` (unittest) and :mod:`gym_repo.pytest_runner` (pytest) each run this file's
source into a module object of their own (the few lines at their top, ``DRIVER``) before any code
of the workspace runs, rather than import it: under ``-I`` the driver's own directory is not on
``sys.path``, and an import would also leave the module in ``sys.modules`` (where a workspace module
of the same name would be handed it) and read a bytecode cache; this way only the driver's globals
change. It holds the protocol both follow:

- :func:`main`: the driver makes itself non-dumpable (its forks cannot open its ``/proc`` files),
  reads the nonce from stdin straight into a buffer of its own, the job from ``/tmp/.gym/tests.json``
  (the test ids, each test's time limit, the hidden test files' paths, whose contents it keeps), and
  prints ``<nonce> {"test": id, "passed": bool, "detail": str}`` per test on stdout, flushed as they
  come, so the tests run before a timeout keep their results;
- :func:`kill_others`: before each test, every process but the driver, its ancestors and init is
  killed (the driver then puts the hidden test files back its own way);
- :func:`run_forked`: each test runs in a fork in a session of its own that first isolates itself
  (:func:`isolate`: the nonce wiped, the standard streams on ``/dev/null``, no bytecode cache read,
  the workspace first on ``sys.path``) and at its end sends its verdict down a pipe with a token of
  its own (:func:`send`); the driver accepts it only from a fork that exited 0 after sending exactly
  one line with that token, and kills the fork's group after it or at the time limit;
- :func:`hooked`: the checks of the test framework both make in the fork besides their own
  snapshots (a trace or profile hook, a framework module replaced in ``sys.modules``).
"""

import contextlib
import ctypes
import json
import os
import select
import signal
import sys
import time

WORK = "/tmp/work"
write = os.write
exit_now = os._exit


def _wipe(buffer):
    if len(buffer):
        ctypes.memset((ctypes.c_char * len(buffer)).from_buffer(buffer), 0, len(buffer))


def isolate(nonce):
    """In the fork, before any code of the workspace: no nonce, no standard streams, no bytecode."""
    _wipe(nonce)  # this fork never holds the driver's nonce
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)
    sys.pycache_prefix = "/proc/gym-no-bytecode"  # no bytecode the code under test wrote is read
    sys.path.insert(0, WORK)


def send(verdict_fd, token, passed, detail):
    """In the fork: the verdict, one line with the token, and the fork's end."""
    line = json.dumps({"passed": passed is True, "detail": str(detail)[-2000:]}).encode()
    write(verdict_fd, token + b" " + line + b"\n")
    exit_now(0)


def hooked(framework_modules):
    """In the fork, the checks of the framework both drivers make beside their own: a trace or profile
    hook set, and each of ``framework_modules`` (name: module) that ``sys.modules`` no longer holds."""
    changed = []
    if sys.gettrace() is not None or sys.getprofile() is not None:
        changed.append("a trace or profile hook")
    for name, module in framework_modules.items():
        if sys.modules.get(name) is not module:
            changed.append(f"sys.modules[{name!r}]")
    return changed


def _ancestors():
    """This process and the processes it descends from (the sandbox's init, a pool's worker)."""
    chain = {os.getpid()}
    pid = os.getpid()
    while pid > 1:
        try:
            with open(f"/proc/{pid}/stat", "rb") as handle:
                pid = int(handle.read().rpartition(b")")[2].split()[1])  # the field after the state: ppid
        except (OSError, ValueError, IndexError):
            break
        chain.add(pid)
    return chain


def kill_others(keep):
    """No process of an earlier test: every process but ``keep`` (the driver and its ancestors) and init."""
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) not in keep and int(name) != 1:
            with contextlib.suppress(OSError):
                os.kill(int(name), signal.SIGKILL)


def run_forked(child, timeout_s):
    """``child(verdict_fd, token)`` in a fork (its own session: whatever it leaves is killed with it);
    the verdict it sent as (passed, detail), or a failure saying why there is none."""
    token = os.urandom(16).hex().encode()
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        try:
            os.setsid()
            child(write_fd, token)
        finally:
            exit_now(1)
    os.close(write_fd)
    deadline = time.monotonic() + timeout_s
    data = bytearray()
    status = None
    ended = False  # the pipe's end (every writer closed it)
    while status is None and time.monotonic() < deadline:
        wait = min(0.05, max(0.0, deadline - time.monotonic()))
        if not ended and select.select([read_fd], [], [], wait)[0]:
            chunk = os.read(read_fd, 1 << 16)
            data += chunk[: max(0, (1 << 16) - len(data))]
            ended = not chunk
            if chunk:
                continue
        elif ended:
            time.sleep(0.001)
        done, code = os.waitpid(pid, os.WNOHANG)
        if done:
            status = code
    os.close(read_fd)
    with contextlib.suppress(OSError):
        os.killpg(pid, signal.SIGKILL)
    if status is None:
        os.waitpid(pid, 0)
        return False, f"timed out after {timeout_s:g} s"
    lines = bytes(data).splitlines()
    if not os.WIFEXITED(status) or os.WEXITSTATUS(status) != 0:
        return False, "the test's process did not exit cleanly"
    if len(lines) != 1 or not lines[0].startswith(token + b" "):
        return False, "the test's process sent no verdict, or more than one"
    try:
        verdict = json.loads(lines[0][len(token) + 1 :])
    except ValueError:
        return False, "the test's process sent no verdict"
    return verdict.get("passed") is True, str(verdict.get("detail", ""))


def main(run_one):
    """The driver's run: ``run_one(test_id, nonce, timeout_s, hidden, keep)`` per test id of the job
    (``hidden``: each hidden test file's path and contents; ``keep``: :func:`_ancestors`)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0: the forks cannot open this process's /proc files
    nonce = bytearray(64)  # read straight into it (no other copy), and wiped in every fork
    size = 0
    while not nonce[:size].endswith(b"\n") and size < len(nonce):
        count = os.readv(0, [memoryview(nonce)[size:]])
        if not count:
            break
        size += count
    nonce_view = memoryview(nonce)[: max(0, size - 1)]
    with open("/tmp/.gym/tests.json") as handle:
        job = json.load(handle)
    hidden = {}
    for relative in job.get("hidden", []):
        path = os.path.normpath(os.path.join(WORK, relative))
        with contextlib.suppress(OSError), open(path, "rb") as handle:
            hidden[path] = handle.read()
    keep = _ancestors()
    for test_id in job["ids"]:
        passed, detail = run_one(test_id, nonce, job["test_timeout_s"], hidden, keep)
        line = json.dumps({"test": test_id, "passed": passed, "detail": detail[-2000:]}).encode()
        os.writev(1, [nonce_view, b" ", line, b"\n"])
