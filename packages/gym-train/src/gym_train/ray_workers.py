"""Model workers hosted in Ray actors: the transport of ``Master(backend="ray")``.

Each worker is a :class:`WorkerActor` that runs the protocol's own worker loop (the one a spawned
process runs) in a thread, behind a pipe-like :class:`QueueConnection`: ``deliver`` puts the master's
msgpack messages in its inbox, ``collect`` long-polls its outbox. On the master's side a
:class:`RayWorkerHandle` keeps one ``collect`` call in flight and waits on it with ``ray.wait``, so a
reply arrives as soon as it is sent, a deadline is a bound on that wait, and an actor that dies fails
the call in flight (:class:`~gym_train.protocol.WorkerCrashedError` at the master, never a hang).
Requests, acknowledgements, ``flush``, hooks and errors are the protocol's, unchanged.

Ray is imported here, and this module only when a master asks for the Ray backend.
"""

from __future__ import annotations

import os
import queue
import sys
import threading
import time
from collections import deque
from collections.abc import Mapping
from typing import Any

import ray

from gym_train.protocol import EXIT, Request, WorkerGone, WorkerHandle, encoder, worker_main

__all__ = ["QueueConnection", "WorkerActor", "RayWorkerHandle", "start_actor"]

_POLL_S = 5.0  # how long one collect call waits in the actor for a message; the master's deadline is its own


class QueueConnection:
    """The worker loop's end of the link inside an actor: the two calls of a pipe's
    :class:`~multiprocessing.connection.Connection` it uses, over two queues."""

    def __init__(self, inbox: queue.Queue[bytes], outbox: queue.Queue[bytes | None]):
        self.inbox, self.outbox = inbox, outbox

    def recv_bytes(self) -> bytes:
        return self.inbox.get()

    def send_bytes(self, data: bytes) -> None:
        self.outbox.put(data)


class WorkerActor:
    """A Ray actor (made one by :func:`start_actor`) hosting one model worker: the worker loop runs in
    a thread of its own from construction on; the master talks to it through :meth:`deliver` and
    :meth:`collect` (concurrent calls: the actor runs several threads)."""

    def __init__(self, sys_path: list[str], factory: str, index: int, n_workers: int, config: dict[str, Any]):
        # What a spawned worker inherits: the master's sys.path, so that ``factory`` imports here too.
        sys.path.extend(p for p in sys_path if p not in sys.path)
        self._inbox: queue.Queue[bytes] = queue.Queue()
        self._outbox: queue.Queue[bytes | None] = queue.Queue()
        self._ended = False
        connection = QueueConnection(self._inbox, self._outbox)
        self._thread = threading.Thread(
            target=self._serve,
            args=(connection, factory, index, n_workers, config),
            name=f"gym-train-worker-{index}",
            daemon=True,
        )
        self._thread.start()

    def _serve(self, connection: QueueConnection, *args: Any) -> None:
        try:
            worker_main(connection, *args)  # type: ignore[arg-type]  # a Connection in all it uses
        finally:
            self._outbox.put(None)  # the loop ended (an exit request, or a failure): as a process's exit

    def deliver(self, data: bytes) -> None:
        """A message from the master, for the worker loop."""
        self._inbox.put(data)

    def collect(self, wait_s: float) -> list[bytes] | None:
        """The worker's messages so far, waiting up to ``wait_s`` for the first; None once the worker
        loop has ended and everything it sent was collected."""
        if self._ended:
            return None
        batch: list[bytes] = []
        try:
            item = self._outbox.get(timeout=wait_s)
            while True:
                if item is None:
                    self._ended = True
                    return batch or None
                batch.append(item)
                item = self._outbox.get_nowait()
        except queue.Empty:
            return batch

    def pid(self) -> int:
        """The actor's process id."""
        return os.getpid()


class RayWorkerHandle(WorkerHandle):
    """The master's end of a model worker hosted by a :class:`WorkerActor`."""

    def __init__(self, index: int, actor: Any, reply_timeout_s: float):
        super().__init__(index, reply_timeout_s)
        self.actor = actor
        self._collecting: Any = None  # the collect call in flight (an ObjectRef)
        self._received: deque[bytes] = deque()
        self._gone: str | None = None  # why the actor can send nothing more

    def _post(self, data: bytes) -> None:
        if self._gone is not None:
            raise OSError(self._gone)
        # Not awaited: the protocol waits for the acknowledgement, which comes after the delivery, so a
        # request is never sent before the one ahead of it was delivered.
        self.actor.deliver.remote(data)

    def _next_message(self, timeout_s: float) -> bytes | None:
        deadline = time.monotonic() + timeout_s
        while not self._received:
            if self._gone is not None:
                raise WorkerGone
            if self._collecting is None:
                self._collecting = self.actor.collect.remote(_POLL_S)
            left = deadline - time.monotonic()
            if left <= 0 or not ray.wait([self._collecting], timeout=left)[0]:
                return None
            call, self._collecting = self._collecting, None
            try:
                batch = ray.get(call)
            except ray.exceptions.RayError as exc:  # the actor died (killed, its process exited, its node lost)
                self._gone = f"its Ray actor died: {type(exc).__name__}"
                raise WorkerGone from None
            if batch is None:
                self._gone = "its worker loop ended"
                raise WorkerGone
            self._received.extend(batch)
        return self._received.popleft()

    def _running(self) -> bool:
        return self._gone is None

    def _buffered(self) -> bool:
        return bool(self._received)

    def _death(self) -> tuple[int | None, str | None]:
        return None, self._gone

    def stop(self, timeout_s: float = 5.0, polite: bool = True) -> None:
        """Stop the worker: ask it to exit (``polite``; its loop ends within ``timeout_s``), then kill
        the actor and wait (``timeout_s``) for Ray to confirm it is gone."""
        if polite and self._failed is None and self._gone is None:
            self.actor.deliver.remote(encoder.encode(Request(next(self._ids), EXIT)))
            deadline = time.monotonic() + timeout_s
            try:  # read up to the end of its loop: the reply to the exit, then the end
                while self._next_message(max(0.0, deadline - time.monotonic())) is not None:
                    pass
            except WorkerGone:
                pass
        ray.kill(self.actor, no_restart=True)
        deadline = time.monotonic() + timeout_s
        if self._collecting is not None:  # fails once the actor is gone
            ray.wait([self._collecting], timeout=timeout_s)
            self._collecting = None
        # ray.kill only asks: a call made just after it may still be answered. Gone means a call fails.
        while time.monotonic() < deadline:
            try:
                ray.get(self.actor.pid.remote(), timeout=max(0.1, deadline - time.monotonic()))
            except ray.exceptions.RayError:
                break
            time.sleep(0.05)
        self._gone = self._gone or "it was stopped"
        self._mark_stopped()


def start_actor(
    index: int,
    factory: str,
    n_workers: int,
    config: Mapping[str, Any],
    resources: Mapping[str, Any],
    reply_timeout_s: float,
) -> RayWorkerHandle:
    """Start the actor hosting worker ``index`` (Ray options ``resources``; never restarted: a worker's
    state dies with it) and return the master's handle on it; ready once ``wait_started`` says so."""
    # Relative entries (the current directory) mean the master's directory, not the actor's.
    sys_path = [os.path.abspath(p) for p in sys.path]
    # Threads: the worker loop's own, a collect call waiting, a delivery; more would change nothing.
    options = {"max_concurrency": 4, "max_restarts": 0, **resources}
    actor = ray.remote(WorkerActor).options(**options).remote(sys_path, factory, index, n_workers, dict(config))
    return RayWorkerHandle(index, actor, reply_timeout_s)
