"""The driver that runs ALL the unit tests of one answer inside ONE start of gym's sandbox.

This file is not imported by the server: its text is preloaded by the server's sandbox pool workers
(``SandboxPool(preload=(text, "main"))``, standard library only, ``python -I -S``), each verification
calling :func:`main` in a fork of one; on Ray it runs as ``main.py`` with the same arguments. Next to
it in the scratch directory: the model's code (``solution.py``) and the comparisons (``compare.py``,
:mod:`gym_code_gen.compare`).

``main([<stdin|call>, <fn_name|->, <timeout_s>, <reference 0|1>, <isolated 0|1>, <output_limit>, <debug 0|1>])``;
standard input: one JSON object ``{"nonce", "inputs", "expected"}``.

Three kinds of process, so that the program never reaches what decides its reward:

- the **driver** (this process) makes itself non-dumpable (its ``/proc/<pid>/mem``, ``fd`` and
  ``environ`` are then closed to every other process of the sandbox, which has no capabilities) and
  the reaper of every orphan, forks the zygote, and only THEN reads its standard input: the nonce,
  every test's input and expected output live in its memory alone. For each test in order it hands
  the zygote the input (an unnamed file), watches the test's run (wall time, output limit), stops every
  process the test left behind, compares the output itself (``compare.py``, loaded before any program
  ran) and writes one verdict line ``<nonce> <index> <json>`` on its standard output, the channel to
  the server; it stops at the first failure, and ends with ``<nonce> done``;
- the **zygote**, forked before the driver read anything: the prelude's modules imported, no
  secrets, no standard input or output; it forks one **test process** per test and reports how it
  ended;
- a **test process** gets the test's input as its standard input, pipes to the driver as its
  standard output and error (and descriptor 3, where a function call's result is reported), its
  own session, its own CPU limit, and nothing else; then runs the program as the reference does.

The program can kill or stop the driver (same user): its test then has no verdict, which the
server counts as a failure (-4), never a pass. It cannot forge a verdict: the channel is not among
its descriptors, and the nonce that marks verdicts was never in any memory it can read.
"""

import _socket
import array
import builtins
import io
import json
import math
import os
import resource
import select
import signal
import sys
import time

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
        soft, hard = resource.getrlimit(resource.RLIMIT_STACK)
        target = 4 << 30 if hard == resource.RLIM_INFINITY else min(hard, 4 << 30)
        if soft != resource.RLIM_INFINITY and soft < target:
            resource.setrlimit(resource.RLIMIT_STACK, (target, hard))
    except (ValueError, OSError):
        pass


def _is_main_guard(node):
    import ast

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
    import ast  # (the zygote's, before any program ran: only standard-input programs need it)

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


_TEMPLATE = None  # in the zygote: the names the prelude binds, copied for each test


def _namespace(name):
    if _TEMPLATE is not None:
        return {**_TEMPLATE, "__name__": name}
    namespace = {"__name__": name, "__builtins__": builtins}
    exec(PRELUDE, namespace)
    return namespace


# --- the test process: one run of the program ------------------------------------------------------

REPORT_FD = 3  # where a test process reports (a function call's result, an exception's type)
LAST_FD = 1 << 16


def _report(kind, payload=""):
    """A line to the driver on descriptor 3. The program can write there too: all it can say is
    what its own function could return, or its own error."""
    try:
        view = memoryview(f"{kind} {payload}\n".encode("utf-8", errors="replace"))
        while view:
            view = view[os.write(REPORT_FD, view) :]
    except OSError:
        pass


def _error(exc):
    return f"{type(exc).__name__}: {exc}".replace("\n", " ")[:500]


_COMPILED = None  # in the zygote: the program compiled once (its code, or what compiling it raised)


def _compile(source, wrapped):
    if isinstance(_COMPILED, BaseException):
        raise _COMPILED
    if _COMPILED is not None:
        return _COMPILED
    return compile(wrap(source) if wrapped else source, "solution.py", "exec")


def _print_exception():
    # Only with debug is the program's stderr read (the zygote imported traceback then): importing it
    # here would read files, which a test's mocked open() answers.
    traceback = sys.modules.get("traceback")
    if traceback is not None:
        traceback.print_exc()


def run_stdin(source, reference):
    try:
        if reference:
            data = sys.stdin.read()
            namespace = _namespace("solution")
            code = _compile(source, wrapped=True)
            _mock_stdin(data, namespace)
            exec(code, namespace)
            if WRAPPER in namespace:
                namespace[WRAPPER]()
        else:
            namespace = _namespace("__main__")
            exec(_compile(source, wrapped=False), namespace)
    except SystemExit:
        pass
    except BaseException as exc:
        _print_exception()
        _report("error", _error(exc))
        _flush()
        os._exit(1)
    if not reference:
        import atexit

        try:
            atexit._run_exitfuncs()  # a plain script's exit; the reference's (os._exit) runs none
        except BaseException:
            pass
    _flush()
    os._exit(0)


def run_call(source, fn_name, timeout):
    raw = sys.stdin.read()
    sys.stdin = io.StringIO("")
    os.dup2(2, 1)  # the program's own prints (Python's and the C level's) go to stderr
    sys.stdout = sys.stderr

    def fail(exc):
        _print_exception()
        _report("error", _error(exc))
        _flush()
        os._exit(0)

    try:
        namespace = _namespace("solution")
        _alarm(timeout)
        exec(_compile(source, wrapped=False), namespace)
        if "class Solution" in source:
            function = getattr(namespace["Solution"](), fn_name)
        else:
            function = namespace[fn_name]
        _clear_alarm()
        arguments = [json.loads(line) for line in raw.split("\n")]
    except BaseException as exc:
        _clear_alarm()
        fail(exc)
    _report("loaded")
    try:
        _alarm(timeout)
        result = function(*arguments)
        _clear_alarm()
    except TimeLimit:
        _report("timeout")
        os._exit(0)
    except BaseException as exc:
        _clear_alarm()
        fail(exc)
    if isinstance(result, tuple):
        result = list(result)
    try:
        encoded = json.dumps(result)
    except BaseException:
        _report("unserializable", type(result).__name__)
        os._exit(0)
    _report("result", encoded)
    _flush()
    os._exit(0)


def _flush():
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:
            pass


def _test_process(source, config, stdin_fd, out_w, err_w, report_w):
    """In a fresh fork of the zygote: the test's descriptors and limits, then the program."""
    os.setsid()  # a session (and process group) of its own, which the driver stops as a whole
    os.dup2(stdin_fd, 0)
    os.lseek(0, 0, os.SEEK_SET)
    os.dup2(out_w, 1)
    os.dup2(err_w, 2)
    os.dup2(report_w, REPORT_FD)
    os.closerange(REPORT_FD + 1, LAST_FD)  # the zygote's channel to the driver included
    cpu = max(1, math.ceil(config["wall"]))
    _soft, hard = resource.getrlimit(resource.RLIMIT_CPU)
    hard = cpu + 1 if hard == resource.RLIM_INFINITY else min(hard, cpu + 1)
    resource.setrlimit(resource.RLIMIT_CPU, (min(cpu, hard), hard))
    sys.stdin = sys.__stdin__ = open(0, encoding="utf-8", closefd=False)
    sys.stdout = sys.__stdout__ = open(1, "w", encoding="utf-8", closefd=False)
    sys.stderr = sys.__stderr__ = open(2, "w", encoding="utf-8", errors="backslashreplace", buffering=1, closefd=False)
    import random

    random.seed()  # as a fresh interpreter would: the zygote's state is not shared by every test
    if config["mode"] == "stdin":
        run_stdin(source, config["reference"])
    else:
        run_call(source, config["fn_name"], config["timeout"])


# (The _socket module, not socket: the latter's imports cost a verification more than its helpers save.)


def _send_fds(channel, message, fds):
    channel.sendmsg([message], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, array.array("i", fds))])


def _receive_fds(channel, size, most):
    """A message and the descriptors that came with it."""
    message, ancillary, _flags, _address = channel.recvmsg(size, _socket.CMSG_LEN(most * 4))
    fds = array.array("i")
    for level, kind, data in ancillary:
        if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - len(data) % fds.itemsize])
    return message, list(fds)


# --- the zygote: forks test processes, holds no secret -----------------------------------------------


def _zygote(channel, source, config):
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):  # nothing of the driver's standard streams: not its input, not the server's channel
        os.dup2(devnull, fd)
    os.close(devnull)
    global _TEMPLATE, _COMPILED
    if config["debug"]:
        import traceback  # noqa: F401  (see _print_exception)

    _more_stack()  # inherited by every test process
    _TEMPLATE = _namespace("solution")  # the prelude run once: its modules imported, its names bound
    try:  # the program compiled once (a syntax error is raised in each test, as compiling it there would)
        _COMPILED = compile(
            wrap(source) if config["mode"] == "stdin" and config["reference"] else source, "solution.py", "exec"
        )
    except BaseException as exc:
        _COMPILED = exc
    import gc

    gc.freeze()  # what exists now is never collected: a test's collections do not touch (copy) its pages
    while True:
        try:
            message, fds = _receive_fds(channel, 64, 1)
        except OSError:
            os._exit(0)
        if not message or len(fds) != 1:
            os._exit(0)
        pipes = [os.pipe() for _ in range(3)]
        try:
            pid = os.fork()
        except OSError as exc:
            for fd in [fds[0], *(end for pipe in pipes for end in pipe)]:
                os.close(fd)
            channel.send(f"failed {exc}".encode()[:200])
            continue
        if pid == 0:
            try:
                _test_process(source, config, fds[0], pipes[0][1], pipes[1][1], pipes[2][1])
            finally:
                os._exit(1)
        os.close(fds[0])
        for _read_end, write_end in pipes:
            os.close(write_end)
        try:
            _send_fds(channel, f"started {pid}".encode(), [read_end for read_end, _ in pipes])
        finally:
            for read_end, _ in pipes:
                os.close(read_end)
        _pid, status = os.waitpid(pid, 0)
        try:
            channel.send(f"ended {status}".encode())
        except OSError:
            os._exit(0)


# --- the driver --------------------------------------------------------------------------------------

STARTUP_ALLOWANCE_S = 1.0  # on top of a test's limit (a fresh interpreter's start-up, as before)
REPLY_S = 5.0  # the most the zygote may take to answer once its test process is gone
KEPT_DEBUG = 64 * 1024
PR_SET_DUMPABLE = 4
PR_SET_CHILD_SUBREAPER = 36


RUN_FILES = ("main.py", "solution.py", "compare.py")


def _remove(path):
    if os.path.isdir(path) and not os.path.islink(path):
        os.chmod(path, 0o700)  # a directory the program closed to itself
        for name in os.listdir(path):
            _remove(os.path.join(path, name))
        os.rmdir(path)
    else:
        os.unlink(path)


def _own_pid_namespace():
    """Whether this driver runs in a sandbox's PID namespace of its own: started by its init (a
    one-off run), or by a sandbox pool's worker (pid 2, under an init whose /proc entry the
    sandbox covers with an empty directory)."""
    if os.getppid() == 1 and os.getpid() <= 3:
        return True
    try:
        return os.getppid() == 2 and not os.listdir("/proc/1")
    except OSError:
        return False


class DriverStopped(Exception):
    """The zygote is gone or stuck, or a test's processes could not be stopped: the program did it."""


def _prctl(option, value):
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(option, value, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), f"prctl({option}, {value}) failed")


def _truncate(text, limit=300):
    return text if len(text) <= limit else text[:limit] + f"...(truncated {len(text) - limit} chars)"


class Driver:
    def __init__(self, argv):
        mode, fn_name, timeout, reference, isolated, output_limit, debug = argv
        self.call = mode == "call"
        self.timeout = float(timeout)
        self.isolated = isolated == "1"
        self.output_limit = int(output_limit)
        self.debug = debug == "1"
        wall = (2 * self.timeout if self.call else self.timeout) + STARTUP_ALLOWANCE_S
        self.config = {
            "mode": mode,
            "fn_name": fn_name,
            "timeout": self.timeout,
            "reference": reference == "1",
            "wall": wall,
            "debug": self.debug,
        }
        self.zygote = 0  # and self.channel, the socket to it, once forked
        self.compare = {}

    def main(self):
        # A signal from the program ends the driver (its test then has no verdict: a failure), never
        # an exception it could catch its way around.
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        _prctl(PR_SET_DUMPABLE, 0)  # /proc/<driver>/{mem,fd,environ}: closed to the program
        _prctl(PR_SET_CHILD_SUBREAPER, 1)  # every orphan of a test comes here, to be reaped
        if self.isolated and not _own_pid_namespace():
            raise SystemExit("isolated mode outside a PID namespace of its own: refusing to stop 'every other process'")
        with open("compare.py", encoding="utf-8") as file:
            exec(compile(file.read(), "compare.py", "exec"), self.compare)
        with open("solution.py", encoding="utf-8", errors="replace") as file:
            source = file.read()
        ours, theirs = _socket.socketpair(_socket.AF_UNIX, _socket.SOCK_SEQPACKET)
        self.zygote = os.fork()
        if self.zygote == 0:
            ours.close()
            try:
                _zygote(theirs, source, self.config)
            finally:
                os._exit(0)
        theirs.close()
        self.channel = ours
        # Only now, with the zygote forked: the nonce, the inputs and the expected outputs.
        chunks = []
        while chunk := os.read(0, 1 << 20):
            chunks.append(chunk)
        task = json.loads(b"".join(chunks))
        nonce, inputs, expected = task["nonce"], task["inputs"], task["expected"]
        if self.call:
            expected = [json.loads(text) for text in expected]
        for index, test_input in enumerate(inputs):
            try:
                verdict = self.run_test(test_input, expected[index])
            except (DriverStopped, OSError) as exc:
                verdict = {"code": -4, "error": f"the test driver was stopped: {exc}"}
            self.write(f"{nonce} {index} {json.dumps(verdict)}\n")
            if verdict["code"] is not True:
                break
        self.write(f"{nonce} done\n")
        self.channel.close()  # the zygote's cue to end
        give_up = time.monotonic() + 1.0
        while time.monotonic() < give_up:
            try:
                if os.waitpid(self.zygote, os.WNOHANG)[0]:
                    break
            except ChildProcessError:
                break
            time.sleep(0.001)
        os._exit(0)

    def write(self, text):
        view = memoryview(text.encode())
        while view:
            view = view[os.write(1, view) :]

    # --- one test

    def run_test(self, test_input, expected):
        data = os.open(".", os.O_TMPFILE | os.O_RDWR | os.O_CLOEXEC, 0o600)  # a file without a name, in the scratch
        try:
            view = memoryview(test_input.encode("utf-8", errors="surrogateescape"))
            while view:
                view = view[os.write(data, view) :]
            _send_fds(self.channel, b"run", [data])
        finally:
            os.close(data)
        started = time.monotonic()
        deadline = started + self.config["wall"]
        message, fds = self.receive(deadline + REPLY_S)
        if message.startswith("failed"):
            return {"code": -4, "error": "the program could not start: " + message[7:]}
        pid = int(message.split()[1])
        streams = dict(zip(fds, (bytearray(), bytearray(), bytearray())))
        out, err, report = (streams[fd] for fd in fds)
        poller = select.poll()
        for fd in [*fds, self.channel.fileno()]:
            poller.register(fd, select.POLLIN)
        status = None
        stopped = None
        limit_at = deadline
        try:
            while status is None:
                now = time.monotonic()
                if now >= limit_at:
                    if stopped is not None:
                        raise DriverStopped("its zygote did not answer after the test was stopped")
                    stopped = "timeout"
                    self.stop(pid)
                    limit_at = now + REPLY_S
                for fd, _event in poller.poll(max(1, math.ceil((limit_at - now) * 1000))):
                    if fd == self.channel.fileno():
                        status = self.ended()
                        continue
                    chunk = os.read(fd, 1 << 16)
                    if not chunk:
                        poller.unregister(fd)
                        continue
                    kept = streams[fd]
                    kept += chunk[: self.output_limit + 1 - len(kept)]
                    if len(kept) > self.output_limit and stopped is None:
                        stopped = "output_limit"
                        self.stop(pid)
                        limit_at = time.monotonic() + REPLY_S
            self.stop(pid)  # what the test left behind: its processes, then its files
            self.clean_scratch()
            for fd in fds:
                os.set_blocking(fd, False)
                try:
                    while (chunk := os.read(fd, 1 << 16)) and len(streams[fd]) <= self.output_limit:
                        streams[fd] += chunk
                except BlockingIOError:
                    pass
        finally:
            for fd in fds:
                os.close(fd)
        return self.judge(status, stopped, bytes(out), bytes(err), bytes(report), expected)

    def receive(self, until):
        if not select.select([self.channel], [], [], max(0.0, until - time.monotonic()))[0]:
            raise DriverStopped("its zygote did not answer")
        message, fds = _receive_fds(self.channel, 256, 3)
        if not message:
            raise DriverStopped("its zygote is gone")
        text = message.decode()
        if text.startswith("started") and len(fds) != 3:
            raise DriverStopped("its zygote answered without the test's pipes")
        return text, fds

    def ended(self):
        message = self.channel.recv(256)
        if not message.startswith(b"ended "):
            raise DriverStopped("its zygote is gone" if not message else "its zygote answered out of turn")
        return int(message.split()[1])

    def stop(self, pid):
        """Kill the test's process group, and (isolated, in the sandbox's PID namespace) every process
        but the namespace's init, this driver's parent (a sandbox pool's worker), this driver and the
        zygote, until none is left; reap the orphans."""
        for kill in (os.killpg, os.kill):
            try:
                kill(pid, signal.SIGKILL)
            except OSError:
                pass
        keep = {1, os.getpid(), os.getppid(), self.zygote}  # the parent: a sandbox pool's worker (or init)
        give_up = time.monotonic() + 2.0
        while True:
            self.reap()
            if not self.isolated:
                return
            others = [int(name) for name in os.listdir("/proc") if name.isdigit() and int(name) not in keep]
            if not others:
                return
            for other in others:
                try:
                    os.kill(other, signal.SIGKILL)
                except OSError:
                    pass
            if time.monotonic() > give_up:
                raise DriverStopped("the test's processes could not be stopped")
            time.sleep(0.0005)

    def clean_scratch(self):
        """Remove what a test wrote: in the scratch directory everything but the run's own files, and
        (in the sandbox) everything in /dev/shm. Each test starts with the files the first one had."""
        places = [(".", RUN_FILES)] + ([("/dev/shm", ())] if self.isolated else [])
        for place, keep in places:
            try:
                names = [name for name in os.listdir(place) if name not in keep]
            except OSError:
                continue
            for name in names:
                try:
                    _remove(os.path.join(place, name))
                except (OSError, RecursionError):
                    pass

    def reap(self):
        while True:
            try:
                pid, _status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid == self.zygote:
                raise DriverStopped("its zygote was killed")

    # --- the verdict

    def judge(self, status, stopped, out, err, report, expected):
        signalled = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
        if stopped is None and signalled == signal.SIGXCPU:
            stopped = "cpu_limit"
        lines = [line.partition(" ") for line in report.decode("utf-8", errors="replace").split("\n") if line]
        loaded = any(kind == "loaded" for kind, _, _ in lines)
        finals = [
            (kind, payload) for kind, _, payload in lines if kind in ("result", "unserializable", "timeout", "error")
        ]
        detail = {}
        if self.debug:
            text = err.decode("utf-8", errors="replace")
            if text.strip():
                detail["traceback"] = text[-KEPT_DEBUG:]
        errors = [payload for kind, payload in finals if kind == "error"]
        if errors:
            detail["error"] = errors[-1] if self.debug else errors[-1].partition(":")[0]
        if stopped is not None:
            # A call stopped while loading the module: the reference's module-level timeout, an error.
            code = -3 if loaded or not self.call else -4
            return {"code": code, "stopped_by": stopped, **detail}
        exit_code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else None
        if not self.call:
            if signalled is not None or exit_code != 0:
                return {"code": -4, "exit_code": exit_code, "signal": signalled, **detail}
            output = out.decode("utf-8", errors="replace")
            if self.compare["stdout_matches"](output, expected):
                return {"code": True}
            return {"code": -2, **({"output": _truncate(output)} if self.debug else {}), **detail}
        if signalled is not None or exit_code != 0 or not finals:
            detail.setdefault("error", "the program ended without a result")
            return {"code": -4, "exit_code": exit_code, "signal": signalled, **detail}
        if len(finals) > 1:
            return {"code": -2, "error": "more than one result reported (malformed)"}
        kind, payload = finals[0]
        if kind == "timeout":
            return {"code": -3, **detail}
        if kind == "error":
            return {"code": -4, **detail}
        if kind == "unserializable":
            return {"code": -2, **({"output": f"a {payload} (not JSON)"} if self.debug else {})}
        try:
            prediction = json.loads(payload)
        except ValueError:
            return {"code": -2, "error": "the result is not JSON (malformed)"}
        if self.compare["call_result_matches"](prediction, expected):
            return {"code": True}
        return {"code": -2, **({"output": _truncate(payload)} if self.debug else {})}


def main(argv):
    """One verification: what ``main.py ARGV`` does; the function a sandbox pool preloads."""
    Driver(argv).main()


if __name__ == "gym_preloaded":
    # Preloaded once by each sandbox pool worker (gym_core.sandbox.SandboxPool(preload=...)), whose
    # forks run main(): what every verification would import (the prelude's modules, the comparisons'
    # decimal, ast for standard-input programs) is then imported once per worker, not per verification.
    for _name in [*MODULES, "ast", "decimal"]:
        __import__(_name)

if __name__ == "__main__":
    main(sys.argv[1:])
