"""An exclusive lock on a file, across threads and processes: one builder per venv at a time."""

from __future__ import annotations

import fcntl
import os
import threading
from collections.abc import Callable
from pathlib import Path

__all__ = ["FileLock"]

_THREAD_LOCKS: dict[str, threading.Lock] = {}
_THREAD_LOCKS_GUARD = threading.Lock()


def _thread_lock(path: Path) -> threading.Lock:
    with _THREAD_LOCKS_GUARD:
        return _THREAD_LOCKS.setdefault(str(path), threading.Lock())


class FileLock:
    """An exclusive ``flock`` on ``path`` (released by the kernel if the holder dies), plus a thread lock
    so that threads of one process queue up without relying on flock semantics. ``on_wait`` is called
    once when the lock is held by someone else and this one has to wait."""

    def __init__(self, path: Path, on_wait: Callable[[], None] | None = None):
        self.path = path
        self.on_wait = on_wait
        self._fd: int | None = None
        self._thread_lock = _thread_lock(path)

    def __enter__(self) -> FileLock:
        waited = False
        if not self._thread_lock.acquire(blocking=False):
            if self.on_wait:
                self.on_wait()
                waited = True
            self._thread_lock.acquire()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if self.on_wait and not waited:
                    self.on_wait()
                fcntl.flock(fd, fcntl.LOCK_EX)
            self._fd = fd
        except BaseException:
            self._thread_lock.release()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        fd, self._fd = self._fd, None
        try:
            if fd is not None:
                fcntl.flock(fd, fcntl.LOCK_UN)
                os.close(fd)
        finally:
            self._thread_lock.release()
