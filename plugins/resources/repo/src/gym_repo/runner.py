"""The hidden tests' driver, run as a file in the verification's sandbox (never imported by gym).

Run as ``python -I -S -B runner.py`` in ``/tmp/work`` (``-I``: neither the working directory nor
``PYTHONPATH`` nor the user's site directory is searched; ``-S``: no ``site``, so no
``sitecustomize``/``usercustomize``/``.pth`` of the workspace runs). It reads a nonce from stdin and
the test ids, each test's time limit and the hidden test files' paths from ``/tmp/.gym/tests.json``,
imports the standard library's ``unittest`` and never imports the workspace itself. Before each test
it puts the hidden test files back as they were and kills every process earlier tests left (all but
itself and its ancestors), so that no test changes what the next one runs; the forks read no
bytecode cache. Each test runs in a fork of it (:func:`_child`) that, before importing
any workspace code, drops the nonce from its memory and points its standard streams at
``/dev/null``; it then loads the test with the ``unittest`` objects the driver holds, refuses a test
whose framework was changed (any attribute of ``unittest``'s modules and classes, of ``builtins``,
of the test's own classes, a trace or profile hook) after the import and again after the run,
counts a skipped test as failed, and sends its verdict down a pipe with a token of its own. The
driver (non-dumpable: the forks cannot read its ``/proc`` entries) accepts a verdict only from a
child that exited 0 and sent exactly one line with its token, and prints one line per test on
stdout: ``<nonce> {"test": id, "passed": bool, "detail": str}``, flushed as they come, so the tests
run before a timeout keep their results.
"""

import builtins
import contextlib
import ctypes
import json
import os
import select
import shutil
import signal
import sys
import time
import traceback
import unittest
import unittest.case
import unittest.loader
import unittest.result
import unittest.suite
import unittest.util

WORK = "/tmp/work"
WATCHED_MODULES = (unittest, unittest.case, unittest.loader, unittest.result, unittest.suite, unittest.util, builtins)
WATCHED_CLASSES = (unittest.TestCase, unittest.TestResult, unittest.TestSuite, unittest.TestLoader)
TestCase = unittest.TestCase
TestResult = unittest.TestResult
TestLoader = unittest.TestLoader
TestSuite = unittest.TestSuite
run_suite = unittest.TestSuite.run
write = os.write
exit_now = os._exit


def _snapshot(owners):
    return {(id(owner), name): value for owner in owners for name, value in list(vars(owner).items())}


def _changed(snapshot, owners):
    """The names of ``owners`` whose value is no longer the one in ``snapshot``."""
    changed = []
    for owner in owners:
        now = vars(owner)
        for (owner_id, name), value in snapshot.items():
            if owner_id == id(owner) and (name not in now or now[name] is not value):
                changed.append(f"{getattr(owner, '__name__', owner)}.{name}")
    if sys.gettrace() is not None or sys.getprofile() is not None:
        changed.append("a trace or profile hook")
    for name, module in FRAMEWORK_MODULES.items():
        if sys.modules.get(name) is not module:
            changed.append(f"sys.modules[{name!r}]")
    return changed


FRAMEWORK_MODULES = {m.__name__: m for m in WATCHED_MODULES if m is not builtins}
SNAPSHOT = _snapshot(WATCHED_MODULES + WATCHED_CLASSES)


def _wipe(buffer):
    if len(buffer):
        ctypes.memset((ctypes.c_char * len(buffer)).from_buffer(buffer), 0, len(buffer))


def _flatten(suite):
    if isinstance(suite, TestSuite):
        for item in list(suite):
            yield from _flatten(item)
    else:
        yield suite


def _verdict(test_id):
    """The test's verdict as (passed, detail), in the child, workspace code imported by now."""
    try:
        suite = TestLoader().loadTestsFromName(test_id)
    except BaseException:  # an import error, a SystemExit from the code under test...
        return False, traceback.format_exc(limit=3)
    tests = list(_flatten(suite))
    if len(tests) != 1 or not isinstance(tests[0], TestCase):
        return False, f"{test_id} names {len(tests)} tests, not one unittest test"
    test = tests[0]
    own = tuple(c for c in type(test).__mro__ if c not in (TestCase, object))
    own_snapshot = _snapshot(own)
    changed = _changed(SNAPSHOT, WATCHED_MODULES + WATCHED_CLASSES)
    if changed:
        return False, "the code under test changed the test framework: " + ", ".join(changed[:5])
    result = TestResult()
    try:
        run_suite(TestSuite([test]), result)  # as unittest runs it: module and class fixtures too
    except BaseException:
        return False, traceback.format_exc(limit=3)
    changed = _changed(SNAPSHOT, WATCHED_MODULES + WATCHED_CLASSES) + _changed(own_snapshot, own)
    # (a method of the result replaced on the instance; its plain attributes change as tests run)
    changed += [f"the result's {name}" for name in vars(result) if callable(getattr(TestResult, name, None))]
    if changed:
        return False, "the code under test changed the test framework: " + ", ".join(changed[:5])
    problems = result.errors + result.failures
    if result.testsRun != 1:
        return False, "no test ran"
    if problems:
        return False, str(problems[0][1])
    if result.skipped:
        return False, f"skipped: {result.skipped[0][1]}"
    if result.unexpectedSuccesses:
        return False, "unexpected success"
    return True, ""


def _child(test_id, nonce, verdict_fd, token):
    _wipe(nonce)  # this fork never holds the driver's nonce
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)
    sys.pycache_prefix = "/proc/gym-no-bytecode"  # no bytecode the code under test wrote is read
    sys.path.insert(0, WORK)
    try:
        passed, detail = _verdict(test_id)
    except BaseException:
        passed, detail = False, "the driver failed"
    line = json.dumps({"passed": passed is True, "detail": str(detail)[-2000:]}).encode()
    write(verdict_fd, token + b" " + line + b"\n")
    exit_now(0)


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


def _restore(hidden, keep):
    """No process of an earlier test (every process but ``keep`` and init), and the hidden test files
    as they were: no test changes what the next one runs."""
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) not in keep and int(name) != 1:
            with contextlib.suppress(OSError):
                os.kill(int(name), signal.SIGKILL)
    for path, data in hidden.items():
        with contextlib.suppress(OSError):
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            elif os.path.lexists(path):
                os.unlink(path)
        with contextlib.suppress(OSError):
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as handle:
                handle.write(data)


def _run_one(test_id, nonce, timeout_s, hidden, keep):
    _restore(hidden, keep)
    token = os.urandom(16).hex().encode()
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        try:
            os.setsid()  # its own group: whatever it leaves is killed with it
            _child(test_id, nonce, write_fd, token)
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


def main():
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
        passed, detail = _run_one(test_id, nonce, job["test_timeout_s"], hidden, keep)
        line = json.dumps({"test": test_id, "passed": passed, "detail": detail[-2000:]}).encode()
        os.writev(1, [nonce_view, b" ", line, b"\n"])


main()
