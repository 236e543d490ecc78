"""Options of a ``local_vllm_model`` server instance, validated when a config is loaded.

Every ``vllm_model`` option applies (the server serves through ``vllm_model``'s code); ``base_url``
becomes optional: when it is empty, the server launches its engines on the Ray cluster and serves
through their URLs. Kept light: registering the plugin imports neither Ray nor the server.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
from msgspec import Meta

from gym_vllm_model.config import BaseURL, VllmModelConfig

__all__ = ["LocalVllmModelConfig", "PARALLEL_KEYS", "GYM_SET_KEYS", "DEFAULT_ENGINE_COMMAND"]

# The parallelism of the engines, read from vllm_serve_kwargs (where the reference's configs put them).
PARALLEL_KEYS = ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size")
# vLLM arguments gym sets itself: a config that sets them too would fight it.
GYM_SET_KEYS = frozenset({"model", "served_model_name", "host", "port", "api_key"})
# vLLM's own CLI entry point, run by the interpreter of the engine's Ray actor ({python}).
DEFAULT_ENGINE_COMMAND = ("{python}", "-m", "vllm.entrypoints.cli.main", "serve", "{model}")


class LocalVllmModelConfig(VllmModelConfig, kw_only=True):
    base_url: Annotated[
        BaseURL | list[BaseURL],
        Meta(
            description="empty (the default): launch the engines on Ray and serve through them; set: launch nothing"
            " and serve these vLLM servers exactly like vllm_model"
        ),
    ] = msgspec.field(default_factory=list)
    vllm_serve_kwargs: Annotated[
        dict[str, Any],
        Meta(
            description="vLLM server arguments by their destination names (gpu_memory_utilization: 0.8,"
            " enable_prefix_caching: true...), passed as --gpu-memory-utilization 0.8...; tensor_parallel_size and"
            " pipeline_parallel_size (default 1) size each engine, data_parallel_size (default 1) is the number of"
            " engines, one placement group each"
        ),
    ] = msgspec.field(default_factory=dict)
    vllm_serve_env_vars: Annotated[
        dict[str, str],
        Meta(description="environment variables of each engine process (VLLM_*, HF_TOKEN from env.yaml...)"),
    ] = msgspec.field(default_factory=dict)
    engine_command: Annotated[
        list[str],
        Meta(
            min_length=1,
            description="the engine's command line; {python} (the Ray actor's interpreter), {model},"
            " {served_model_name}, {host} and {port} are filled in. Default: vLLM's CLI, `serve {model}`",
        ),
    ] = msgspec.field(default_factory=lambda: list(DEFAULT_ENGINE_COMMAND))
    pass_vllm_args: Annotated[
        bool,
        Meta(
            description="append the vLLM arguments gym derives (--served-model-name, --host, --port, parallelism,"
            " vllm_serve_kwargs) to engine_command; false for an engine that is not vLLM, whose command uses the"
            " placeholders"
        ),
    ] = True
    use_gpus: Annotated[
        bool,
        Meta(
            description="one GPU per tensor/pipeline-parallel worker: bundles {GPU: 1, CPU: 1}; false: bundles"
            " {CPU: 1} (vLLM on CPU, or a test engine)"
        ),
    ] = True
    engine_host: Annotated[
        str | None,
        Meta(
            description="the address each engine listens on and is called at; default: the IP of the Ray node it"
            " runs on (reachable from the other nodes)"
        ),
    ] = None
    start_ray: Annotated[
        bool,
        Meta(
            description="when RAY_ADDRESS is not set (gym run sets it when the config uses Ray) and no Ray address"
            " is configured, start a local Ray cluster in this server; false: that is a start-up error"
        ),
    ] = False
    ray_worker_py_executable: Annotated[
        str | None,
        Meta(
            description="the Python of the engines' Ray actors (a venv with vLLM on every node); default: this"
            " server's own interpreter"
        ),
    ] = None
    hf_home: Annotated[
        str | None,
        Meta(description="HF_HOME of the engines (where weights are downloaded and cached); default: theirs"),
    ] = None
    placement_timeout_s: Annotated[
        float, Meta(gt=0, description="longest wait for the cluster to grant every placement group, seconds")
    ] = 600.0
    startup_timeout_s: Annotated[
        float,
        Meta(
            gt=0,
            description="longest wait for every engine to answer GET /v1/models (download, load, compile),"
            " seconds; then start-up fails with the engine's last log lines",
        ),
    ] = 1800.0
    shutdown_timeout_s: Annotated[
        float,
        Meta(gt=0, description="grace given to each engine to exit on SIGTERM at shutdown, then SIGKILL, seconds"),
    ] = 30.0

    def __post_init__(self) -> None:
        for key in PARALLEL_KEYS:
            value = self.vllm_serve_kwargs.get(key, 1)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"vllm_serve_kwargs.{key} must be a whole number >= 1, got {value!r}")
        clashing = sorted(
            key
            for key in self.vllm_serve_kwargs
            if key in GYM_SET_KEYS or (key.startswith("data_parallel_") and key != "data_parallel_size")
        )
        if clashing:
            raise ValueError(
                f"vllm_serve_kwargs may not set {', '.join(clashing)}: gym sets the model, served name, host, port and"
                " API key (use model and api_key), and runs data_parallel_size engines of its own, one per placement group"
            )
