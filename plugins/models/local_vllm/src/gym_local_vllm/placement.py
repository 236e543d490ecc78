"""How a ``local_vllm_model`` instance sits on a Ray cluster: pure functions, no Ray import.

Data parallelism is gym's: ``data_parallel_size`` engines, each a separate vLLM server with its own
placement group and URL, served by ``vllm_model`` as replicas (a session stays on one engine).
Tensor and pipeline parallelism are vLLM's, inside one engine: its placement group has
``tensor_parallel_size x pipeline_parallel_size`` bundles, one per worker, packed on one node
(``STRICT_PACK``), and the engine gets those bundles' GPUs in ``CUDA_VISIBLE_DEVICES``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gym_local_vllm.config import PARALLEL_KEYS, LocalVllmModelConfig

__all__ = ["EnginePlan", "engine_plan", "plan_for", "vllm_cli_args", "engine_argv", "fill_placeholders", "PLACEHOLDERS"]

# One engine's bundles share a node: tensor parallelism across nodes is too slow to want, and its GPU ids
# must be one node's. Separate engines (data parallelism) are separate groups, free to land anywhere.
STRATEGY = "STRICT_PACK"
PLACEHOLDERS = ("python", "model", "served_model_name", "host", "port")
_PLACEHOLDER = re.compile(r"\{(" + "|".join(PLACEHOLDERS) + r")\}")


@dataclass(frozen=True)
class EnginePlan:
    """What to reserve and how to start the engines of one instance."""

    engines: int  # data_parallel_size: one vLLM server (and placement group) each
    bundles: tuple[dict[str, float], ...]  # the placement group of each engine, one bundle per worker
    strategy: str
    gpus_per_engine: int  # tensor_parallel_size x pipeline_parallel_size when on GPUs, else 0
    args: tuple[str, ...]  # vLLM arguments: parallelism, then the passthrough kwargs

    @property
    def total_bundles(self) -> int:
        return self.engines * len(self.bundles)


def engine_plan(
    tensor_parallel_size: int = 1,
    pipeline_parallel_size: int = 1,
    data_parallel_size: int = 1,
    *,
    gpus: bool = True,
    serve_kwargs: Mapping[str, Any] | None = None,
) -> EnginePlan:
    """The placement and the vLLM arguments of ``data_parallel_size`` engines of ``tp x pp`` workers each.

    Each engine's group has one bundle per worker, ``{"GPU": 1, "CPU": 1}`` (``{"CPU": 1}`` without
    GPUs); its Ray actor takes the CPU of bundle 0. ``serve_kwargs`` (vLLM destination names, the
    parallelism keys excluded) are appended as CLI arguments.
    """
    for name, value in zip(PARALLEL_KEYS, (tensor_parallel_size, pipeline_parallel_size, data_parallel_size)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a whole number >= 1, got {value!r}")
    workers = tensor_parallel_size * pipeline_parallel_size
    bundle = {"GPU": 1.0, "CPU": 1.0} if gpus else {"CPU": 1.0}
    args = ("--tensor-parallel-size", str(tensor_parallel_size), "--pipeline-parallel-size", str(pipeline_parallel_size),
            *vllm_cli_args(serve_kwargs or {}))  # fmt: skip
    return EnginePlan(
        engines=data_parallel_size,
        bundles=tuple(dict(bundle) for _ in range(workers)),
        strategy=STRATEGY,
        gpus_per_engine=workers if gpus else 0,
        args=args,
    )


def plan_for(config: LocalVllmModelConfig) -> EnginePlan:
    """:func:`engine_plan` for an instance's options (parallelism read from ``vllm_serve_kwargs``)."""
    kwargs = dict(config.vllm_serve_kwargs)
    sizes = [kwargs.pop(key, 1) for key in PARALLEL_KEYS]
    return engine_plan(*sizes, gpus=config.use_gpus, serve_kwargs=kwargs)


def vllm_cli_args(kwargs: Mapping[str, Any]) -> list[str]:
    """vLLM CLI arguments from destination names: ``{"max_num_seqs": 8}`` -> ``--max-num-seqs 8``.

    ``true`` is the bare flag, ``false`` its ``--no-`` form (vLLM's boolean options take both), a
    mapping is JSON (``--hf-overrides '{...}'``), a list gives its items as separate values, ``null``
    leaves the option out.
    """
    args: list[str] = []
    for key, value in kwargs.items():
        flag = "--" + key.replace("_", "-")
        if value is None:
            continue
        if value is True:
            args.append(flag)
        elif value is False:
            args.append("--no-" + key.replace("_", "-"))
        elif isinstance(value, Mapping):
            args += [flag, json.dumps(value, separators=(",", ":"))]
        elif isinstance(value, Sequence) and not isinstance(value, str):
            args += [flag, *(json.dumps(item) if isinstance(item, Mapping) else str(item) for item in value)]
        else:
            args += [flag, str(value)]
    return args


def engine_argv(config: LocalVllmModelConfig, plan: EnginePlan) -> list[str]:
    """The engine's command line, placeholders unfilled: ``engine_command``, then (``pass_vllm_args``)
    the served name, the address and the plan's arguments."""
    argv = list(config.engine_command)
    if config.pass_vllm_args:
        argv += ["--served-model-name", "{served_model_name}", "--host", "{host}", "--port", "{port}", *plan.args]
    return argv


def fill_placeholders(argv: Sequence[str], values: Mapping[str, str]) -> list[str]:
    """``argv`` with ``{python}``, ``{model}``, ``{served_model_name}``, ``{host}``, ``{port}`` replaced;
    other braces (JSON arguments) are left alone."""
    return [_PLACEHOLDER.sub(lambda match: values[match.group(1)], arg) for arg in argv]
