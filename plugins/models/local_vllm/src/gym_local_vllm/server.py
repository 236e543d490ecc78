"""The ``local_vllm_model`` model server: gym launches its vLLM engines on Ray and serves through them.

Start-up (before the server listens, so ``gym run``'s readiness wait covers weight loading):

1. Join Ray: an already initialised Ray in this process; else ``ray.init()`` when ``RAY_ADDRESS``
   is set (``gym run`` sets it for every server when the config uses Ray); else the config's
   ``ray_head_node_address``; else a local cluster only if ``start_ray`` says so.
2. Reserve one placement group per data-parallel engine, named ``<instance>_dp_rank_<i>``, with
   ``tensor_parallel_size x pipeline_parallel_size`` bundles packed on one node
   (:mod:`gym_local_vllm.placement`), waiting at most ``placement_timeout_s``.
3. Read the GPU ids of each group's bundles (a zero-CPU task in each) and start one
   :class:`~gym_local_vllm.engine.EngineProcess` actor per group in its bundle 0, which starts the
   engine with those GPUs in ``CUDA_VISIBLE_DEVICES``.
4. Poll each engine's ``GET /v1/models`` until it answers 200, at most ``startup_timeout_s``; an
   engine that exits, or does not answer in time, fails start-up with its last lines of output.
5. Serve through ``vllm_model``'s code with the engines' URLs as its replicas, so each session is
   pinned to one engine by the hash of its id.

Whatever was created is torn down when start-up fails and at shutdown, each step bounded: the
engines get SIGTERM then SIGKILL, the actors are killed, the placement groups removed. The actors and
groups belong to this process's Ray job, so if it dies Ray reclaims them too.
"""

from __future__ import annotations

import asyncio
import os
import time
import urllib.error
import urllib.request
from typing import Any

from gym_core.errors import GymError

from gym_local_vllm.config import LocalVllmModelConfig
from gym_local_vllm.engine import EngineProcess
from gym_local_vllm.placement import EnginePlan, engine_argv, plan_for
from gym_vllm_model.server import VllmModel

__all__ = ["LocalVllmModel", "EngineLaunchError"]

_POLL_S = 0.5  # between readiness polls
_RAY_CALL_S = 60.0  # bound of one call to an actor or task (a worker may have to start first)
_ERROR_LINES = 20  # of the engine's output, in a start-up error


class EngineLaunchError(GymError):
    """The engines could not be placed, started, or did not come up; the message says which and why."""


class LocalVllmModel(VllmModel):
    config: LocalVllmModelConfig

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.plan: EnginePlan | None = None
        self.engines: list[dict[str, Any]] = []  # per engine: url, pid, node_ip, command, gpu_ids
        self._groups: list[Any] = []
        self._actors: list[Any] = []
        self._owns_ray = False

    async def startup(self) -> None:
        await super().startup()
        if self.replicas:  # base_url given: someone else runs vLLM
            return
        # Ray's calls block: off the event loop (nothing is served yet, but the loop stays responsive).
        await asyncio.to_thread(self._launch)

    async def shutdown(self) -> None:
        await asyncio.to_thread(self._teardown)
        await super().shutdown()

    # --- launching ---

    def _launch(self) -> None:
        cfg = self.config
        ray = self._join_ray()
        self.plan = plan = plan_for(cfg)
        self.log.info(
            "launching %d engine(s), each a placement group of %s (%s)", plan.engines, list(plan.bundles), plan.strategy
        )
        try:
            self._place(ray, plan)
            urls = self._start_engines(ray, plan)
            self._wait_ready(ray, urls)
        except BaseException:
            self._teardown()
            raise
        self.set_replicas(urls)
        for index, engine in enumerate(self.engines):
            self.log.info(
                "engine %d ready at %s on node %s (GPUs %s)",
                index,
                engine["url"],
                engine["node_ip"],
                ",".join(engine["gpu_ids"]) or "none",
            )

    def _join_ray(self) -> Any:
        try:
            import ray
        except ImportError:
            raise EngineLaunchError(f"{self.name}: local_vllm_model needs Ray (pip install ray)") from None
        if ray.is_initialized():
            return ray
        address = self.global_config.ray_head_node_address if self.global_config is not None else None
        if os.environ.get("RAY_ADDRESS"):
            ray.init()  # Ray reads the address from the environment
        elif address:
            ray.init(address=address)
        elif self.config.start_ray:
            ray.init(address="local")  # a cluster of its own, not whichever `ray start` left on this machine
            self._owns_ray = True
        else:
            raise EngineLaunchError(
                f"{self.name}: no Ray cluster to launch vLLM on: RAY_ADDRESS is not set (gym run sets it when the config"
                " uses Ray: `ray: {address: ...}` or ray_head_node_address) and the config sets no ray_head_node_address;"
                f" set one of them, or `{self.name}.start_ray: true` to start a local Ray cluster in this server"
            )
        return ray

    def _place(self, ray: Any, plan: EnginePlan) -> None:
        from ray.util.placement_group import placement_group

        for index in range(plan.engines):
            self._groups.append(
                placement_group(list(plan.bundles), strategy=plan.strategy, name=f"{self.name}_dp_rank_{index}")
            )
        try:
            ray.get([group.ready() for group in self._groups], timeout=self.config.placement_timeout_s)
        except ray.exceptions.GetTimeoutError:
            raise EngineLaunchError(
                f"{self.name}: the Ray cluster did not grant {plan.engines} placement group(s) of {list(plan.bundles)}"
                f" ({plan.strategy}: one engine's bundles on one node) within {self.config.placement_timeout_s:g} s;"
                f" available now: {_resources(ray.available_resources())}, in all: {_resources(ray.cluster_resources())}"
            ) from None

    def _start_engines(self, ray: Any, plan: EnginePlan) -> list[str]:
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        cfg = self.config
        argv = engine_argv(cfg, plan)
        values = {"model": cfg.model, "served_model_name": cfg.model}
        env = {**({"HF_HOME": cfg.hf_home} if cfg.hf_home else {}),
               **({"VLLM_API_KEY": cfg.api_key} if cfg.api_key else {}), **cfg.vllm_serve_env_vars}  # fmt: skip
        runtime_env = {"py_executable": cfg.ray_worker_py_executable} if cfg.ray_worker_py_executable else None
        actor_class = ray.remote(EngineProcess)
        gpu_ids = [self._gpu_ids(ray, group, plan, runtime_env) for group in self._groups]
        calls = []
        for index, group in enumerate(self._groups):
            actor = actor_class.options(
                num_cpus=1, num_gpus=0, max_restarts=0, runtime_env=runtime_env,
                scheduling_strategy=PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=0,
                                                                     placement_group_capture_child_tasks=True),
            ).remote(f"{self.name} engine {index}")  # fmt: skip
            self._actors.append(actor)
            own_env = {**env, "CUDA_VISIBLE_DEVICES": ",".join(gpu_ids[index])} if plan.gpus_per_engine else env
            calls.append(actor.start.remote(argv, own_env, values, cfg.engine_host))
        try:
            self.engines = ray.get(calls, timeout=_RAY_CALL_S)
        except ray.exceptions.GetTimeoutError:
            raise EngineLaunchError(f"{self.name}: the engine actors did not start within {_RAY_CALL_S:g} s") from None
        except ray.exceptions.RayError as exc:
            raise EngineLaunchError(f"{self.name}: an engine could not be started: {exc}") from None
        for engine, ids in zip(self.engines, gpu_ids):
            engine["gpu_ids"] = ids
        return [engine["url"] for engine in self.engines]

    def _gpu_ids(self, ray: Any, group: Any, plan: EnginePlan, runtime_env: dict | None) -> list[str]:
        """The GPU ids Ray gave the bundles of ``group`` (one zero-CPU task holding each bundle's GPU)."""
        if not plan.gpus_per_engine:
            return []
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        probe = ray.remote(_bundle_gpu)
        refs = [probe.options(num_cpus=0, num_gpus=1, runtime_env=runtime_env,
                              scheduling_strategy=PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=index))
                .remote() for index in range(len(plan.bundles))]  # fmt: skip
        try:
            found = ray.get(refs, timeout=_RAY_CALL_S)
        except ray.exceptions.GetTimeoutError:
            raise EngineLaunchError(
                f"{self.name}: no Ray worker ran in the GPU bundles within {_RAY_CALL_S:g} s"
            ) from None
        nodes = {node for node, _ in found}
        if len(nodes) != 1:  # STRICT_PACK promises one node; a GPU id means nothing on another
            raise EngineLaunchError(f"{self.name}: the bundles of one engine landed on {len(nodes)} nodes")
        return [gpu for _, ids in found for gpu in ids]

    def _wait_ready(self, ray: Any, urls: list[str]) -> None:
        """Poll every engine's ``GET /v1/models`` until it answers 200; fail on an engine exiting or the time limit."""
        cfg = self.config
        deadline = time.monotonic() + cfg.startup_timeout_s
        waiting = dict(enumerate(urls))
        headers = {"authorization": f"Bearer {cfg.api_key}"} if cfg.api_key else {}
        next_note = time.monotonic() + 30.0
        while waiting:
            for index, url in list(waiting.items()):
                status, tail = self._poll(ray, index)
                if status is not None:
                    raise EngineLaunchError(
                        f"{self.name}: engine {index} ({url}) exited with status {status} during start-up;"
                        f" its last lines:\n{_indent(tail)}"
                    )
                if _answers(url, headers):
                    del waiting[index]
            if not waiting:
                return
            now = time.monotonic()
            if now >= deadline:
                index, url = next(iter(waiting.items()))
                _, tail = self._poll(ray, index)
                raise EngineLaunchError(
                    f"{self.name}: engine {index} did not answer GET {url}/models within startup_timeout_s="
                    f"{cfg.startup_timeout_s:g} s (loading weights takes time: raise it if needed); its last lines:\n"
                    f"{_indent(tail)}"
                )
            if now >= next_note:
                self.log.info("waiting for %d engine(s) to answer: %s", len(waiting), ", ".join(waiting.values()))
                next_note = now + 30.0
            time.sleep(_POLL_S)

    def _poll(self, ray: Any, index: int) -> tuple[int | None, list[str]]:
        try:
            return tuple(ray.get(self._actors[index].poll.remote(), timeout=_RAY_CALL_S))  # type: ignore[return-value]
        except ray.exceptions.RayError as exc:
            raise EngineLaunchError(f"{self.name}: the actor of engine {index} died: {exc}") from None

    # --- tearing down ---

    def _teardown(self) -> None:
        """Stop the engines, kill their actors, remove the placement groups; each step bounded, none skipped."""
        if not (self._actors or self._groups or self._owns_ray):
            return
        import ray
        from ray.util.placement_group import remove_placement_group

        grace = self.config.shutdown_timeout_s
        stops = [actor.stop.remote(grace) for actor in self._actors]
        if stops:
            ray.wait(stops, num_returns=len(stops), timeout=grace + 10.0)
        for actor in self._actors:
            try:
                ray.kill(actor, no_restart=True)
            except Exception as exc:  # already gone
                self.log.debug("killing an engine actor: %s", exc)
        for group in self._groups:
            try:
                remove_placement_group(group)
            except Exception as exc:
                self.log.warning("removing placement group %s failed: %s", group.id.hex(), exc)
        self._actors.clear()
        self._groups.clear()
        if self._owns_ray:
            ray.shutdown()
            self._owns_ray = False


def _bundle_gpu() -> tuple[str, list[str]]:
    """Run in a bundle with its GPU: the node and the GPU ids Ray assigned."""
    import ray

    return ray.get_runtime_context().get_node_id(), [str(gpu) for gpu in ray.get_gpu_ids()]


def _answers(url: str, headers: dict[str, str]) -> bool:
    try:
        with urllib.request.urlopen(urllib.request.Request(f"{url}/models", headers=headers), timeout=5.0) as reply:
            return reply.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


def _resources(resources: dict[str, float]) -> str:
    shown = {key: value for key, value in sorted(resources.items())
             if key in ("CPU", "GPU") or not (key.startswith("node:") or "_group_" in key or key.startswith("memory")
                                              or key == "object_store_memory")}  # fmt: skip
    return ", ".join(f"{key}={value:g}" for key, value in shown.items()) or "none"


def _indent(lines: list[str]) -> str:
    return "\n".join(f"  | {line}" for line in lines[-_ERROR_LINES:]) if lines else "  (no output)"
