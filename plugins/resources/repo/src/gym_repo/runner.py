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
run before a timeout keep their results. The parts the pytest driver shares (the nonce, the job, the
processes killed, the fork and its verdict's pipe) are in ``_driver.py``, shipped beside it.
"""

import builtins
import contextlib
import os
import shutil
import traceback
import types
import unittest
import unittest.case
import unittest.loader
import unittest.result
import unittest.suite
import unittest.util

# The part both drivers share (gym_repo/_driver.py), run from its source: not imported (see its docstring).
DRIVER = types.ModuleType("_driver")
with open("/tmp/.gym/_driver.py", "rb") as _handle:
    exec(compile(_handle.read(), "/tmp/.gym/_driver.py", "exec"), vars(DRIVER))
WATCHED_MODULES = (unittest, unittest.case, unittest.loader, unittest.result, unittest.suite, unittest.util, builtins)
WATCHED_CLASSES = (unittest.TestCase, unittest.TestResult, unittest.TestSuite, unittest.TestLoader)
TestCase = unittest.TestCase
TestResult = unittest.TestResult
TestLoader = unittest.TestLoader
TestSuite = unittest.TestSuite
run_suite = unittest.TestSuite.run


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
    return changed + DRIVER.hooked(FRAMEWORK_MODULES)


FRAMEWORK_MODULES = {m.__name__: m for m in WATCHED_MODULES if m is not builtins}
SNAPSHOT = _snapshot(WATCHED_MODULES + WATCHED_CLASSES)


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
    DRIVER.isolate(nonce)
    try:
        passed, detail = _verdict(test_id)
    except BaseException:
        passed, detail = False, "the driver failed"
    DRIVER.send(verdict_fd, token, passed, detail)


def _restore(hidden, keep):
    """No process of an earlier test (every process but ``keep`` and init), and the hidden test files
    as they were: no test changes what the next one runs."""
    DRIVER.kill_others(keep)
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
    return DRIVER.run_forked(lambda verdict_fd, token: _child(test_id, nonce, verdict_fd, token), timeout_s)


DRIVER.main(_run_one)
