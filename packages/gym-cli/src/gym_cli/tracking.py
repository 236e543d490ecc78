"""Experiment tracking: ``--track mlflow`` / ``--track wandb`` log a reward profile to MLflow or to
Weights & Biases, both optional extras (``pip install 'gym-cli[mlflow]'``, ``'gym-cli[wandb]'``).

One small interface, :class:`Tracker` (metrics, parameters, artifacts, an end), two backends:

- MLflow through its client, ``mlflow-skinny``: a local ``file:`` store by default (``--track-dir`` or
  ``./mlruns``), or whatever ``MLFLOW_TRACKING_URI`` names (a sqlite or server URI; sqlite needs the
  full ``mlflow`` package). Experiment: ``MLFLOW_EXPERIMENT_NAME``, else ``gym``.
- Weights & Biases offline (no account, no network) unless ``WANDB_MODE`` asks otherwise; runs are
  written under ``--track-dir`` or ``WANDB_DIR`` (``wandb sync`` uploads them later). Project:
  ``WANDB_PROJECT``, else ``gym``.

Metric names are the same in both: ``mean_reward`` (the headline) with ``num_rollouts`` and
``num_tasks`` (its denominator), ``pass_at_K`` and ``majority_at_K`` (MLflow allows no ``@``), costs per
rollout, ``env/<environment>/…`` per environment, and ``metrics/<name>`` for the environments' own
aggregate metrics (``gym_aggregate_metrics``; ``mcqa/pass@1/accuracy`` → ``metrics/mcqa.pass_at_1.accuracy``).
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from gym_core.errors import GymError

from gym_cli.cli_options import TRACKERS
from gym_cli.exits import CommandFailed

if TYPE_CHECKING:
    from gym_cli.rollouts import CollectSummary

__all__ = [
    "TRACKERS",
    "Tracker",
    "check_trackers",
    "collection_metrics",
    "log_collection",
    "log_profile",
    "metric_name",
    "profile_metrics",
    "tracking",
]

_EXTRA_MODULE = {"mlflow": "mlflow", "wandb": "wandb"}
_UNSAFE = re.compile(r"[^\w.\- /]")


class Tracker(Protocol):
    """One run of an experiment tracker."""

    name: str
    where: str
    """Where the run is kept (an MLflow store URI and run id, a W&B run directory), for the user."""

    def log_params(self, params: Mapping[str, Any]) -> None: ...

    def log_metrics(self, metrics: Mapping[str, float]) -> None: ...

    def log_artifact(self, path: Path) -> None: ...

    def end(self, failed: bool) -> None: ...


def metric_name(name: str) -> str:
    """``name`` as both backends accept it: ``pass@4`` → ``pass_at_4``, ``pass@1[avg-of-4]`` →
    ``pass_at_1_avg-of-4``, any other character MLflow refuses → ``_``."""
    name = _UNSAFE.sub("_", name.replace("@", "_at_").replace("[", "_").replace("]", ""))
    return "/".join(part if part.strip(".") else "_" for part in name.split("/"))


def check_trackers(backends: Sequence[str]) -> None:
    """Fail before any work when a backend's extra is not installed (a :class:`GymError`: exit 2)."""
    import importlib.util

    for backend in backends:
        if importlib.util.find_spec(_EXTRA_MODULE[backend]) is None:
            raise GymError(
                f"--track {backend} needs the {backend} extra, which is not installed: pip install 'gym-cli[{backend}]'"
            )


class _MlflowRun:
    name = "mlflow"

    def __init__(self, directory: Path | None, run_name: str | None, tags: Mapping[str, str]):
        import mlflow

        if directory is not None:
            uri = (directory / "mlruns").resolve().as_uri()
        else:
            uri = os.environ.get("MLFLOW_TRACKING_URI") or Path("mlruns").resolve().as_uri()
        if uri.startswith("file:"):
            # MLflow 3 keeps its file store in maintenance mode behind this switch; it is the store that
            # needs no database and no server (mlflow-skinny has no sqlite backend).
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        self.uri = uri
        self.client = mlflow.MlflowClient(uri)
        experiment_name = os.environ.get("MLFLOW_EXPERIMENT_NAME") or "gym"
        experiment = self.client.get_experiment_by_name(experiment_name)
        experiment_id = experiment.experiment_id if experiment else self.client.create_experiment(experiment_name)
        self.run_id = self.client.create_run(experiment_id, run_name=run_name, tags=dict(tags)).info.run_id
        self.where = f"run {self.run_id} in {uri}"

    def log_params(self, params: Mapping[str, Any]) -> None:
        from mlflow.entities import Param

        self.client.log_batch(self.run_id, params=[Param(k, str(v)) for k, v in params.items()])

    def log_metrics(self, metrics: Mapping[str, float]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self.client.log_batch(self.run_id, metrics=[Metric(k, v, now, 0) for k, v in metrics.items()])

    def log_artifact(self, path: Path) -> None:
        self.client.log_artifact(self.run_id, str(path))

    def end(self, failed: bool) -> None:
        self.client.set_terminated(self.run_id, "FAILED" if failed else "FINISHED")


class _WandbRun:
    name = "wandb"

    def __init__(self, directory: Path | None, run_name: str | None, tags: Mapping[str, str]):
        import wandb

        if directory is not None:
            directory.mkdir(parents=True, exist_ok=True)
        self.run = wandb.init(
            project=os.environ.get("WANDB_PROJECT") or "gym",
            name=run_name,
            dir=str(directory) if directory is not None else None,
            mode=os.environ.get("WANDB_MODE") or "offline",  # type: ignore[arg-type]
            config={"gym": dict(tags)},
            reinit="create_new",
            # gym's own console owns stdout and stderr (--progress json keeps stdout for its events)
            settings=wandb.Settings(console="off"),
        )
        self.where = f"run {self.run.id} in {Path(self.run.dir).parent}"

    def log_params(self, params: Mapping[str, Any]) -> None:
        self.run.config.update(dict(params), allow_val_change=True)

    def log_metrics(self, metrics: Mapping[str, float]) -> None:
        self.run.log(dict(metrics))
        self.run.summary.update(dict(metrics))

    def log_artifact(self, path: Path) -> None:
        import wandb

        artifact = wandb.Artifact(metric_name(path.name).replace("/", "_"), type="gym")
        artifact.add_file(str(path))
        self.run.log_artifact(artifact)

    def end(self, failed: bool) -> None:
        self.run.finish(exit_code=1 if failed else 0)


_BACKENDS = {"mlflow": _MlflowRun, "wandb": _WandbRun}


@contextlib.contextmanager
def tracking(
    backends: Sequence[str], directory: Path | None, run_name: str | None, tags: Mapping[str, str]
) -> Iterator[list[Tracker]]:
    """One run per backend, open for the block; ended as failed when the block raises."""
    check_trackers(backends)
    runs: list[Tracker] = []
    try:
        for backend in dict.fromkeys(backends):
            try:
                runs.append(_BACKENDS[backend](directory, run_name, tags))
            except Exception as exc:  # the backends' own errors (a bad URI, an unwritable dir) are many
                raise GymError(f"--track {backend}: cannot start a run: {exc}") from exc
        yield runs
    except BaseException:
        for run in runs:
            with contextlib.suppress(Exception):
                run.end(failed=True)
        raise
    for run in runs:
        run.end(failed=False)


def _numbers(prefix: str, value: Any) -> Iterator[tuple[str, float]]:
    if isinstance(value, bool) or value is None:
        return
    if isinstance(value, int | float):
        if math.isfinite(value):
            yield metric_name(prefix), float(value)
    elif isinstance(value, Mapping):
        for key, inner in value.items():
            yield from _numbers(f"{prefix}/{key}" if prefix else str(key), inner)


_BLOCK_KEYS = ("mean_reward", "num_rollouts", "num_tasks", "turns_per_rollout", "tool_calls_per_rollout")


def _block_metrics(prefix: str, block: Mapping[str, Any]) -> Iterator[tuple[str, float]]:
    for key, value in block.items():
        if key in _BLOCK_KEYS or key.startswith(("pass@", "majority@")):
            yield from _numbers(prefix + key, value)
    yield from _numbers(prefix + "tokens_per_rollout", block.get("tokens_per_rollout"))


def profile_metrics(profile: Mapping[str, Any]) -> dict[str, float]:
    """The numbers of a ``gym profile`` result under the names every backend logs them as."""
    metrics = dict(_block_metrics("", profile["overall"]))
    for environment, block in (profile.get("environments") or {}).items():
        metrics.update(_block_metrics(f"env/{environment.replace('/', '_')}/", block))
    # An environment's metrics nest (``x/accuracy`` beside ``x/accuracy/std_dev_across_runs``), which
    # MLflow's file store cannot hold (a metric is a file, so ``x/accuracy`` cannot be a directory too):
    # below ``metrics/`` their parts are joined with dots.
    for name, value in (profile.get("plugin_metrics") or {}).items():
        metrics.update(_numbers("metrics/" + name.replace("/", "."), value))
    return metrics


def log_profile(
    runs: Sequence[Tracker],
    profile: Mapping[str, Any] | None,
    artifacts: Sequence[Path],
    params: Mapping[str, Any] | None = None,
    metrics: Mapping[str, float] | None = None,
) -> None:
    """Log a profile's metrics (with ``metrics``, ``params``) and the files that exist among
    ``artifacts`` to every run."""
    metrics = {**(metrics or {}), **(profile_metrics(profile) if profile else {})}
    params = dict(params or {})
    if profile:
        params.update(grouped_by=profile.get("grouped_by"), answer_field=profile.get("answer_field"))
    if profile and profile.get("_written_to"):
        artifacts = [Path(profile["_written_to"]), *artifacts]
    for run in runs:
        try:
            run.log_params({k: v for k, v in params.items() if v is not None})
            run.log_metrics(metrics)
            for path in artifacts:
                if path.is_file():
                    run.log_artifact(path)
        except Exception as exc:  # the work is done and written: only the logging of it failed
            raise CommandFailed(f"--track {run.name}: could not log to {run.where}: {exc}") from exc


def collection_metrics(summary: CollectSummary) -> dict[str, float]:
    """The counts of a ``gym collect`` run, under ``collect/``: what was done, failed (and why),
    retried, skipped on resuming; its throughput and rollout latency."""
    elapsed = summary.elapsed_s
    counts: dict[str, Any] = {
        "total": summary.total,
        "done": summary.done,
        "failed": summary.failed,
        "skipped": summary.skipped,
        "retried": summary.retried,
        "elapsed_s": elapsed,
        "rollouts_per_s": (summary.done + summary.failed) / elapsed if elapsed > 0 else None,
        "mean_reward": summary.mean_reward,
        "failures": dict(summary.failure_reasons),
    }
    for quantile in (0.5, 0.99):
        counts[f"latency_p{round(quantile * 100)}_s"] = summary.latency.quantile(quantile)
    return dict(_numbers("collect", counts))


def log_collection(
    runs: Sequence[Tracker],
    summary: CollectSummary,
    params: Mapping[str, Any],
    profile: Mapping[str, Any] | None,
    artifacts: Sequence[Path],
) -> None:
    """Log a collection's counts, its options and (when it was made) its profile to every run."""
    given = {k: v for k, v in params.items() if v is not None}
    log_profile(runs, profile, artifacts, given, collection_metrics(summary))
