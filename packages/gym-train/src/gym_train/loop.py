"""The closed loop of ``gym train``: collect → GRPO step → GGUF → serve → collect again.

Two threads and one model worker:

- the **collector** (a thread of this process) serves the config's servers in threads of this
  process (real uvicorn on loopback) and collects *rounds* with gym's collector
  (:func:`gym_cli.rollouts.collect_rollouts`): round ``k`` is every task ``repeats`` times, its rows
  appended to ``OUTPUT/rollouts.jsonl``, each stamped with the ``policy_version`` being served and
  its ``train_round``. Between rounds it serves the newest policy the trainer published: the
  ``local_llama`` instance is stopped and started again on the new GGUF (same port; no rollout is in
  flight then, so none is cut);
- the **trainer** (this thread) is the :class:`~gym_train.protocol.Master` of one
  :class:`~gym_train.worker.GRPOPolicyWorker` process. It pulls round ``k``'s groups (a task's
  ``repeats`` rollouts) from a :class:`~gym_train.stream.StreamDataset` tailing the rollouts file,
  sends ``train_step`` with the rollouts (``data_transfer`` pre-hook) and a ``checkpoint`` post-hook
  that writes the new weights to ``OUTPUT/policy/policy-v<version>.gguf``, flushes, and publishes
  that file to the collector.

The two modes differ only in how far collection may run ahead of training. Round ``k`` starts once
the policy of version ``k - max_staleness`` or newer is published: ``sync`` is ``max_staleness =
0`` (round ``k`` waits for step ``k``'s policy: collection and training alternate), ``async`` lets
collection run on the served policy while the trainer steps (``max_staleness`` 1 by default: round
``k`` overlaps step ``k``). The stream enforces the same bound (a rollout more than
``max_staleness`` versions behind the trainer is dropped and counted). The importance ratio of the
GRPO loss is taken against each rollout's own log-probs (those of the policy that generated it, from
``local_llama``), so a stale rollout is corrected, not just tolerated.

After the last step one more round (the *evaluation* round) is collected with the final policy, so
that the reward before (round 0, the base model) and after compare like with like: same tasks, same
repeats, same sampling. Throughput counts the training rounds and the wall time from the first
rollout to the last step's published policy.

Every wait is bounded (a round, a step, a server start); a failure of either thread stops both and
is raised here.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from gym_core.config import GlobalConfig, load_config
from gym_core.errors import GymError
from gym_core.plugins import get_plugin_manager
from gym_core.serving import ServerThread, build_server

from gym_cli.exits import CommandFailed

__all__ = [
    "POLICY_SERVER_TYPE",
    "TrainError",
    "TrainFailed",
    "TrainOptions",
    "TrainResult",
    "ServedConfig",
    "rollout_sample",
    "run_loop",
]

POLICY_SERVER_TYPE = "local_llama"
"""The model server type the loop serves the policy with: it loads a GGUF and returns token ids and
log-probs (token-faithful rollouts)."""

ROUND_FIELD = "train_round"
"""The row field naming the round (0, 1, ...) a rollout was collected in."""

WORKER_FACTORY = "gym_train.worker:GRPOPolicyWorker"


class TrainError(GymError):
    """The loop cannot start (config, tasks, output, model): the message says what and where."""


class TrainFailed(CommandFailed):
    """The loop started and then failed (collection, the trainer's worker, a wait past its bound)."""


@dataclass
class TrainOptions:
    """What ``gym train`` runs (see :mod:`gym_train.command` for each option)."""

    config_paths: Sequence[str]
    input_path: Path
    output_dir: Path
    overrides: Sequence[str] = ()
    steps: int = 3
    repeats: int = 4
    mode: Literal["sync", "async"] = "sync"
    max_staleness: int = 1  # async only; sync is 0
    limit: int | None = None
    temperature: float = 1.0
    max_output_tokens: int = 12
    learning_rate: float = 5e-5
    micro_batch_size: int = 8
    trainer_threads: int | None = 1
    seed: int = 0
    policy_model: str | None = None
    agent: str | None = None
    parallel: int = 8
    round_timeout_s: float = 900.0
    step_timeout_s: float = 900.0
    server_timeout_s: float = 180.0
    backend: Literal["process", "ray"] = "process"  # where the trainer's model worker runs
    ray_address: str | None = None  # backend "ray": the cluster (else $RAY_ADDRESS, else a local one)
    trainer_resources: Mapping[str, Any] | None = None  # backend "ray": the worker actor's Ray options

    @property
    def staleness(self) -> int:
        """How many versions a round's policy may lag the one it trains: 0 in sync mode."""
        return 0 if self.mode == "sync" else self.max_staleness


@dataclass
class RoundResult:
    """One collected round: its policy version, rows, failures, mean reward, tokens and wall time."""

    round: int
    policy_version: int
    rollouts: int
    failed: int
    mean_reward: float | None
    generated_tokens: int
    started_s: float  # since the loop started
    elapsed_s: float
    evaluation: bool = False


@dataclass
class TrainResult:
    """What a run did; written to ``OUTPUT/summary.json``."""

    mode: str
    steps: int
    repeats: int
    tasks: int
    max_staleness: int
    rounds: list[RoundResult] = field(default_factory=list)
    step_stats: list[dict[str, Any]] = field(default_factory=list)
    reward_before: float | None = None
    reward_after: float | None = None
    loop_wall_s: float = 0.0  # first rollout → the last step's policy published
    train_rollouts: int = 0
    train_tokens: int = 0
    rollouts_per_s: float = 0.0
    tokens_per_s: float = 0.0
    stream_counts: dict[str, Any] = field(default_factory=dict)
    final_policy: str = ""
    trainer: dict[str, Any] = field(default_factory=dict)  # backend, pid, ray_node: where the steps ran

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


# --- serving ------------------------------------------------------------------------------------------


class ServedConfig:
    """The instances of a gym config served in threads of this process (real uvicorn on loopback),
    one of them restartable on another GGUF (:meth:`serve_policy`).

    ``gym_core.testing.running_servers`` does the same for tests but imports pytest, so the loop
    starts its servers itself with the same gym-core parts (:func:`gym_core.serving.build_server`,
    :class:`gym_core.serving.ServerThread`); no head server is needed: the collector's client
    resolves names from the config itself."""

    def __init__(self, config: GlobalConfig, policy_instance: str, start_timeout_s: float = 180.0):
        self.config = config
        self.policy_instance = policy_instance
        self.start_timeout_s = start_timeout_s
        self.plugins = get_plugin_manager()
        self.threads: dict[str, ServerThread] = {}

    def _start(self, name: str, config: GlobalConfig) -> None:
        instance = config.instances[name]
        server = build_server(config, name, self.plugins)
        try:
            self.threads[name] = ServerThread(server.build_app(), instance.host, instance.port).start(
                self.start_timeout_s
            )
        except GymError as exc:
            raise TrainError(
                f"server instance {name!r} ({instance.plugin}) did not start on port {instance.port}: {exc}"
            ) from None

    def start(self) -> ServedConfig:
        try:
            for name, instance in self.config.instances.items():
                if instance.replicas > 1:
                    raise TrainError(f"{name}: gym train serves one replica of each instance, not {instance.replicas}")
                self._start(name, self.config)
        except BaseException:
            self.stop()
            raise
        return self

    def serve_policy(self, gguf: Path) -> None:
        """Stop the policy instance and start it again on ``gguf`` (same port, same other options)."""
        name = self.policy_instance
        thread = self.threads.pop(name)
        thread.stop(timeout_s=self.start_timeout_s)
        data = {**self.config.data, name: {**self.config.data[name], "model_path": str(gguf)}}
        self.config = GlobalConfig(data, secrets=self.config.secrets)
        self._start(name, self.config)

    def stop(self) -> None:
        for name in reversed(list(self.threads)):
            self.threads.pop(name).stop()

    def __enter__(self) -> ServedConfig:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _load(options: TrainOptions) -> tuple[GlobalConfig, str]:
    """The resolved config (ports assigned) and the name of its policy instance, checked."""
    plugins = get_plugin_manager()
    config = load_config(
        options.config_paths,
        options.overrides,
        env_file=None,
        server_types=plugins.servers(),
        load_errors=plugins.load_errors,
    )
    policies = [n for n, i in config.instances.items() if i.plugin == POLICY_SERVER_TYPE]
    where = ", ".join(str(p) for p in options.config_paths)
    if options.policy_model is not None:
        instance = config.instances.get(options.policy_model)
        if instance is None:
            raise TrainError(
                f"--policy-model {options.policy_model!r}: no such instance in {where} "
                f"(instances: {', '.join(config.instances) or 'none'})"
            )
        if instance.plugin != POLICY_SERVER_TYPE:
            raise TrainError(
                f"--policy-model {options.policy_model!r} is a {instance.plugin!r} server: gym train "
                f"serves the policy with {POLICY_SERVER_TYPE!r} (it loads the trained GGUF)"
            )
        return config, options.policy_model
    if len(policies) != 1:
        found = f"{len(policies)} ({', '.join(policies)})" if policies else "none"
        raise TrainError(
            f"{where}: gym train needs exactly one {POLICY_SERVER_TYPE!r} instance to serve the policy, "
            f"found {found}; name it with --policy-model"
        )
    return config, policies[0]


# --- rollouts → samples -------------------------------------------------------------------------------


def rollout_sample(row: Mapping[str, Any], group: Any) -> dict[str, Any] | None:
    """The GRPO sample of a rollout row: the token fields of its last model call (whose prompt holds
    every earlier turn), its reward and ``group``; None when the rollout generated no tokens. A row
    without token fields raises :class:`TrainError`: its agent is not token-faithful."""
    carrier = None
    for item in reversed((row.get("response") or {}).get("output") or []):
        if isinstance(item, dict) and item.get("generation_token_ids") is not None:
            carrier = item
            break
    if carrier is None or carrier.get("prompt_token_ids") is None or carrier.get("generation_log_probs") is None:
        raise TrainError(
            f"rollout (task {row.get('task_index')}, rollout {row.get('rollout_index')}) has no token ids "
            f"and log-probs: train with a token-faithful agent (token_preserving) on {POLICY_SERVER_TYPE}"
        )
    if not carrier["generation_token_ids"]:
        return None
    return {
        "prompt_token_ids": carrier["prompt_token_ids"],
        "generation_token_ids": carrier["generation_token_ids"],
        "generation_log_probs": carrier["generation_log_probs"],
        "reward": float(row["reward"]),
        "group": group,
    }


def _generated_tokens(row: Mapping[str, Any]) -> int:
    usage = row.get("usage") or {}
    return int(usage.get("output_tokens") or 0)


# --- the loop ---------------------------------------------------------------------------------------


class _Shared:
    """What the collector and the trainer share: the published policy, the rounds done, a stop flag."""

    def __init__(self, base_gguf: Path | None):
        self.condition = threading.Condition()
        self.published: tuple[int, Path | None] = (0, base_gguf)  # (version, GGUF); 0 = the base model
        self.rounds: dict[int, RoundResult] = {}
        self.error: BaseException | None = None
        self.stopping = False

    def wait_for(self, predicate: Any, timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        with self.condition:
            while not predicate():
                if self.error is not None:
                    raise TrainFailed(f"collection failed: {self.error}") from self.error
                if self.stopping:
                    raise TrainFailed(f"stopped while waiting for {what}")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TrainFailed(f"{what} did not come within {timeout_s:g} s")
                self.condition.wait(min(left, 1.0))

    def notify(self, **changes: Any) -> None:
        with self.condition:
            for key, value in changes.items():
                setattr(self, key, value)
            self.condition.notify_all()


class _VersionedTasks:
    """The tasks of one round, each stamped with the round and the policy version served for it;
    indexed like the list :func:`gym_cli.rollouts.collect_rollouts` takes."""

    def __init__(self, tasks: Sequence[dict[str, Any]], round_index: int, version: int):
        self.tasks, self.round, self.version = tasks, round_index, version

    def __len__(self) -> int:
        return len(self.tasks)

    def __getitem__(self, index: int) -> dict[str, Any]:
        from gym_train.stream import VERSION_FIELD

        return {**self.tasks[index], VERSION_FIELD: self.version, ROUND_FIELD: self.round}


def _collect_round(
    served: ServedConfig,
    tasks: Sequence[dict[str, Any]],
    round_index: int,
    version: int,
    options: TrainOptions,
    rollouts: Path,
) -> tuple[int, int, float]:
    """Collect one round through gym's collector; returns (rows written, rollouts failed, reward sum)."""
    from gym_core.client import ServerClient
    from gym_core.options import ClientConfig

    from gym_cli.head import agent_instances
    from gym_cli.rollouts import CollectOptions, CollectSummary, choose_agent, collect_rollouts, run_async

    repeats = options.repeats
    # Rollout indices run on across rounds, so (task, rollout) names one row of the whole file.
    pairs = [(t, round_index * repeats + r) for r in range(repeats) for t in range(len(tasks))]
    collect = CollectOptions(
        rollouts,
        rollouts.with_name("rollouts.failures.jsonl"),
        options.agent,
        repeats,
        options.parallel,
        {"temperature": options.temperature, "max_output_tokens": options.max_output_tokens},
        retries=2,
        retry_backoff_s=1.0,
        rollout_timeout_s=options.round_timeout_s,
    )
    if options.agent is None:
        rows = [{"name": n, "plugin": i.plugin} for n, i in served.config.instances.items()]
        collect.default_agent = choose_agent(tasks, agent_instances(rows, served.plugins.servers()))
    summary = CollectSummary(total=len(pairs))

    async def run() -> None:
        # One attempt per request: collect_rollouts retries whole rollouts (as `gym collect` does).
        timeout = options.round_timeout_s
        async with ServerClient(
            served.config, config=ClientConfig(timeout_s=timeout, max_attempts=1, deadline_s=timeout)
        ) as client:
            await collect_rollouts(client, _VersionedTasks(tasks, round_index, version), pairs, collect, summary)

    run_async(run())
    return summary.done, summary.failed, summary.reward_sum


def _collector(
    shared: _Shared,
    served: ServedConfig,
    tasks: Sequence[dict[str, Any]],
    options: TrainOptions,
    rollouts: Path,
    started: float,
) -> None:
    """Rounds 0..steps (the last one, after the final step, is the evaluation round)."""
    served_version = 0
    try:
        for round_index in range(options.steps + 1):
            evaluation = round_index == options.steps
            # Round k may use a policy at most `staleness` versions behind k; the evaluation round the final one.
            needed = options.steps if evaluation else max(0, round_index - options.staleness)
            shared.wait_for(
                lambda: shared.published[0] >= needed,  # noqa: B023 (called within this iteration)
                options.step_timeout_s * (options.staleness + 1),
                f"policy version {needed} (for round {round_index})",
            )
            version, gguf = shared.published
            if version != served_version:
                assert gguf is not None
                served.serve_policy(gguf)
                served_version = version
            begun = time.monotonic()
            done, failed, reward_sum = _collect_round(served, tasks, round_index, version, options, rollouts)
            generated = sum(_generated_tokens(r) for r in _rows_of_round(rollouts, round_index))
            result = RoundResult(
                round_index,
                version,
                done,
                failed,
                reward_sum / done if done else None,
                generated,
                round(begun - started, 3),
                round(time.monotonic() - begun, 3),
                evaluation,
            )
            with shared.condition:
                shared.rounds[round_index] = result
                shared.condition.notify_all()
    except BaseException as exc:  # the trainer waits on us: tell it, then let run_loop raise it
        shared.notify(error=exc)


def _rows_of_round(rollouts: Path, round_index: int) -> list[dict[str, Any]]:
    """The rows of one round so far; complete lines only (in async mode the collector may be writing)."""
    rows = []
    if rollouts.is_file():
        for line in rollouts.read_bytes().split(b"\n")[:-1]:
            if line.strip():
                row = json.loads(line)
                if row.get(ROUND_FIELD) == round_index:
                    rows.append(row)
    return rows


def run_loop(options: TrainOptions, log: Any = print) -> TrainResult:
    """Run the closed loop (module docstring); write ``OUTPUT/{rollouts.jsonl, steps.jsonl,
    summary.json, reward.png}`` and the policy's GGUFs; return what it did."""
    from gym_cli.rollouts import read_tasks
    from gym_train.protocol import HookCall, Master, ProtocolError, WorkerRequestError
    from gym_train.report import plot_rewards
    from gym_train.stream import StreamDataset

    tasks = read_tasks(options.input_path, options.limit)
    if not tasks:
        raise TrainError(f"{options.input_path}: no tasks")
    config, policy_instance = _load(options)
    try:  # checks its options now; starts the worker in the `with` below
        master = Master(
            WORKER_FACTORY,
            1,
            reply_timeout_s=options.step_timeout_s,
            start_timeout_s=options.server_timeout_s,
            backend=options.backend,
            ray_address=options.ray_address,
            ray_resources=options.trainer_resources,
        )
    except ValueError as exc:  # an unknown Ray option, Ray options without backend "ray"
        raise TrainError(f"the trainer's worker (--backend, --ray-address, --trainer-resources): {exc}") from None
    out = options.output_dir
    rollouts = out / "rollouts.jsonl"
    if rollouts.exists():
        raise TrainError(
            f"{rollouts} exists: gym train starts from the base model, so give it a fresh --output directory"
        )
    (out / "policy").mkdir(parents=True, exist_ok=True)
    base = config.instances[policy_instance].options.get("model_path")
    result = TrainResult(options.mode, options.steps, options.repeats, len(tasks), options.staleness)
    shared = _Shared(Path(base) if base else None)
    stream = StreamDataset(rollouts, max_staleness=options.staleness, stale="drop")
    grpo = {"learning_rate": options.learning_rate, "micro_batch_size": options.micro_batch_size, "seed": options.seed}
    steps_log = (out / "steps.jsonl").open("w")
    log(
        f"gym train ({options.mode}, max staleness {options.staleness}): {len(tasks)} tasks x {options.repeats} repeats, "
        f"{options.steps} steps; policy served by {policy_instance!r}; output in {out}"
    )
    with master, ServedConfig(config, policy_instance, options.server_timeout_s) as served, steps_log:
        try:
            info = master.call("initialize", [{"gguf": base, "grpo": grpo, "threads": options.trainer_threads}])[0]
        except WorkerRequestError as exc:  # no model, a bad GGUF, a bad hyper-parameter: nothing ran yet
            raise TrainError(f"the trainer could not load the policy: {exc}") from None
        result.trainer = {"backend": options.backend, "pid": info.get("pid"), "ray_node": info.get("ray_node")}
        where = f"a Ray actor on node {info['ray_node'][:12]}" if info.get("ray_node") else f"process {info.get('pid')}"
        log(f"trainer: {info['parameters']:,} parameters from {info['gguf']}, in {where}")
        started = time.monotonic()
        collector = threading.Thread(
            target=_collector,
            name="gym-train-collector",
            daemon=True,
            args=(shared, served, tasks, options, rollouts, started),
        )
        collector.start()
        try:
            for step in range(1, options.steps + 1):
                train_round = step - 1
                shared.wait_for(
                    lambda: train_round in shared.rounds,  # noqa: B023 (called within this iteration)
                    options.round_timeout_s * (options.staleness + 1),
                    f"round {train_round}'s rollouts",
                )
                collected = shared.rounds[train_round]
                log(
                    f"round {train_round}: {collected.rollouts} rollouts on policy v{collected.policy_version}, "
                    f"mean reward {_fmt(collected.mean_reward)} ({collected.elapsed_s:.1f} s)"
                )
                complete = _complete_groups(rollouts, train_round, options.repeats)
                if not complete:
                    raise TrainFailed(
                        f"round {train_round}: no task has all {options.repeats} rollouts "
                        f"({collected.failed} failed: see {rollouts.with_name('rollouts.failures.jsonl')})"
                    )
                groups = stream.groups(
                    complete,
                    options.repeats,
                    timeout_s=60.0,
                    key=lambda row: (row.get("task_index"), row.get(ROUND_FIELD)),
                )
                samples = [
                    s
                    for g in groups
                    for r in g
                    if (s := rollout_sample(r.row, f"{r.row.get('task_index')}@{train_round}")) is not None
                ]
                target = out / "policy" / f"policy-v{step}.gguf"
                begun = time.monotonic()
                pending = master.send(
                    "train_step",
                    [{}],
                    pre_hooks=[HookCall("data_transfer", {"samples": samples})],
                    post_hooks=[HookCall("checkpoint", {"path": str(target)})],
                )
                master.flush()
                reply = pending[0].worker.wait(pending[0])
                stats = dict(reply.result)
                stats.update(
                    round=train_round,
                    rollout_policy_version=collected.policy_version,
                    staleness=step - 1 - collected.policy_version,
                    gguf=reply.hooks[-1]["path"],
                    started_s=round(begun - started, 3),
                    elapsed_s=round(time.monotonic() - begun, 3),
                )
                steps_log.write(json.dumps(stats) + "\n")
                steps_log.flush()
                result.step_stats.append(stats)
                stream.advance(step)
                _drop_old_policies(out / "policy", step)
                shared.notify(published=(step, target))
                log(
                    f"step {step}: loss {stats['loss']:.4f}, grad norm {stats['grad_norm']:.3f}, "
                    f"{stats['num_rollouts']} rollouts ({stats['num_tokens']} tokens), staleness {stats['staleness']} "
                    f"({stats['elapsed_s']:.1f} s) -> {target.name}"
                )
            result.loop_wall_s = round(time.monotonic() - started, 3)
            shared.wait_for(lambda: options.steps in shared.rounds, options.round_timeout_s, "the evaluation round")
        except ProtocolError as exc:
            shared.notify(stopping=True)
            raise TrainFailed(f"the trainer's model worker failed: {exc}") from exc
        except BaseException:
            shared.notify(stopping=True)
            raise
        finally:
            collector.join(timeout=options.round_timeout_s)
        if shared.error is not None:
            raise TrainFailed(f"collection failed: {shared.error}") from shared.error
    rounds = [shared.rounds[k] for k in sorted(shared.rounds)]
    result.rounds = rounds
    result.reward_before = rounds[0].mean_reward
    result.reward_after = rounds[-1].mean_reward
    training = [r for r in rounds if not r.evaluation]
    result.train_rollouts = sum(r.rollouts for r in training)
    result.train_tokens = sum(r.generated_tokens for r in training)
    result.rollouts_per_s = round(result.train_rollouts / result.loop_wall_s, 4) if result.loop_wall_s else 0.0
    result.tokens_per_s = round(result.train_tokens / result.loop_wall_s, 3) if result.loop_wall_s else 0.0
    result.stream_counts = dataclasses.asdict(stream.counts)
    result.final_policy = str(out / "policy" / f"policy-v{options.steps}.gguf")
    (out / "summary.json").write_text(json.dumps(result.to_dict(), indent=2) + "\n")
    plot_rewards({options.mode: out}, out / "reward.png")
    log(
        f"reward {_fmt(result.reward_before)} (base, round 0) -> {_fmt(result.reward_after)} (after {options.steps} steps); "
        f"{result.train_rollouts} training rollouts in {result.loop_wall_s:.1f} s = {result.rollouts_per_s:.3f} rollouts/s, "
        f"{result.tokens_per_s:.1f} generated tokens/s"
    )
    return result


def _complete_groups(rollouts: Path, round_index: int, repeats: int) -> int:
    counts: dict[Any, int] = {}
    for row in _rows_of_round(rollouts, round_index):
        counts[row.get("task_index")] = counts.get(row.get("task_index"), 0) + 1
    return sum(1 for n in counts.values() if n >= repeats)


def _drop_old_policies(directory: Path, newest: int) -> None:
    """Each float32 GGUF is ~0.5 GB: keep the newest two (the collector may be about to serve the one
    before the newest; a served file that is removed stays readable to the engine that mapped it)."""
    for path in directory.glob("policy-v*.gguf"):
        version = path.stem.removeprefix("policy-v")
        if version.isdigit() and int(version) < newest - 1:
            path.unlink(missing_ok=True)


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"
