"""The long-lived worker inside one sandbox (see :class:`gym_core.sandbox.SandboxPool`).

Not imported by gym: its text runs as ``python -I -B -c`` inside the bubblewrap sandbox, standard
library only. Its standard input and output are the channel to the host; it never hands them on.

Per job (read from the channel: a JSON header line, then the files' and stdin's bytes):

1. the scratch directory ``/tmp`` and ``/dev/shm`` are emptied, and checked empty of processes
   and System V objects (done after every job; anything it cannot clean ends the worker, which
   the host replaces);
2. the job's files are written to ``/tmp``;
3. one process is forked for the job: its own session, pipes as its standard streams, every other
   descriptor closed (the channel included) before its hard rlimits are set, then ``exec``;
4. the worker watches it (wall time, output limit), and when it ends kills every other process of
   the sandbox (the worker is the subreaper of all of them), then answers one JSON line and the
   output's bytes.

A *preloaded* worker (started with a module's source and a function name as its arguments, under
``python -I -S -B``) executes that module once; a job sent with ``call`` (its arguments) instead of
``argv`` is then forked without ``exec``: the child, after the same steps 3 (session, streams,
descriptors, rlimits), calls ``function(args)`` and exits with its status. The worker's memory is
the child's: every byte of a job's files, stdin and output is read into a buffer that is zeroed once
used (files before the fork; the stdin is read only after it), so no fork holds another job's data.
Only the header (argv or call arguments, limits, file names) passes through ordinary objects.

The worker is non-dumpable (its ``/proc/<pid>/mem``, ``fd`` and ``environ`` are closed to the
jobs, which have no capabilities). A job can kill or stop the worker (same user): the host then
sees the channel end or go quiet, answers that job as killed or timed out, and starts a new worker.
"""

import json
import mmap
import os
import resource
import select
import signal
import stat
import sys
import time

SCRATCH = "/tmp"
SHM = "/dev/shm"
PR_SET_DUMPABLE = 4
PR_SET_CHILD_SUBREAPER = 36


def _prctl(option, value):
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(option, value, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl")


def _read_exact(size):
    """``size`` bytes of the channel, read straight into a buffer (no other copy): wipe it once used."""
    buffer = bytearray(size)
    view = memoryview(buffer)
    while view:
        count = os.readv(0, [view])
        if not count:
            raise EOFError
        view = view[count:]
    return buffer


def _wipe(buffer):
    """Zero a buffer in place: freed memory keeps its bytes, and a preloaded worker's jobs are forks of it."""
    if len(buffer):
        import ctypes

        ctypes.memset((ctypes.c_char * len(buffer)).from_buffer(buffer), 0, len(buffer))


def _read_line():
    data = bytearray()
    while not data.endswith(b"\n"):
        chunk = os.read(0, 1)
        if not chunk:
            raise EOFError
        data += chunk
    return bytes(data)


def _write(data):
    view = memoryview(data)
    while view:
        view = view[os.write(1, view) :]


def _others():
    me = os.getpid()
    return [int(n) for n in os.listdir("/proc") if n.isdigit() and int(n) not in (1, me)]


def _reap():
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def kill_all():
    """Kill every process of the sandbox but the worker and bwrap's init; True once none is left."""
    for _ in range(2000):
        pids = _others()
        if not pids:
            return True
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        _reap()
        time.sleep(0.0005)
    return False


def _remove(path):
    st = os.lstat(path)
    if stat.S_ISDIR(st.st_mode):
        os.chmod(path, 0o700)
        for name in os.listdir(path):
            _remove(os.path.join(path, name))
        os.rmdir(path)
    else:
        os.unlink(path)


def clean():
    """Empty the writable mounts; True if nothing of the job is left (processes, files, IPC)."""
    if not kill_all():
        return False
    for root, mode in ((SCRATCH, 0o700), (SHM, 0o1777)):
        os.chmod(root, mode)
        for name in os.listdir(root):
            _remove(os.path.join(root, name))
        if os.listdir(root):
            return False
    for kind in ("sem", "shm", "msg"):
        try:
            with open(f"/proc/sysvipc/{kind}") as table:
                if len(table.read().splitlines()) > 1:
                    return False
        except OSError:
            pass
    return True


def _child(argv, limits, stdin_r, out_w, err_w, call=None):
    try:
        # The signal state of a fresh process: Python's ignored signals (SIGPIPE, SIGXFSZ) would stay
        # ignored across exec, and a blocked mask would stay blocked. (A call stays in Python, which
        # ignores those two as every interpreter does at start.)
        if call is None:
            for number in (signal.SIGPIPE, signal.SIGXFSZ):
                signal.signal(number, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_SETMASK, [])
        os.setsid()
        os.dup2(stdin_r, 0)
        os.dup2(out_w, 1)
        os.dup2(err_w, 2)
        os.closerange(3, 1 << 16)  # the channel is 0 and 1 of the worker: replaced above; the rest closed
        cpu = limits["cpu"]
        for resource_id, value in (
            (resource.RLIMIT_CPU, (cpu, cpu + 1)),
            (resource.RLIMIT_AS, (limits["as"],) * 2),
            (resource.RLIMIT_NOFILE, (limits["nofile"],) * 2),
            (resource.RLIMIT_FSIZE, (limits["fsize"],) * 2),
            (resource.RLIMIT_CORE, (0, 0)),
            (resource.RLIMIT_MSGQUEUE, (0, 0)),
            (resource.RLIMIT_NPROC, (limits["nproc"],) * 2),
        ):
            resource.setrlimit(resource_id, value)
        os.chdir(SCRATCH)
        if call is not None:
            _call(call)
        os.execvpe(argv[0], argv, dict(os.environ))
    except BaseException as exc:
        try:
            os.write(2, f"gym sandbox worker: could not start {argv[0] if argv else 'the call'}: {exc}\n".encode())
        finally:
            os._exit(127)


def _call(args):
    """In a preloaded job's child: the preloaded function on ``args``, as a fresh interpreter running it would."""
    sys.stdin = sys.__stdin__ = open(0, encoding="utf-8", closefd=False)
    sys.stdout = sys.__stdout__ = open(1, "w", encoding="utf-8", closefd=False)
    sys.stderr = sys.__stderr__ = open(2, "w", encoding="utf-8", errors="backslashreplace", closefd=False)
    sys.argv = ["-c", *args]
    code = 0
    function = PRELOADED
    assert function is not None  # run_job refuses a call otherwise
    try:
        function(args)
    except SystemExit as exc:
        if exc.code is None:
            code = 0
        elif isinstance(exc.code, int):
            code = exc.code & 0xFF
        else:
            print(exc.code, file=sys.stderr)
            code = 1
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:
            pass
    os._exit(code)


PRELOADED = None  # a preloaded worker's function


def run_job(header, files):
    """The job: its answer, and its stdout and stderr in buffers the caller wipes once sent."""
    for name, content in files:
        path = os.path.join(SCRATCH, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        try:
            view = memoryview(content)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
        _wipe(content)
    limits = header["limits"]
    call = header.get("call")
    if call is not None and PRELOADED is None:
        raise ValueError("a call sent to a worker that preloaded nothing")
    stdin_r, stdin_w = os.pipe()
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    started = time.monotonic()
    pid = os.fork()
    if pid == 0:
        _child(header.get("argv"), limits, stdin_r, out_w, err_w, call)
    for fd in (stdin_r, out_w, err_w):
        os.close(fd)
    stdin = _read_exact(header["stdin"])  # only now, with the job forked: no fork ever holds it
    pidfd = os.pidfd_open(pid)
    deadline = started + header["wall_time_s"]
    room = header["output_bytes"]
    # Each stream read straight into a buffer of the limit's size (+1 byte: past it, the job is stopped).
    # (Anonymous maps, not bytearrays: a bytearray is zeroed on creation, every page of the limit
    # touched per job; a map's pages cost nothing until the job's output fills them.)
    kept = {out_r: mmap.mmap(-1, room + 1), err_r: mmap.mmap(-1, room + 1)}
    received = {out_r: 0, err_r: 0}
    open_readers = [out_r, err_r]
    pending = memoryview(stdin)
    os.set_blocking(stdin_w, False)
    writers = [stdin_w] if pending else []
    if not pending:
        os.close(stdin_w)
    status = None
    outcome = None
    drain_until = None
    while open_readers:
        now = time.monotonic()
        limit = deadline if drain_until is None else drain_until
        if now >= limit:
            if status is None:
                outcome = "timeout"
            break
        readable, writable, _ = select.select(
            open_readers + ([pidfd] if status is None else []), writers, [], limit - now
        )
        if writable:
            try:
                pending = pending[os.write(stdin_w, pending[: 1 << 16]) :]
            except OSError:  # the job closed its stdin
                pending = pending[:0]
            if not pending:
                writers = []
                os.close(stdin_w)
        for fd in readable:
            if fd == pidfd:
                _, status = os.waitpid(pid, 0)
                kill_all()  # what the job left behind ends with it, as a one-off run's namespace does
                drain_until = time.monotonic() + 1.0
                continue
            count = os.readv(fd, [memoryview(kept[fd])[received[fd] :]])
            if not count:
                open_readers.remove(fd)
                continue
            received[fd] += count
            if received[fd] > room:
                outcome = "output_limit"
                break
        if outcome:
            break
    if writers:
        os.close(stdin_w)
    pending.release()
    _wipe(stdin)
    if status is None and outcome is None:  # its output ended first: wait for the job itself
        if select.select([pidfd], [], [], max(0.0, deadline - time.monotonic()))[0]:
            _, status = os.waitpid(pid, 0)
        else:
            outcome = "timeout"
    kill_all()  # reaps the job too when it was stopped by a limit: its status does not matter then
    os.close(pidfd)
    for fd in (out_r, err_r):
        os.close(fd)
    code = sig = None
    if status is not None:
        if os.WIFSIGNALED(status):
            sig = os.WTERMSIG(status)
        else:
            code = os.WEXITSTATUS(status)
    if outcome is None:
        if sig == signal.SIGXCPU:
            outcome = "cpu_limit"
        elif sig is not None:
            outcome = "signaled"
        else:
            outcome = "exited"
    if outcome in ("timeout", "output_limit"):
        code = None
    return (
        {
            "outcome": outcome,
            "exit_code": code,
            "signal": sig,
            "wall_time_s": time.monotonic() - started,
        },
        (kept[out_r], min(received[out_r], room)),
        (kept[err_r], min(received[err_r], room)),
    )


def _preload(source, function):
    """Execute a preloaded module once (standard library only) and keep its function for the calls."""
    global PRELOADED
    namespace = {"__name__": "gym_preloaded", "__builtins__": __builtins__}
    exec(compile(source, "preloaded.py", "exec"), namespace)
    PRELOADED = namespace[function]


def main():
    _prctl(PR_SET_DUMPABLE, 0)
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    if len(sys.argv) == 3:  # python -c WORKER SOURCE FUNCTION: a preloaded worker
        _preload(sys.argv[1], sys.argv[2])
        import gc

        gc.freeze()  # never collected, so never written: the forks share these pages
    if not clean():
        sys.exit(3)
    _write(b"ready\n")
    while True:
        try:
            header = json.loads(_read_line())
            files = [(name, _read_exact(size)) for name, size in header["files"]]
        except EOFError:
            return
        try:
            result, (out, out_size), (err, err_size) = run_job(header, files)
        except EOFError:
            return
        except Exception as exc:  # the worker's own failure (its files did not fit...): not the job's
            _write(json.dumps({"error": f"{type(exc).__name__}: {exc}"}).encode() + b"\n")
            sys.exit(3)
        ok = clean()
        result.update(stdout=out_size, stderr=err_size, clean=ok)
        _write(json.dumps(result).encode() + b"\n")
        _write(memoryview(out)[:out_size])
        _write(memoryview(err)[:err_size])
        for buffer, size in ((out, out_size), (err, err_size)):
            _wipe(memoryview(buffer)[: size + 1])  # what the job wrote (the byte past the limit included)
            buffer.close()  # unmapped: no later fork holds its pages
        if not ok:
            sys.exit(3)


main()
