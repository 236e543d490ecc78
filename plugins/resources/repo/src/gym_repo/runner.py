"""The hidden tests' driver, run as a file in the verification's sandbox (never imported by gym).

It reads a nonce from stdin and the test ids from ``/tmp/.gym/tests.json``, imports the standard
library's ``unittest`` *before* the workspace is on ``sys.path`` (run with ``python -I``: neither
the working directory nor ``PYTHONPATH`` is searched, so a workspace module called ``unittest``
cannot stand in for it), then runs each test id on its own and prints one line per test:
``<nonce> {"test": id, "passed": bool, "detail": str}``. Lines are flushed as they come, so the
tests run before a timeout keep their results.
"""

import json
import sys
import traceback
import unittest

nonce = sys.stdin.readline().strip()
with open("/tmp/.gym/tests.json") as handle:
    test_ids = json.load(handle)
out = sys.stdout
sys.path.insert(0, "/tmp/work")


def report(test_id, passed, detail):
    out.write(nonce + " " + json.dumps({"test": test_id, "passed": passed, "detail": detail[-2000:]}) + "\n")
    out.flush()


for test_id in test_ids:
    try:
        suite = unittest.defaultTestLoader.loadTestsFromName(test_id)
        result = unittest.TestResult()
        suite.run(result)
    except BaseException:  # an import error, a SystemExit from the code under test...
        report(test_id, False, traceback.format_exc(limit=3))
        continue
    problems = result.errors + result.failures + result.unexpectedSuccesses
    if result.testsRun == 0:
        report(test_id, False, "no test ran")
    elif problems:
        first = problems[0]
        report(test_id, False, first[1] if isinstance(first, tuple) else str(first))
    else:
        report(test_id, True, "")
