"""Example rollouts: each environment's ``data/example_rollouts.jsonl``, a few scored rows a reader can
open to see what ``gym collect`` writes for it (the shape :mod:`gym_core.rows` builds).

``gym examples rollouts [NAME...]`` writes them; a test checks that each committed file is what the
command writes now. For one environment (a directory under ``plugins/resources``):

- the servers of its scripted setup (:func:`setup_of`) run in this process, every model a ``scripted``
  one: no network, no weights, the same answers every time;
- each task of ``data/example.jsonl`` whose ``conformance`` field can be said by the scripted model
  (:func:`script_of`) is sent once, with that script in ``responses_create_params.metadata
  .scripted_turns`` (the row shows it) and without its ``conformance`` field; ``task_index`` is the
  task's line in ``data/example.jsonl``, counted from 0;
- the rows are collected by ``gym collect``'s own code (:func:`gym_cli.rollouts.collect_rollouts`),
  sorted by task, and made reproducible (:func:`fixed`): every generated id (``msg_``, ``fc_``,
  ``call_``... and 32 hex digits) is renumbered in order of appearance, the same id keeping the same
  number within a row; timestamps (``created_at``, ``created``) are 0, and ``latency_s`` and an
  environment's own timings (``code_gen``'s ``unit_tests_time_taken``) are 0.0. Everything else is
  as collected.

A rollout that fails fails the command: an example file holds every row it should.
"""

from __future__ import annotations

import contextlib
import copy
import json
import re
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from gym_core.errors import GymError
from gym_core.rows import LATENCY_FIELD

if TYPE_CHECKING:
    from gym_core.config import GlobalConfig
    from gym_core.plugins import PluginManager

__all__ = [
    "EXAMPLES",
    "EXAMPLE_ROLLOUTS",
    "COMMAND",
    "DONE",
    "Setup",
    "SETUPS",
    "environment_directories",
    "setup_of",
    "setup_config",
    "serving",
    "script_of",
    "scripted_task",
    "fixed",
    "example_rollouts",
    "render",
]

EXAMPLES = Path("data") / "example.jsonl"
EXAMPLE_ROLLOUTS = Path("data") / "example_rollouts.jsonl"
# The command that writes the files (what a stale file's test failure says to run).
COMMAND = "uv run gym examples rollouts"
# What the scripted model says after a script whose last turn calls tools, so that an agent that
# executes the calls and asks again gets an answer that ends the rollout.
DONE = "Done."


@dataclass(frozen=True)
class Setup:
    """How an environment's example rollouts are collected: ``configs`` (paths relative to its
    directory, merged in order), then ``replace`` (instances replaced whole) and ``options`` (merged
    into instances); every other model instance that is not ``scripted`` is replaced by a
    ``scripted`` one. ``timings``: the verdict's fields that measure time (dotted paths), written 0.0."""

    configs: tuple[str, ...]
    replace: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    options: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    timings: tuple[str, ...] = ()


# The environments whose setup is not the rule of :func:`setup_of`.
SETUPS: dict[str, Setup] = {
    "code_gen": Setup(
        ("configs/code_gen_scripted.yaml",), timings=("unit_tests_time_taken", "metadata.execution time")
    ),
    # The GenRM: genrm_model in front of a scripted model. One rollout per prompt: each verify answers
    # the default score at once (a cohort of several would hold each verify until its siblings
    # arrive, and score them by their order of arrival).
    "genrm_compare": Setup(
        ("configs/genrm_compare.yaml",),
        replace={
            "genrm": {"plugin": "genrm_model", "upstream_model_server": "genrm_upstream"},
            "genrm_upstream": {
                "plugin": "scripted",
                "turns": [{"text": '```json\n{"score_1": 4, "score_2": 3, "ranking": 2}\n```'}],
            },
        },
        options={"genrm_compare": {"num_rollouts_per_prompt": 1}},
    ),
    # The environment and its scripted judge, and the scripted policy.
    "text_to_sql": Setup(("configs/text_to_sql_bench.yaml", "configs/text_to_sql_scripted.yaml")),
    # The plugin's example data is bird_sql's.
    "sql": Setup(("configs/bird_sql.yaml",)),
    # The example tasks are played on slippery ice (their prompt says so), the environment's default;
    # the config's FrozenLake is not slippery.
    "gymnasium_text": Setup(("configs/gymnasium_text.yaml",), options={"frozen_lake": {"env_kwargs": {}}}),
}


def environment_directories(root: Path) -> list[Path]:
    """The environments of the workspace at ``root``: each directory under ``plugins/resources``
    with a ``data/example.jsonl``, by name."""
    return sorted(p for p in (root / "plugins" / "resources").iterdir() if (p / EXAMPLES).is_file())


def setup_of(directory: Path) -> Setup:
    """The environment's entry of :data:`SETUPS`; else its ``configs/<name>_scripted.yaml``; else its
    ``configs/<name>.yaml``."""
    name = directory.name
    if name in SETUPS:
        return SETUPS[name]
    scripted = Path("configs") / f"{name}_scripted.yaml"
    return Setup((str(scripted if (directory / scripted).is_file() else Path("configs") / f"{name}.yaml"),))


def setup_config(directory: Path, setup: Setup, plugins: PluginManager) -> dict[str, Any]:
    """The setup's config as one dict, its replacements and options applied."""
    import yaml

    config: dict[str, Any] = {}
    for path in setup.configs:
        loaded = yaml.safe_load((directory / path).read_text()) or {}
        for key, value in loaded.items():
            if isinstance(value, dict) and isinstance(config.get(key), dict):
                config[key] = {**config[key], **value}
            else:
                config[key] = value
    for instance, options in config.items():
        if _kind(plugins, options) == "model" and options["plugin"] != "scripted":
            config[instance] = {"plugin": "scripted"}
    config.update((name, dict(replacement)) for name, replacement in setup.replace.items())
    for name, options in setup.options.items():
        config[name] = {**config[name], **options}
    return config


def _kind(plugins: PluginManager, options: Any) -> str | None:
    """The kind of server a config entry runs (``model``, ``resources``, ``agent``), or None."""
    plugin = options.get("plugin") if isinstance(options, dict) else None
    server_type = plugins.servers().get(plugin) if isinstance(plugin, str) else None
    return server_type.kind if server_type is not None else None


def _arguments(text: Any) -> dict[str, Any] | None:
    """A function call's arguments as the scripted model takes them (an object), or None."""
    try:
        value = json.loads(text) if isinstance(text, str) else text
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _turns_of_response(response: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    """The scripted turns that produce ``response``'s output (a function call's output ends a turn),
    or None when the scripted model cannot say some of it (reasoning, a refusal, several text parts,
    arguments that are not a JSON object)."""
    turns: list[dict[str, Any]] = []
    turn: dict[str, Any] | None = None
    for item in response.get("output") or ():
        kind = item.get("type") if isinstance(item, dict) else None
        if kind == "function_call_output":
            turn = None
            continue
        if turn is None:
            turn = {}
            turns.append(turn)
        if kind == "function_call":
            arguments = _arguments(item.get("arguments"))
            if arguments is None or not isinstance(item.get("name"), str):
                return None
            turn.setdefault("tool_calls", []).append({"name": item["name"], "arguments": arguments})
        elif kind == "message" and item.get("role", "assistant") == "assistant":
            parts = item.get("content")
            if "text" in turn or "tool_calls" in turn or not isinstance(parts, list) or len(parts) != 1:
                return None
            if not (isinstance(parts[0], dict) and parts[0].get("type") == "output_text"):
                return None
            turn["text"] = parts[0].get("text", "")
        else:
            return None
    return turns or None


def script_of(row: Mapping[str, Any], *, gymnasium: bool = False) -> list[dict[str, Any]] | None:
    """The scripted model's turns for a task, from its ``conformance`` field, or None when it has
    none the scripted model can say:

    - for the ``gymnasium`` agent, one ``<action>NAME</action>`` turn per ``conformance.tool_calls``
      ``act`` call;
    - else, when ``conformance.response`` is a Responses object: the turns producing its output;
    - else, one turn per ``conformance.tool_calls`` call, then ``conformance.response`` (text) as the
      last turn, or :data:`DONE` when it has none.

    A script whose last turn calls tools ends with :data:`DONE` too."""
    spec = row.get("conformance")
    if not isinstance(spec, Mapping):
        return None
    calls = spec.get("tool_calls") or []
    response = spec.get("response")
    if gymnasium:
        actions = [call.get("arguments", {}).get("action") for call in calls if call.get("name") == "act"]
        if not actions or len(actions) != len(calls) or not all(isinstance(a, str) for a in actions):
            return None
        return [{"text": f"<action>{action}</action>"} for action in actions]
    turns: list[dict[str, Any]] | None
    if isinstance(response, Mapping):
        turns = _turns_of_response(response)
        if turns is None:
            return None
    elif response is None or isinstance(response, str):
        turns = [{"tool_calls": [{"name": c["name"], "arguments": dict(c.get("arguments") or {})}]} for c in calls]
        turns.append({"text": DONE if response is None else response})
    else:
        return None
    if "tool_calls" in turns[-1]:
        turns.append({"text": DONE})
    return turns


def _model_turns_in(params: Mapping[str, Any]) -> int:
    """How many model turns a task's input already holds: runs of assistant messages, function calls
    and reasoning (what the scripted model counts to choose its turn)."""
    items = params.get("input")
    if not isinstance(items, list):
        return 0
    turns, in_turn = 0, False
    for item in items:
        generated = isinstance(item, dict) and (
            item.get("type") in ("function_call", "reasoning") or item.get("role") == "assistant"
        )
        turns += generated and not in_turn
        in_turn = generated
    return turns


def scripted_task(row: Mapping[str, Any], turns: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The task as sent: ``row`` without its ``conformance`` field, the script in its
    ``responses_create_params.metadata.scripted_turns`` (a JSON string, as metadata values are). The
    scripted model answers a request with the turn whose index is the number of model turns in its
    input, so the script starts with one empty turn (``{}``, never answered) per model turn the
    task's input already holds (a conversation's history, few-shot answers)."""
    task = {k: copy.deepcopy(v) for k, v in row.items() if k != "conformance"}
    params = task["responses_create_params"]
    script = [{}] * _model_turns_in(params) + list(turns)
    params["metadata"] = {**(params.get("metadata") or {}), "scripted_turns": json.dumps(script)}
    return task


# An id as gym_core.schemas.new_id makes them: a prefix and 128 random bits in hex.
_ID = re.compile(r"\b([a-z]+)_([0-9a-f]{32})\b")
_TIMESTAMPS = frozenset({"created_at", "created"})
QUEUE_FIELD = "queue_s"


def fixed(row: dict[str, Any], timings: Sequence[str] = ()) -> dict[str, Any]:
    """``row`` made reproducible: each generated id renumbered (``msg_000…01``, in order of first
    appearance, the same id the same number wherever it occurs in the row, inside strings too),
    ``created_at`` and ``created`` 0, ``latency_s`` and the fields named in ``timings`` (dotted
    paths) 0.0 where the row has them, ``queue_s`` left out."""
    numbers: dict[str, int] = {}

    def renumber(match: re.Match[str]) -> str:
        number = numbers.setdefault(match.group(0), len(numbers) + 1)
        return f"{match.group(1)}_{number:032x}"

    def walk(value: Any, key: str | None = None) -> Any:
        if isinstance(value, dict):
            return {k: walk(v, k) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v) for v in value]
        if isinstance(value, str):
            return _ID.sub(renumber, value)
        if key in _TIMESTAMPS and isinstance(value, (int, float)) and not isinstance(value, bool):
            return type(value)(0)
        return value

    new = walk(row)
    for path in (LATENCY_FIELD, *timings):
        *parents, last = path.split(".")
        holder: Any = new
        for key in parents:
            holder = holder.get(key) if isinstance(holder, dict) else None
        if isinstance(holder, dict) and isinstance(holder.get(last), (int, float)):
            holder[last] = 0.0
    new.pop(QUEUE_FIELD, None)  # the collector's wait for a slot: only rows that waited have it
    return new


def render(rows: Sequence[Mapping[str, Any]]) -> str:
    """The file's text: one row per line, as ``gym collect`` writes them (compact JSON)."""
    return "".join(msgspec.json.encode(row).decode() + "\n" for row in rows)


@contextlib.contextmanager
def serving(
    config: dict[str, Any], plugins: PluginManager, wrap: Callable[[str, Any], Any] | None = None
) -> Iterator[GlobalConfig]:
    """A head server and every instance of ``config`` on loopback, in threads of this process;
    ``wrap(name, app)``, when given, is served in place of each instance's ASGI app."""
    from gym_core.config import load_config
    from gym_core.head import build_head_app
    from gym_core.serving import ServerThread, build_server

    global_config = load_config(
        base={"head_server": {"port": 0}, **config},
        env_file=None,
        server_types=plugins.servers(),
        load_errors=plugins.load_errors,
    )
    threads = [ServerThread(build_head_app(global_config), port=global_config.head_port).start()]
    try:
        for name, instance in global_config.instances.items():
            server = build_server(global_config, name, plugins)
            app = server.build_app() if wrap is None else wrap(name, server.build_app())
            threads.append(ServerThread(app, instance.host, instance.port).start())
        yield global_config
    finally:
        for thread in reversed(threads):
            thread.stop()


async def _collect(
    global_config: GlobalConfig, agent: str, tasks: list[dict[str, Any]], indices: list[int], work: Path
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    from gym_core.client import ServerClient
    from gym_core.options import ClientConfig

    from gym_cli.rollouts import CollectOptions, CollectSummary, collect_rollouts

    options = CollectOptions(
        work / "rollouts.jsonl", work / "failures.jsonl", agent=agent, parallel=4, retries=0, rollout_timeout_s=300.0
    )
    client_config = ClientConfig(
        timeout_s=options.rollout_timeout_s, max_attempts=1, deadline_s=options.rollout_timeout_s
    )
    async with ServerClient(global_config, config=client_config) as client:
        await collect_rollouts(client, tasks, [(i, 0) for i in indices], options, CollectSummary(total=len(indices)))

    def read(path: Path) -> list[dict[str, Any]]:
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []

    return read(options.output), read(options.failures)


def example_rollouts(directory: Path, plugins: PluginManager | None = None) -> list[dict[str, Any]]:
    """The example rollouts of the environment in ``directory``, as its file holds them. A
    :class:`~gym_core.errors.GymError` naming the rollouts that failed, or the reason none could run."""
    from gym_core.plugins import get_plugin_manager

    from gym_cli.rollouts import run_async

    plugins = plugins or get_plugin_manager()
    setup = setup_of(directory)
    config = setup_config(directory, setup, plugins)
    agents = [name for name, options in config.items() if _kind(plugins, options) == "agent"]
    if len(agents) != 1:
        raise GymError(f"{directory.name}: its scripted setup must run one agent, it runs {len(agents)}")
    gymnasium = config[agents[0]]["plugin"] == "gymnasium"
    rows = [json.loads(line) for line in (directory / EXAMPLES).read_text().splitlines() if line.strip()]
    tasks: list[dict[str, Any]] = []
    indices: list[int] = []
    for index, row in enumerate(rows):
        turns = script_of(row, gymnasium=gymnasium)
        tasks.append(row if turns is None else scripted_task(row, turns))
        if turns is not None:
            indices.append(index)
    if not indices:
        raise GymError(f"{directory.name}: no task of {EXAMPLES} has a conformance field the scripted model can say")
    with tempfile.TemporaryDirectory(prefix="gym-examples-") as work, serving(config, plugins) as global_config:
        done, failed = run_async(_collect(global_config, agents[0], tasks, indices, Path(work)))
    if failed:
        reasons = "; ".join(
            f"task {f['task_index']}: {f.get('reason')}: {str(f.get('message', ''))[:300]}" for f in failed
        )
        raise GymError(f"{directory.name}: {len(failed)} example rollout(s) failed: {reasons}")
    return [fixed(row, setup.timings) for row in sorted(done, key=lambda r: (r["task_index"], r["rollout_index"]))]
