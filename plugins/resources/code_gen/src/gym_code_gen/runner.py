"""The program that runs ONE unit test of a model's solution inside gym's sandbox.

This file is not imported by the server: its text is run by the sandbox's interpreter as ``main.py``
(standard library only, ``python -I``), next to the model's code in ``solution.py``. It executes the
environments spec's fixed prelude, then the solution, in a fresh module namespace.

``main.py stdin <reference>``: the test input is the standard input. With
``reference`` = 1 the program runs as the reference runs it (statements wrapped in a function,
mocked stdin); with 0 as a plain script. ``SystemExit`` is swallowed. Exit status 0: the program
ended (its stdout is the answer); 1: it raised (traceback on stderr).

``main.py call <fn_name> <timeout_s>``: standard input is a per-run nonce line, then the test's
argument lines (JSON). The program's own stdout is sent to stderr; the driver alone writes, on
the original stdout, frames ``<nonce> <kind> <payload>``: ``loaded`` (the module ran and the
function was found), then one of ``result <json>``, ``unserializable``, ``timeout`` or
``error <message>``. The verdict is made outside the sandbox, from these frames: nothing the
program does in here can see the expected output.
"""

import ast
import builtins
import io
import json
import os
import signal
import sys
import traceback

MODULES = (
    "string re datetime collections heapq bisect copy math random statistics itertools functools "
    "operator io sys json builtins typing"
).split()
PRELUDE = (
    "".join(f"from {m} import *\n" for m in MODULES) + f"import {', '.join(MODULES)}\nsys.setrecursionlimit(50000)\n"
)
WRAPPER = "wrapped_function"


class TimeLimit(Exception):
    """Raised by the alarm: the reference's per-phase time limit (an Exception, as there)."""


def _alarm(seconds):
    def expired(signum, frame):
        raise TimeLimit(f"timed out after {seconds} s")

    signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)


def _clear_alarm():
    signal.setitimer(signal.ITIMER_REAL, 0)


def _more_stack():
    # The reference raises the soft stack limit to 4 GiB: deep recursion through C frames needs it.
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_STACK)
        target = 4 << 30 if hard == resource.RLIM_INFINITY else min(hard, 4 << 30)
        if soft != resource.RLIM_INFINITY and soft < target:
            resource.setrlimit(resource.RLIMIT_STACK, (target, hard))
    except (ImportError, ValueError, OSError):
        pass


def _is_main_guard(node):
    return (
        isinstance(node, ast.If)
        and isinstance(node.test, ast.Compare)
        and isinstance(node.test.left, ast.Name)
        and node.test.left.id == "__name__"
    )


def wrap(source):
    """The reference's transformation of a standard-input program: imports stay at module level,
    a final ``if __name__ ...:`` is replaced by its body, every other statement moves into a
    zero-argument function. A source that does not parse is returned unchanged."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return source
    body = list(tree.body)
    if body and _is_main_guard(body[-1]):
        body = body[:-1] + body[-1].body
    imports = [s for s in body if isinstance(s, (ast.Import, ast.ImportFrom))]
    rest = [s for s in body if not isinstance(s, (ast.Import, ast.ImportFrom))]
    function = ast.parse(f"def {WRAPPER}():\n    pass\n").body[0]
    function.body = rest or [ast.Pass()]
    return ast.fix_missing_locations(ast.Module(body=imports + [function], type_ignores=[]))


def _mock_stdin(data, namespace):
    """The reference's mocked stdin: readline()/input() give lines without their newline (and
    StopIteration past the last), readlines() the input split on newlines, read() all of it,
    buffer.read() its UTF-8 bytes, and open() of any file the input. The prelude's own names
    ``stdin`` and ``open`` are rebound too."""
    lines = iter(data.split("\n"))
    fake = io.StringIO(data)
    fake.readline = lambda *args, **kwargs: next(lines)
    fake.readlines = lambda *args, **kwargs: data.split("\n")
    fake.read = lambda *args, **kwargs: data
    fake.buffer = io.BytesIO(data.encode())
    sys.stdin = namespace["stdin"] = fake
    builtins.open = namespace["open"] = lambda *args, **kwargs: io.StringIO(data)


def _namespace(name):
    namespace = {"__name__": name, "__builtins__": builtins}
    exec(PRELUDE, namespace)
    return namespace


def run_stdin(reference):
    with open("solution.py", encoding="utf-8", errors="replace") as file:
        source = file.read()
    try:
        if reference:
            data = sys.stdin.read()
            namespace = _namespace("solution")
            code = compile(wrap(source), "solution.py", "exec")
            _mock_stdin(data, namespace)
            exec(code, namespace)
            if WRAPPER in namespace:
                namespace[WRAPPER]()
        else:
            namespace = _namespace("__main__")
            exec(compile(source, "solution.py", "exec"), namespace)
    except SystemExit:
        pass
    except BaseException:
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)
    try:
        sys.stdout.flush()
    except BaseException:
        pass
    if reference:
        os._exit(0)  # as in the reference, nothing the program registered (atexit) runs after it
    sys.exit(0)


def run_call(fn_name, timeout):
    nonce = sys.stdin.readline().strip()
    raw = sys.stdin.read()
    channel = os.dup(1)
    os.dup2(2, 1)  # the program's own prints (Python's and the C level's) go to stderr
    sys.stdin = io.StringIO("")

    def frame(kind, payload=""):
        view = memoryview(f"{nonce} {kind} {payload}\n".encode("utf-8", errors="replace"))
        while view:
            view = view[os.write(channel, view) :]

    def fail(exc):
        traceback.print_exc()
        frame("error", f"{type(exc).__name__}: {exc}".replace("\n", " ")[:500])
        os._exit(0)

    with open("solution.py", encoding="utf-8", errors="replace") as file:
        source = file.read()
    try:
        namespace = _namespace("solution")
        _alarm(timeout)
        exec(compile(source, "solution.py", "exec"), namespace)
        if "class Solution" in source:
            function = getattr(namespace["Solution"](), fn_name)
        else:
            function = namespace[fn_name]
        _clear_alarm()
        arguments = [json.loads(line) for line in raw.split("\n")]
    except BaseException as exc:
        _clear_alarm()
        fail(exc)
    frame("loaded")
    try:
        _alarm(timeout)
        result = function(*arguments)
        _clear_alarm()
    except TimeLimit:
        frame("timeout")
        os._exit(0)
    except BaseException as exc:
        _clear_alarm()
        fail(exc)
    if isinstance(result, tuple):
        result = list(result)
    try:
        encoded = json.dumps(result)
    except BaseException:
        frame("unserializable", type(result).__name__)
        os._exit(0)
    frame("result", encoded)
    os._exit(0)


def main():
    _more_stack()
    if sys.argv[1] == "stdin":
        run_stdin(sys.argv[2] == "1")
    else:
        run_call(sys.argv[2], float(sys.argv[3]))


if __name__ == "__main__":
    main()
