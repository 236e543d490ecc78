"""``gym redteam``'s work: play every probe of :mod:`gym_core.redteam` on an environment's example tasks.

An environment is checked on its own servers, started in this process on loopback with every model
scripted (no network, no weights; :func:`gym_cli.example_rollouts.setup_config`, the setup its example
rollouts use): the policy says each probe's turns (``metadata.scripted_turns``) through the
environment's real agent, so the agent's tool handling and the environment's ``/verify`` score it;
session tricks are played on the environment's routes. A judged environment (one whose setup runs a
model besides the policy) is checked twice: with the judges its setup scripts, and with the quoting
judge (:mod:`gym_core.redteam.judge`) in place of each.

For each task, the reward of an honest failure (:data:`gym_core.redteam.HONEST_FAILURE`) is the
baseline: a probe is **gameable** when it scores more than that plus the threshold, **robust** when
it scores no more or is refused with a 4xx, and an **error** when a 5xx or a typed failure answered.
"""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from gym_core.errors import GymError, ServerCallError
from gym_core.redteam import (
    DEFAULT_RULING,
    HONEST_FAILURE,
    MARKER_KEY,
    PROBES,
    REFERENCE_OPTIONS,
    Attack,
    Probe,
    RedteamDeclaration,
    Target,
    target_of,
)

if TYPE_CHECKING:
    from gym_core.client import ServerClient
    from gym_core.config import GlobalConfig
    from gym_core.plugins import PluginManager

__all__ = [
    "Check",
    "ProbeResult",
    "Summary",
    "checks_of_directory",
    "checks_of_config",
    "read_rows",
    "run_check",
    "summarise",
    "MarkerRecorder",
    "allowed",
    "GAMEABLE",
    "ROBUST",
    "ERROR",
]

GAMEABLE, ROBUST, ERROR = "gameable", "robust", "error"
_PLUGIN_NAME = "gym_redteam"


@dataclass
class Check:
    """One environment, set up to be probed: its config (every instance), the agent that runs it,
    its resources instance, the rows to try (index in the input and row), and how its judges answer
    (``judge``: ``"scripted"`` as its setup says, ``"quoting"``, or ``None`` for no judge)."""

    name: str
    config: dict[str, Any]
    agent: str
    resources: str
    environment: str  # the resources server type
    rows: list[tuple[int, dict[str, Any]]]
    best_reward: float | None
    judge: str | None
    reference: bool = False
    probes: tuple[Probe, ...] = PROBES

    @property
    def label(self) -> str:
        return self.name if self.judge in (None, "scripted") else f"{self.name} ({self.judge} judge)"


@dataclass
class ProbeResult:
    """One probe on one task."""

    environment: str
    probe: str
    family: str
    task_index: int
    reward: float | None  # None: no reward came back (refused or failed)
    baseline: float
    verdict: str
    status: int | None = None  # the HTTP status of a refusal or failure
    detail: str = ""


@dataclass
class Summary:
    """One probe on one environment, over the tasks it was played on."""

    environment: str
    probe: str
    family: str
    tasks: int
    reward: float | None  # the highest reward it got
    baseline: float  # the honest failure's reward on that task
    verdict: str
    reference: bool
    details: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


# --- building checks ---------------------------------------------------------------------------------


def ensure_plugin(plugins: PluginManager) -> None:
    """Register the quoting judge's plugin with ``plugins`` (once)."""
    from gym_core.redteam.judge import plugin

    if _PLUGIN_NAME not in plugins.plugin_names:
        plugins.register(plugin, name=_PLUGIN_NAME)


def _kind(plugins: PluginManager, options: Any) -> str | None:
    plugin = options.get("plugin") if isinstance(options, dict) else None
    server_type = plugins.servers().get(plugin) if isinstance(plugin, str) else None
    return server_type.kind if server_type is not None else None


def read_rows(path: Path) -> list[dict[str, Any]]:
    rows = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as exc:
            raise GymError(f"{path}:{number}: not JSON: {exc}") from None
        if not isinstance(row, dict) or not isinstance(row.get("responses_create_params"), dict):
            raise GymError(f"{path}:{number}: a task row is an object with responses_create_params")
        rows.append(row)
    if not rows:
        raise GymError(f"{path}: no task rows")
    return rows


def _pick_rows(rows: list[dict[str, Any]], count: int) -> tuple[list[tuple[int, dict[str, Any]]], float | None]:
    """Up to ``count`` rows, those whose conformance field records the best reward first (the probes
    that reshape a solution need one), and that best reward."""
    rewards = [
        r["conformance"]["reward"]
        for r in rows
        if isinstance(r.get("conformance"), dict) and isinstance(r["conformance"].get("reward"), (int, float))
    ]
    best = max(rewards) if rewards else None

    def solved(row: dict[str, Any]) -> bool:
        spec = row.get("conformance")
        return isinstance(spec, dict) and best is not None and spec.get("reward") == best and best > 0

    order = sorted(range(len(rows)), key=lambda i: (not solved(rows[i]), i))
    return [(i, rows[i]) for i in order[:count]], best


def checks_of_config(
    name: str,
    config: dict[str, Any],
    rows: list[dict[str, Any]],
    plugins: PluginManager,
    declarations: Mapping[str, RedteamDeclaration],
    *,
    count: int = 4,
) -> list[Check]:
    """The checks of one environment's config: the agent's policy made ``scripted``, and for a judged
    environment a second check with the quoting judge in place of every other model."""
    ensure_plugin(plugins)
    agents = [n for n, options in config.items() if _kind(plugins, options) == "agent"]
    if len(agents) != 1:
        raise GymError(f"{name}: a redteam config runs one agent, this one runs {len(agents)}")
    agent = agents[0]
    resources = config[agent].get("resources_server")
    policy = config[agent].get("model_server")
    if _kind(plugins, config.get(resources)) != "resources" or not isinstance(policy, str):
        raise GymError(f"{name}: agent {agent!r} must name its resources_server and model_server in the config")
    config = copy.deepcopy(config)
    if config.get(policy, {}).get("plugin") != "scripted":
        config[policy] = {"plugin": "scripted"}
    environment = config[resources]["plugin"]
    declaration = declarations.get(environment)
    reference_options = {**REFERENCE_OPTIONS, **(declaration.reference if declaration else {})}
    reference = any(config[resources].get(k) == v for k, v in reference_options.items())
    probes = (*PROBES, *(declaration.probes if declaration else ()))
    judges = [n for n, options in config.items() if n != policy and _kind(plugins, options) == "model"]
    picked, best = _pick_rows(rows, count)
    base = Check(name, config, agent, resources, environment, picked, best, "scripted" if judges else None)
    base.reference, base.probes = reference, probes
    checks = [base]
    if judges:
        verdict = (declaration.judge_verdict if declaration else None) or DEFAULT_RULING
        quoting = copy.deepcopy(config)
        from gym_core.redteam.judge import QUOTING_JUDGE

        for judge in judges:
            quoting[judge] = {"plugin": QUOTING_JUDGE, "verdict": verdict}
        checks.append(Check(name, quoting, agent, resources, environment, picked, best, "quoting", reference, probes))
    return checks


def checks_of_directory(
    directory: Path, plugins: PluginManager, declarations: Mapping[str, RedteamDeclaration], *, count: int = 4
) -> list[Check]:
    """The checks of a first-party environment (a directory under ``plugins/resources``): the setup of
    its example rollouts, on its ``data/example.jsonl``."""
    from gym_cli.example_rollouts import EXAMPLES, setup_config, setup_of

    config = setup_config(directory, setup_of(directory), plugins)
    return checks_of_config(directory.name, config, read_rows(directory / EXAMPLES), plugins, declarations, count=count)


# --- running -----------------------------------------------------------------------------------------


def _task(row: Mapping[str, Any], turns: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    from gym_cli.example_rollouts import scripted_task

    return scripted_task(row, turns)


def _verify_body(row: Mapping[str, Any], text: str) -> bytes:
    from gym_core.schemas import Message, OutputText, Response

    message = Message(role="assistant", id="msg_redteam", status="completed", content=[OutputText(text=text)])
    body = {k: v for k, v in row.items() if k != "conformance"}
    body["response"] = msgspec.to_builtins(Response(model="redteam", output=[message]))
    return msgspec.json.encode(body)


class _Refused(Exception):
    def __init__(self, status: int | None, detail: str):
        super().__init__(detail)
        self.status = status
        self.detail = detail


async def _rollout(
    client: ServerClient, check: Check, row: Mapping[str, Any], turns: Sequence[Mapping[str, Any]]
) -> float:
    try:
        raw = await client.request("POST", check.agent, "/run", body=_task(row, turns))
    except ServerCallError as exc:
        raise _Refused(exc.status, str(exc)) from None
    return float(msgspec.json.decode(raw)["reward"])


async def _session_trick(client: ServerClient, check: Check, target: Target, attack: Attack) -> float:
    from gym_core.sessions import cookie_name_for

    cookies: dict[str, str] = {}
    row = {k: v for k, v in target.row.items()}
    try:
        await client.request("POST", check.resources, "/seed_session", body=row, cookies=cookies)
        for call in target.tool_calls:
            try:
                await client.request(
                    "POST", check.resources, f"/tools/{call['name']}", body=call.get("arguments") or {}, cookies=cookies
                )
            except ServerCallError:
                pass  # a solving call the environment refuses here changes nothing the trick needs
        if attack.session == "forged_cookie":
            # The session's own id with its signature altered; an id of zeros where none was set.
            name = cookie_name_for(check.resources)
            session_id, _, mac = cookies.get(name, f"{'0' * 32}.{'0' * 32}").partition(".")
            cookies[name] = f"{session_id}.{'1' if mac[:1] == '0' else '0'}{mac[1:]}"
        else:
            await client.request("POST", check.resources, "/close_session", body={}, cookies=cookies)
        text = next((t["text"] for t in reversed(attack.turns) if isinstance(t.get("text"), str)), HONEST_FAILURE)
        raw = await client.request("POST", check.resources, "/verify", body=_verify_body(row, text), cookies=cookies)
    except ServerCallError as exc:
        raise _Refused(exc.status, str(exc)) from None
    return float(msgspec.json.decode(raw)["reward"])


async def _play(
    client: ServerClient,
    check: Check,
    index: int,
    target: Target,
    probe: Probe,
    baseline: float,
    threshold: float,
    controls: dict[str, asyncio.Task[float | None]],
) -> ProbeResult | None:
    attack = probe.build(target)
    if attack is None:
        return None
    if attack.control is not None:
        if attack.control not in controls:  # each control text is played once per task
            controls[attack.control] = asyncio.ensure_future(_control(client, check, target, attack.control))
        control = await controls[attack.control]
        baseline = max(baseline, control if control is not None else baseline)
    result = ProbeResult(check.label, probe.name, probe.family, index, None, baseline, ROBUST)
    try:
        if attack.session is not None:
            result.reward = await _session_trick(client, check, target, attack)
        else:
            result.reward = await _rollout(client, check, target.row, attack.turns)
    except _Refused as refused:
        result.status, result.detail = refused.status, refused.detail[:500]
        if refused.status is None or refused.status >= 500:
            result.verdict = ERROR
        return result
    if result.reward > allowed(baseline, check.best_reward, attack) + threshold:
        result.verdict = GAMEABLE
    return result


async def _control(client: ServerClient, check: Check, target: Target, text: str) -> float | None:
    """The reward of an attack's control answer; None when it got none (the honest failure then stands)."""
    try:
        return await _rollout(client, check, target.row, [{"text": text}])
    except _Refused:
        return None


def allowed(baseline: float, best: float | None, attack: Attack) -> float:
    """The most an attack may score and stay robust: the honest failure's reward, or for a hedge
    over k answers what one guess among them earns in expectation (1/k of the way to ``best``)."""
    if attack.candidates <= 1 or best is None or best <= baseline:
        return baseline
    return baseline + (best - baseline) / attack.candidates


async def _run(
    global_config: GlobalConfig, check: Check, threshold: float, parallel: int
) -> tuple[list[ProbeResult], list[str]]:
    from gym_core.client import ServerClient
    from gym_core.options import ClientConfig

    results: list[ProbeResult] = []
    problems: list[str] = []
    slots = asyncio.Semaphore(parallel)
    async with ServerClient(
        global_config, config=ClientConfig(timeout_s=120.0, max_attempts=1, deadline_s=120.0)
    ) as client:

        async def one_row(index: int, row: dict[str, Any]) -> None:
            target = target_of(check.environment, row, best_reward=check.best_reward, judged=check.judge is not None)
            try:
                async with slots:
                    baseline = await _rollout(client, check, target.row, [{"text": HONEST_FAILURE}])
            except _Refused as refused:
                if refused.status is None or refused.status >= 500:
                    problems.append(f"{check.label}: task {index}: the honest failure failed: {refused.detail[:300]}")
                    return
                # An environment that refuses an answer it cannot read (a game wanting a move) gives
                # the honest failure nothing: any reward a probe gets is more than it.
                baseline = 0.0

            controls: dict[str, asyncio.Task[float | None]] = {}

            async def bounded(probe: Probe) -> ProbeResult | None:
                async with slots:
                    return await _play(client, check, index, target, probe, baseline, threshold, controls)

            probes = [p for p in check.probes if not (p.hedge and check.judge is not None)]
            for result in await asyncio.gather(*(bounded(p) for p in probes)):
                if result is not None:
                    results.append(result)

        await asyncio.gather(*(one_row(i, row) for i, row in check.rows))
    return results, problems


class MarkerRecorder:
    """An ASGI app in front of the environment's own: it records each request whose JSON body holds
    :data:`~gym_core.redteam.MARKER_KEY` at the top level (a model's tool-call arguments, forwarded),
    as ``(marker value, path)`` in :attr:`seen`, and passes every request on unchanged."""

    def __init__(self, app: Any):
        self.app = app
        self.seen: set[tuple[str, str]] = set()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        messages = []
        while True:
            message = await receive()
            messages.append(message)
            if message["type"] != "http.request" or not message.get("more_body", False):
                break
        body = b"".join(m.get("body", b"") for m in messages if m["type"] == "http.request")
        if MARKER_KEY.encode() in body:
            try:
                value = msgspec.json.decode(body)
            except msgspec.DecodeError:
                value = None
            if isinstance(value, dict) and isinstance(value.get(MARKER_KEY), str):
                self.seen.add((value[MARKER_KEY], scope["path"]))
        pending = iter(messages)

        async def replay() -> Any:
            return next(pending, None) or await receive()

        await self.app(scope, replay, send)


def run_check(
    check: Check, plugins: PluginManager, *, threshold: float = 0.0, parallel: int = 8
) -> tuple[list[ProbeResult], list[str]]:
    """Play every probe of ``check`` on its rows, on its servers started here; the results, and the
    problems that kept a task from being probed (its honest failure was not scored). A probe whose
    marked call reached the environment (:class:`MarkerRecorder`) is gameable whatever it scored."""
    from gym_cli.example_rollouts import serving
    from gym_cli.rollouts import run_async

    recorders: list[MarkerRecorder] = []

    def wrap(name: str, app: Any) -> Any:
        if name != check.resources:
            return app
        recorders.append(MarkerRecorder(app))
        return recorders[-1]

    with serving(check.config, plugins, wrap) as global_config:
        results, problems = run_async(_run(global_config, check, threshold, parallel))
    reached = {(marker, path) for recorder in recorders for marker, path in recorder.seen}
    for result in results:
        paths = sorted(path for marker, path in reached if marker == result.probe)
        if paths:
            result.verdict = GAMEABLE
            result.detail = f"the model's call reached the environment: {', '.join(paths)}"
    return results, problems


def summarise(check: Check, results: Sequence[ProbeResult]) -> list[Summary]:
    """One row per probe that applied: its highest reward, over the tasks, and the worst verdict."""
    rank = {ROBUST: 0, ERROR: 1, GAMEABLE: 2}
    by_probe: dict[str, list[ProbeResult]] = {}
    for result in results:
        by_probe.setdefault(result.probe, []).append(result)
    order = {p.name: i for i, p in enumerate(check.probes)}
    summaries = []
    for name in sorted(by_probe, key=lambda n: order.get(n, len(order))):
        group = by_probe[name]
        worst = max(group, key=lambda r: (rank[r.verdict], (r.reward or 0.0) - r.baseline))
        rewards = [r.reward for r in group if r.reward is not None]
        summaries.append(
            Summary(
                environment=check.label,
                probe=name,
                family=group[0].family,
                tasks=len(group),
                reward=max(rewards) if rewards else None,
                baseline=worst.baseline,
                verdict=worst.verdict,
                reference=check.reference,
                details=[f"task {r.task_index}: {r.detail}" for r in group if r.detail],
            )
        )
    return summaries
