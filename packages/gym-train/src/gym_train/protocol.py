"""The master/model-worker protocol: requests, acknowledgements, ``flush``, hooks, typed errors.

A trainer is one **master** and N **model workers**, each worker a separate process (``spawn``) that
holds a model behind a :class:`ModelInterface` (the compute: GRPO implements one). The master sends
requests over a pipe; everything on the wire is msgpack (msgspec): plain data, never tensors.

Requests, by kind:

- non-blocking, executed as soon as they arrive: ``fetch`` (the worker loads its shard of the data
  into its local storage and returns only metadata, e.g. sequence lengths), ``spec`` (what the master
  needs to compute the number of steps), ``model_config``, ``clear_data_cache``;
- blocking, the compute requests: ``initialize`` (parameters, optimizer), ``generate``, ``inference``
  (one forward pass: log-probs of given tokens), ``train_step``. They are queued, and run in arrival
  order only when the master sends ``flush`` ("every concurrent request has been sent"), so that
  workers that must act together (collective data transfer) start together, never interleaved;
- ``flush`` itself, answered once everything queued before it has run.

Every request carries an id. The worker acknowledges it on receipt (:class:`Ack`) or refuses it at
once (:class:`ErrorReply`: unknown kind, unknown hook); its result comes later as a :class:`Reply`
or an :class:`ErrorReply` carrying the exception's type, message and traceback. The master waits a
bounded time for each acknowledgement and reply; a worker that misses a reply deadline is stopped
(its state is unknown) and the wait raises :class:`ReplyTimeoutError`; a worker that dies raises
:class:`WorkerCrashedError` in whatever wait was in progress, never a hang.

Hooks run around compute requests, named in the request and run in the order given:
``pre_hooks`` before the compute, ``post_hooks`` after it. The worker knows ``data_transfer`` (pre:
puts samples, from its own storage by id or sent inline by the master, into the request's
``batch``); the interface adds its own by name through :meth:`ModelInterface.hooks`, typically
``evaluate``, ``offload`` and ``checkpoint`` (post). A hook's result is returned with the reply.

The transport is the worker's only part that changes with the ``backend``: ``"process"`` (the
default), a spawned process and a :mod:`multiprocessing` pipe on this host; ``"ray"``, a Ray actor on
any node of a cluster (:mod:`gym_train.ray_workers`), which runs the same worker loop in a thread and
passes the same msgpack messages through two of its methods. Ray is imported only for ``"ray"``.
"""

from __future__ import annotations

import importlib
import importlib.util
import itertools
import multiprocessing
import os
import time
import traceback
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import Any

import msgspec

from gym_core.errors import GymError

__all__ = [
    "NON_BLOCKING",
    "BLOCKING",
    "HOOKABLE",
    "HookCall",
    "Request",
    "Ack",
    "Reply",
    "ErrorReply",
    "Fetched",
    "ModelInterface",
    "ProtocolError",
    "WorkerRequestError",
    "WorkerCrashedError",
    "ReplyTimeoutError",
    "WorkerHandle",
    "ProcessWorkerHandle",
    "Pending",
    "Master",
    "EXIT",
    "WorkerGone",
    "encoder",
    "worker_main",
]

NON_BLOCKING = frozenset({"fetch", "spec", "model_config", "clear_data_cache"})
"""Requests a worker executes as soon as they arrive."""
BLOCKING = frozenset({"initialize", "generate", "inference", "train_step"})
"""Requests a worker queues until the master's ``flush``."""
HOOKABLE = frozenset({"generate", "inference", "train_step"})
"""The compute requests, the ones that may carry pre- and post-hooks."""
FLUSH = "flush"
EXIT = "exit"
"""The master's goodbye: the worker replies, then returns."""


# --- the messages -----------------------------------------------------------------------------------


class HookCall(msgspec.Struct, frozen=True):
    """A hook to run around a compute request: its registered ``name`` and its arguments."""

    name: str
    args: dict[str, Any] = {}


class Request(msgspec.Struct, tag=True, tag_field="op"):
    """Request ``id`` (numbered by the master, per worker) of ``kind``, with its payload and hooks."""

    id: int
    kind: str
    payload: Any = None
    pre_hooks: list[HookCall] = []
    post_hooks: list[HookCall] = []


class Ack(msgspec.Struct, tag=True, tag_field="op"):
    """The worker received request ``id`` and accepted it (queued, or about to run)."""

    id: int


class Reply(msgspec.Struct, tag=True, tag_field="op"):
    """The result of request ``id``; ``seq`` numbers the worker's executions (0, 1, ...) and ``hooks``
    holds each hook's result, pre-hooks then post-hooks, in the order they ran."""

    id: int
    result: Any = None
    seq: int = -1
    hooks: list[Any] = []


class ErrorReply(msgspec.Struct, tag=True, tag_field="op"):
    """Request ``id`` failed. ``type`` is ``bad_request`` (refused on receipt), ``hook_failed`` or
    ``compute_failed``; ``error`` the exception's class name, ``traceback`` the worker's."""

    id: int
    type: str
    error: str
    message: str
    traceback: str = ""


_Message = Request | Ack | Reply | ErrorReply
encoder = msgspec.msgpack.Encoder()
"""Encodes the messages; every transport sends with it."""
_decoder = msgspec.msgpack.Decoder(_Message)


# --- the errors ---------------------------------------------------------------------------------------


class ProtocolError(GymError):
    """Base of the errors the master raises about its workers."""


class WorkerRequestError(ProtocolError):
    """A worker answered a request with an error (:class:`ErrorReply`); its type, the remote
    exception's class and the worker's traceback are kept."""

    def __init__(self, worker: int, kind: str, reply: ErrorReply):
        self.worker, self.kind, self.type = worker, kind, reply.type
        self.error, self.remote_traceback = reply.error, reply.traceback
        super().__init__(
            f"model worker {worker}: {kind} request {reply.id} failed ({reply.type}): {reply.error}: {reply.message}"
        )


class WorkerCrashedError(ProtocolError):
    """The worker process (or Ray actor) died, or closed its pipe, while the master waited on it;
    ``cause`` says how, where the exit code does not (a Ray actor's)."""

    def __init__(self, worker: int, waiting_for: str, exitcode: int | None, cause: str | None = None):
        self.worker, self.exitcode = worker, exitcode
        how = cause or f"exit code {exitcode}"
        super().__init__(f"model worker {worker} died ({how}) while the master waited for {waiting_for}")


class ReplyTimeoutError(ProtocolError):
    """No acknowledgement or reply within its deadline; the worker was stopped."""

    def __init__(self, worker: int, waiting_for: str, timeout_s: float):
        self.worker, self.timeout_s = worker, timeout_s
        super().__init__(
            f"model worker {worker} sent no reply to {waiting_for} within {timeout_s:g} s; the worker was stopped"
        )


# --- the worker side --------------------------------------------------------------------------------


@dataclass
class Fetched:
    """What :meth:`ModelInterface.fetch` loaded: ``samples`` by id (kept in the worker's storage) and
    ``metadata`` (sent to the master: plain data such as ``{"id": ..., "seqlen": ...}`` per sample)."""

    samples: Mapping[str, Any]
    metadata: Any


class ModelInterface:
    """The compute a model worker runs; subclass it and implement what your trainer uses.

    The worker builds it once, in its own process, as ``factory(worker_index, n_workers, **config)``
    (``factory`` a ``"module:attr"`` path, so the spawned process can import it). Payloads and results
    are plain msgpack data. For ``generate``/``inference``/``train_step``, ``payload["batch"]`` holds
    what the ``data_transfer`` pre-hook put there (when the request used it). A method left
    unimplemented answers its request with a ``compute_failed`` error naming it.
    """

    def fetch(self, payload: Any) -> Fetched:
        raise NotImplementedError(f"{type(self).__name__} does not implement fetch")

    def spec(self, payload: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} does not implement spec")

    def model_config(self, payload: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} does not implement model_config")

    def clear_data_cache(self, payload: Any) -> Any:
        """Drop caches beyond the worker's sample storage (which the worker clears itself)."""
        return None

    def initialize(self, payload: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} does not implement initialize")

    def generate(self, payload: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} does not implement generate")

    def inference(self, payload: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} does not implement inference")

    def train_step(self, payload: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} does not implement train_step")

    def hooks(self) -> Mapping[str, Callable[[Any, Mapping[str, Any]], Any]]:
        """Hooks by name, each called as ``hook(payload, args)`` with the request's payload (a dict the
        hook may change, pre-hooks for the compute) and the hook's arguments; e.g. ``evaluate``,
        ``offload``, ``checkpoint``."""
        return {}


def _load_factory(path: str) -> Callable[..., ModelInterface]:
    module, _, attr = path.partition(":")
    if not module or not attr:
        raise ValueError(f"model interface {path!r} is not a 'module:attr' path")
    return getattr(importlib.import_module(module), attr)


class _Worker:
    """The worker's loop: acknowledge, execute or queue, reply. Runs in the worker process."""

    def __init__(self, conn: Connection, interface: ModelInterface):
        self.conn = conn
        self.interface = interface
        self.storage: dict[str, Any] = {}
        self.queue: list[Request] = []
        self.seq = itertools.count()
        self.hooks: dict[str, Callable[[Any, Mapping[str, Any]], Any]] = {
            "data_transfer": self._data_transfer,
            **interface.hooks(),
        }

    def send(self, message: _Message) -> None:
        self.conn.send_bytes(encoder.encode(message))

    def refuse(self, request: Request, message: str) -> None:
        self.send(ErrorReply(request.id, "bad_request", "ProtocolError", message))

    def serve(self) -> None:
        while True:
            try:
                request = _decoder.decode(self.conn.recv_bytes())
            except EOFError:  # the master is gone: nothing left to answer
                return
            if not isinstance(request, Request):
                continue
            if request.kind == EXIT:
                self.send(Reply(request.id))
                return
            problem = self.check(request)
            if problem:
                self.refuse(request, problem)
                continue
            self.send(Ack(request.id))
            if request.kind in BLOCKING:
                self.queue.append(request)
            elif request.kind == FLUSH:
                queued, self.queue = self.queue, []
                for blocked in queued:
                    self.execute(blocked)
                self.send(Reply(request.id, {"executed": len(queued)}, next(self.seq)))
            else:
                self.execute(request)

    def check(self, request: Request) -> str | None:
        known = NON_BLOCKING | BLOCKING | {FLUSH}
        if request.kind not in known:
            return f"unknown request kind {request.kind!r}; known: {', '.join(sorted(known))}"
        hooks = [*request.pre_hooks, *request.post_hooks]
        if hooks and request.kind not in HOOKABLE:
            return f"{request.kind} takes no hooks: only {', '.join(sorted(HOOKABLE))} do"
        for hook in hooks:
            if hook.name not in self.hooks:
                return f"unknown hook {hook.name!r}; this worker has: {', '.join(sorted(self.hooks))}"
        return None

    def execute(self, request: Request) -> None:
        payload = request.payload
        if request.kind in HOOKABLE:
            payload = dict(payload or {})  # hooks may add to it (the batch)
        hook_results: list[Any] = []
        stage = "hook_failed"
        try:
            for hook in request.pre_hooks:
                hook_results.append(self.hooks[hook.name](payload, hook.args))
            stage = "compute_failed"
            result = self.compute(request.kind, payload)
            stage = "hook_failed"
            for hook in request.post_hooks:
                hook_results.append(self.hooks[hook.name](payload, hook.args))
            self.send(Reply(request.id, result, next(self.seq), hook_results))
        except Exception as exc:  # a failed request is the master's to handle; the worker goes on
            self.send(ErrorReply(request.id, stage, type(exc).__name__, str(exc), traceback.format_exc()))

    def compute(self, kind: str, payload: Any) -> Any:
        if kind == "fetch":
            fetched = self.interface.fetch(payload)
            self.storage.update(fetched.samples)
            return fetched.metadata
        if kind == "clear_data_cache":
            cleared = len(self.storage)
            self.storage.clear()
            return {"cleared": cleared, "interface": self.interface.clear_data_cache(payload)}
        return getattr(self.interface, kind)(payload)

    def _data_transfer(self, payload: dict[str, Any], args: Mapping[str, Any]) -> Any:
        """Pre-hook: ``batch`` = the stored samples named by ``args["ids"]``, then ``args["samples"]``."""
        ids = list(args.get("ids") or [])
        missing = [i for i in ids if i not in self.storage]
        if missing:
            raise KeyError(
                f"data_transfer: no sample {missing[0]!r} in this worker's storage ({len(self.storage)} stored)"
            )
        batch = [self.storage[i] for i in ids] + list(args.get("samples") or [])
        payload["batch"] = batch
        return {"samples": len(batch)}


def worker_main(conn: Connection, factory: str, index: int, n_workers: int, config: dict[str, Any]) -> None:
    """The worker process: build the interface (an error is the reply to the master's first wait) and serve."""
    try:
        interface = _load_factory(factory)(index, n_workers, **config)
    except Exception as exc:
        conn.send_bytes(
            encoder.encode(
                ErrorReply(
                    0,
                    "bad_request",
                    type(exc).__name__,
                    f"cannot build model interface {factory!r}: {exc}",
                    traceback.format_exc(),
                )
            )
        )
        return
    conn.send_bytes(encoder.encode(Ack(0)))  # ready
    _Worker(conn, interface).serve()


# --- the master side --------------------------------------------------------------------------------


@dataclass
class Pending:
    """A request the worker acknowledged; :meth:`result` waits for its reply."""

    worker: WorkerHandle
    id: int
    kind: str
    reply: Reply | None = field(default=None, repr=False)

    def result(self, timeout_s: float | None = None) -> Any:
        """The request's result; raises the worker's error, or a crash/timeout error, instead."""
        return self.worker.wait(self, timeout_s).result


class WorkerGone(Exception):
    """The transport's word for "the worker is gone and left nothing more to read"."""


class WorkerHandle:
    """The master's end of one model worker: send requests, flush, wait for replies by id.

    The protocol lives here; a subclass is the transport (:class:`ProcessWorkerHandle`, or
    :class:`~gym_train.ray_workers.RayWorkerHandle`): how bytes go to the worker and come back, and how
    it is stopped."""

    def __init__(self, index: int, reply_timeout_s: float):
        self.index = index
        self.reply_timeout_s = reply_timeout_s
        self._ids = itertools.count(1)
        self._replies: dict[int, Reply | ErrorReply] = {}
        self._kinds: dict[int, str] = {}
        self._failed: ProtocolError | None = None

    # --- the transport, by subclass

    def _post(self, data: bytes) -> None:
        """Send one message; OSError when the worker is gone."""
        raise NotImplementedError

    def _next_message(self, timeout_s: float) -> bytes | None:
        """The worker's next message, None when none came within ``timeout_s``; :class:`WorkerGone`
        once the worker has ended and everything it sent was read."""
        raise NotImplementedError

    def _running(self) -> bool:
        raise NotImplementedError

    def _buffered(self) -> bool:
        """Whether a message is ready to read (a worker that died may have left its last replies)."""
        raise NotImplementedError

    def _death(self) -> tuple[int | None, str | None]:
        """How the worker ended: its exit code, else a cause in words."""
        raise NotImplementedError

    def stop(self, timeout_s: float = 5.0, polite: bool = True) -> None:
        """Stop the worker, bounded: ask it to exit (``polite``), then end it by force."""
        raise NotImplementedError

    # --- the protocol

    @property
    def alive(self) -> bool:
        return self._failed is None and self._running()

    def send(
        self,
        kind: str,
        payload: Any = None,
        *,
        pre_hooks: Iterable[HookCall] = (),
        post_hooks: Iterable[HookCall] = (),
        timeout_s: float | None = None,
    ) -> Pending:
        """Send a request and wait for its acknowledgement; a refusal raises :class:`WorkerRequestError`."""
        request = Request(next(self._ids), kind, payload, list(pre_hooks), list(post_hooks))
        self._kinds[request.id] = kind
        self._check_usable(f"{kind} request {request.id}")
        try:
            self._post(encoder.encode(request))
        except OSError:  # BrokenPipeError included
            self._raise_crashed(f"{kind} request {request.id}")
        self._receive_until(
            lambda m: m.id == request.id and isinstance(m, (Ack, ErrorReply)),
            f"the acknowledgement of {kind} request {request.id}",
            timeout_s,
        )
        refused = self._replies.pop(request.id, None)
        if isinstance(refused, ErrorReply):
            raise WorkerRequestError(self.index, kind, refused)
        return Pending(self, request.id, kind)

    def flush(self, timeout_s: float | None = None) -> int:
        """Release the queued blocking requests (they run in arrival order) and wait until they ran;
        returns how many. Their replies are kept for their :class:`Pending`."""
        return self.send(FLUSH, timeout_s=timeout_s).result(timeout_s)["executed"]

    def wait(self, pending: Pending, timeout_s: float | None = None) -> Reply:
        """The reply to ``pending`` (``timeout_s``, else the handle's reply timeout)."""
        if pending.reply is None:
            what = f"the reply to {pending.kind} request {pending.id}"
            if pending.id not in self._replies:
                self._check_usable(what)
            self._receive_until(lambda m: m.id == pending.id, what, timeout_s)
            reply = self._replies.pop(pending.id)
            if isinstance(reply, ErrorReply):
                raise WorkerRequestError(self.index, pending.kind, reply)
            pending.reply = reply
        return pending.reply

    def call(
        self,
        kind: str,
        payload: Any = None,
        *,
        pre_hooks: Iterable[HookCall] = (),
        post_hooks: Iterable[HookCall] = (),
        timeout_s: float | None = None,
    ) -> Any:
        """Send, flush if ``kind`` is blocking, and return the result: one request, start to end."""
        pending = self.send(kind, payload, pre_hooks=pre_hooks, post_hooks=post_hooks, timeout_s=timeout_s)
        if kind in BLOCKING:
            self.flush(timeout_s)
        return pending.result(timeout_s)

    def wait_started(self, timeout_s: float) -> None:
        """Wait for the worker's first message: ready (id 0), or why it could not build its interface."""
        self._receive_until(lambda m: m.id == 0, "the worker to start", timeout_s)
        ready = self._replies.pop(0)
        if isinstance(ready, ErrorReply):
            raise WorkerRequestError(self.index, "start", ready)

    def _receive_until(self, done: Callable[[Any], bool], what: str, timeout_s: float | None) -> None:
        if any(done(m) for m in self._replies.values()):
            return
        limit = self.reply_timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + limit
        while True:
            try:
                data = self._next_message(max(0.0, deadline - time.monotonic()))
            except WorkerGone:
                self._raise_crashed(what)
            if data is None:
                self.stop(polite=False)  # it may be stuck in a compute: asking it to exit would go unheard
                self._failed = ReplyTimeoutError(self.index, what, limit)
                raise self._failed
            message = _decoder.decode(data)
            self._replies[message.id] = message
            if done(message):
                return

    def _check_usable(self, what: str) -> None:
        if self._failed is not None:
            raise self._failed
        if not self._running() and not self._buffered():
            self._raise_crashed(what)

    def _raise_crashed(self, what: str) -> None:
        self._failed = WorkerCrashedError(self.index, what, *self._death())
        raise self._failed

    def _mark_stopped(self) -> None:
        if self._failed is None:
            self._failed = ProtocolError(f"model worker {self.index} was stopped")


class ProcessWorkerHandle(WorkerHandle):
    """A model worker in a spawned process on this host, reached through a pipe."""

    def __init__(
        self, index: int, process: multiprocessing.process.BaseProcess, conn: Connection, reply_timeout_s: float
    ):
        super().__init__(index, reply_timeout_s)
        self.process = process
        self.conn = conn

    def _post(self, data: bytes) -> None:
        self.conn.send_bytes(data)

    def _next_message(self, timeout_s: float) -> bytes | None:
        ready = wait([self.conn, self.process.sentinel], timeout=timeout_s) if timeout_s > 0 else []
        if self.conn in ready:
            try:
                return self.conn.recv_bytes()
            except (EOFError, OSError):
                raise WorkerGone from None
        if ready:  # only the sentinel: the process ended, and its pipe holds nothing more
            raise WorkerGone
        return None

    def _running(self) -> bool:
        return self.process.is_alive()

    def _buffered(self) -> bool:
        return self.conn.poll()

    def _death(self) -> tuple[int | None, str | None]:
        self.process.join(timeout=5)
        return self.process.exitcode, None

    def stop(self, timeout_s: float = 5.0, polite: bool = True) -> None:
        """Stop the worker: ask it to exit (``polite``), then terminate and kill it if it does not in time."""
        if polite and self.process.is_alive() and self._failed is None:
            try:
                self.conn.send_bytes(encoder.encode(Request(next(self._ids), EXIT)))
            except OSError:
                pass
            self.process.join(timeout_s)
        if self.process.is_alive():
            self.process.terminate()
            self.process.join(timeout_s)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(timeout_s)
        self.conn.close()
        self._mark_stopped()


BACKENDS = ("process", "ray")
RAY_RESOURCE_OPTIONS = frozenset(
    {"num_cpus", "num_gpus", "memory", "resources", "accelerator_type", "scheduling_strategy"}
)
"""The Ray actor options ``ray_resources`` may set for each worker's actor."""


class Master:
    """The master: starts ``n_workers`` model workers, each running ``factory`` (a ``"module:attr"``
    path to a :class:`ModelInterface` factory, called with the worker's index, the number of workers
    and ``config``), and talks to them. Use it as a context manager; every wait is bounded by
    ``reply_timeout_s`` unless a call says otherwise. The workers inherit ``sys.path`` and import
    ``factory`` by name, so its module must be importable (installed, or on ``sys.path``).

    ``backend="process"`` (the default) spawns a process per worker on this host. ``backend="ray"``
    hosts each worker in a Ray actor with the same protocol: it uses the Ray this process already
    joined, else joins the cluster at ``ray_address``, else ``$RAY_ADDRESS`` (which ``gym run`` gives
    its servers), else starts a local one (stopped by :meth:`close`); ``ray_resources`` are each
    actor's Ray options (``num_cpus``, ``num_gpus``, ``memory``, ``resources``, ...; Ray's defaults
    otherwise). Ray must be installed for it (``pip install 'gym-train[ray]'``), and on a cluster of
    several machines every node needs gym-train (and ``factory``'s module) in its workers' Python.
    """

    def __init__(
        self,
        factory: str,
        n_workers: int = 1,
        *,
        config: Mapping[str, Any] | None = None,
        reply_timeout_s: float = 60.0,
        start_timeout_s: float = 120.0,
        backend: str = "process",
        ray_address: str | None = None,
        ray_resources: Mapping[str, Any] | None = None,
    ):
        if n_workers < 1:
            raise ValueError(f"n_workers must be at least 1, not {n_workers}")
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {', '.join(map(repr, BACKENDS))}, not {backend!r}")
        if backend != "ray" and (ray_address is not None or ray_resources):
            raise ValueError("ray_address and ray_resources are for backend='ray'")
        unknown = sorted(set(ray_resources or {}) - RAY_RESOURCE_OPTIONS)
        if unknown:
            raise ValueError(
                f"ray_resources: unknown option {unknown[0]!r}; known: {', '.join(sorted(RAY_RESOURCE_OPTIONS))}"
            )
        if backend == "ray" and importlib.util.find_spec("ray") is None:
            raise GymError("Master(backend='ray') needs Ray, which is not installed: pip install 'gym-train[ray]'")
        self.factory = factory
        self.n_workers = n_workers
        self.config = dict(config or {})
        self.reply_timeout_s = reply_timeout_s
        self.start_timeout_s = start_timeout_s
        self.backend = backend
        self.ray_address = ray_address
        self.ray_resources = dict(ray_resources or {})
        self.workers: list[WorkerHandle] = []
        self._ray_cluster: Any = None  # gym_cli's RayCluster, when backend="ray"

    def start(self) -> Master:
        """Start the workers and wait until each has built its interface."""
        try:
            if self.backend == "ray":
                self._start_ray_workers()
            else:
                self._start_processes()
            for worker in self.workers:
                worker.wait_started(self.start_timeout_s)
        except BaseException:
            self.close()
            raise
        return self

    def _start_processes(self) -> None:
        # spawn, not fork: a forked copy of a process that already ran torch threads can deadlock.
        context = multiprocessing.get_context("spawn")
        for index in range(self.n_workers):
            ours, theirs = context.Pipe()
            process = context.Process(
                target=worker_main,
                name=f"gym-train-worker-{index}",
                daemon=True,
                args=(theirs, self.factory, index, self.n_workers, self.config),
            )
            process.start()
            theirs.close()
            self.workers.append(ProcessWorkerHandle(index, process, ours, self.reply_timeout_s))

    def _start_ray_workers(self) -> None:
        from gym_core.config import RayConfig

        from gym_cli.launch.ray_placement import RAY_ADDRESS_ENV, connect

        address = self.ray_address or os.environ.get(RAY_ADDRESS_ENV) or None
        self._ray_cluster = connect(RayConfig(address=address), "Master(backend='ray')", lambda _: None)
        from gym_train.ray_workers import start_actor  # imports ray: only now

        for index in range(self.n_workers):
            self.workers.append(
                start_actor(index, self.factory, self.n_workers, self.config, self.ray_resources, self.reply_timeout_s)
            )

    def close(self) -> None:
        """Stop every worker (bounded: exit, then terminate and kill the process, or kill the actor);
        leave a Ray cluster this master joined (stopping one it started)."""
        for worker in self.workers:
            worker.stop()
        if self._ray_cluster is not None:
            self._ray_cluster.disconnect()
            self._ray_cluster = None

    def __enter__(self) -> Master:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send(
        self,
        kind: str,
        payloads: Sequence[Any] | None = None,
        *,
        pre_hooks: Iterable[HookCall] = (),
        post_hooks: Iterable[HookCall] = (),
    ) -> list[Pending]:
        """Send ``kind`` to every worker, ``payloads[i]`` to worker ``i`` (None: no payload)."""
        if payloads is not None and len(payloads) != len(self.workers):
            raise ValueError(f"{len(payloads)} payloads for {len(self.workers)} workers")
        pre, post = list(pre_hooks), list(post_hooks)
        return [
            w.send(kind, None if payloads is None else payloads[i], pre_hooks=pre, post_hooks=post)
            for i, w in enumerate(self.workers)
        ]

    def flush(self, timeout_s: float | None = None) -> list[int]:
        """Flush every worker: send all the flushes first, so the workers start together, then wait
        (``timeout_s`` each, else the reply timeout). Returns how many requests each ran."""
        flushes = [w.send(FLUSH, timeout_s=timeout_s) for w in self.workers]
        return [p.result(timeout_s)["executed"] for p in flushes]

    def call(
        self,
        kind: str,
        payloads: Sequence[Any] | None = None,
        *,
        pre_hooks: Iterable[HookCall] = (),
        post_hooks: Iterable[HookCall] = (),
        timeout_s: float | None = None,
    ) -> list[Any]:
        """Send ``kind`` to every worker, flush if it is blocking, and return the results by worker."""
        pending = self.send(kind, payloads, pre_hooks=pre_hooks, post_hooks=post_hooks)
        if kind in BLOCKING:
            self.flush(timeout_s)
        return [p.result(timeout_s) for p in pending]
