"""Importing a dataset as an environment's task rows, each row checked by the environment first.

``gym data import`` reads a source (:func:`read_source`: JSONL, a Parquet file, or a Hugging Face
``datasets`` directory written by ``save_to_disk``), builds each row from a :class:`ColumnMapping` of row
fields to source columns, and checks every row on the environment's own servers, started in this
process on loopback with every model scripted (the setup of its example rollouts), before any model
sees it (:func:`check_rows`):

1. the row is built: a column it maps that is missing or null rejects it; a row without
   ``responses_create_params.input`` is rejected (an agent has nothing to send);
2. ``POST /seed_session`` with the row: a refusal rejects it, with the server's status and reason;
3. where the environment can score a reference answer without a model (:data:`REFERENCE_ANSWERS`,
   or a template given), ``POST /verify`` with that answer as the response: a reward other than 1
   rejects the row (its reference answer is one the environment does not accept);
4. ``POST /close_session``.
"""

from __future__ import annotations

import asyncio
import copy
import json
import string
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from gym_core.errors import GymError, ServerCallError, did_you_mean

if TYPE_CHECKING:
    from gym_core.client import ServerClient
    from gym_core.plugins import PluginManager

__all__ = [
    "INPUT_FIELD",
    "REFERENCE_ANSWERS",
    "ColumnMapping",
    "SourceRow",
    "Rejection",
    "ImportReport",
    "read_source",
    "source_columns",
    "parse_assignments",
    "answer_template",
    "check_columns",
    "environment_config",
    "build_row",
    "check_rows",
    "import_rows",
]

# The mapped field that is the prompt: a string becomes one user message, a list is the messages.
INPUT_FIELD = "input"


def _text(row: dict[str, Any], name: str = "expected_answer") -> str:
    value = row.get(name)
    if value is None:
        raise GymError(f"no {name}: the reference answer is made from it")
    return value if isinstance(value, str) else json.dumps(value)


def _mcqa_answer(row: dict[str, Any]) -> str:
    # The gold is the field uppercased; the letter after "Answer:" serves lenient_answer_colon, the
    # last box the strict and lenient boxed modes.
    letter = _text(row).strip().upper()
    return f"Answer: {letter}\n\\boxed{{{letter}}}"


def _string_match_answer(row: dict[str, Any]) -> str:
    expected = _text(row)
    mode = row.get("extraction_mode") or "final_answer"
    if mode == "boxed":
        return f"\\boxed{{{expected}}}"
    if mode == "final_answer":
        return f"Answer: {expected}"
    return expected  # last_line, full_response


# What each first-party environment scores 1 when the row's reference answer is right, made from the
# row; environments not listed are seeded, not verified (--reference-answer gives one).
REFERENCE_ANSWERS: dict[str, Callable[[dict[str, Any]], str]] = {
    "math": lambda row: f"\\boxed{{{_text(row)}}}",
    "mcqa": _mcqa_answer,
    "equivalence_rule": _text,
    "string_match": _string_match_answer,
}


def answer_template(template: str) -> Callable[[dict[str, Any]], str]:
    """A ``--reference-answer`` template (``$FIELD`` for the row's top-level fields) as a function of the row."""
    parsed = string.Template(template)
    if not parsed.is_valid():
        raise GymError(f"--reference-answer {template!r}: a $ that starts no $FIELD (write $$ for a dollar sign)")

    def answer(row: dict[str, Any]) -> str:
        try:
            return parsed.substitute({k: v if isinstance(v, str) else json.dumps(v) for k, v in row.items()})
        except KeyError as exc:
            raise GymError(f"the reference answer {template!r} needs field {exc}, which the row lacks") from None
        except ValueError as exc:
            raise GymError(f"the reference answer {template!r}: {exc}") from None

    return answer


@dataclass(frozen=True)
class SourceRow:
    """One record of the source: ``number`` is its line in a JSONL file, else its row counted from 1;
    ``error`` says why it could not be read (a JSONL line that is not a JSON object)."""

    number: int
    values: dict[str, Any]
    error: str | None = None


@dataclass(frozen=True)
class ColumnMapping:
    """How a row is built: ``columns`` (row field, dotted for nested ones -> source column), ``constants``
    (row field -> value), ``system`` (a system message put before the prompt). With no columns,
    every source column becomes the row field of its name."""

    columns: dict[str, str] = field(default_factory=dict)
    constants: dict[str, Any] = field(default_factory=dict)
    system: str | None = None


@dataclass(frozen=True)
class Rejection:
    number: int
    reason: str
    row: dict[str, Any] | None


@dataclass
class ImportReport:
    accepted: list[dict[str, Any]] = field(default_factory=list)
    rejected: list[Rejection] = field(default_factory=list)
    verified: bool = False

    @property
    def read(self) -> int:
        return len(self.accepted) + len(self.rejected)


# --- reading -----------------------------------------------------------------------------------------


def _needs_datasets(what: str) -> GymError:
    return GymError(
        f"reading {what} needs Hugging Face datasets (with pyarrow), which is not installed: "
        "pip install 'gym-cli[export]' (or convert it to JSONL, which needs nothing)"
    )


def _load_dataset_dir(path: Path, split: str | None) -> Any:
    try:
        import datasets
    except ImportError:
        raise _needs_datasets("a datasets directory") from None
    datasets.disable_progress_bars()
    try:
        loaded = datasets.load_from_disk(str(path))
    except (FileNotFoundError, ValueError) as exc:
        raise GymError(f"{path}: not a dataset saved with save_to_disk: {exc}") from None
    if isinstance(loaded, datasets.DatasetDict):
        splits = [str(name) for name in loaded]
        if split is None:
            if len(splits) != 1:
                raise GymError(f"{path} holds splits {', '.join(splits)}: choose one with --split")
            split = splits[0]
        if split not in loaded:
            raise GymError(f"{path} has no split {split!r}{did_you_mean(split, splits)}; it has {', '.join(splits)}")
        return loaded[split]
    if split is not None:
        raise GymError(f"{path} is one dataset without splits: leave out --split")
    return loaded


def source_columns(path: Path, split: str | None = None) -> list[str] | None:
    """The source's column names where it declares them (Parquet, datasets), else None (JSONL: each
    line has its own keys)."""
    if path.is_dir():
        return list(_load_dataset_dir(path, split).column_names)
    if path.suffix == ".parquet":
        try:
            import pyarrow.parquet as pq
        except ImportError:
            raise _needs_datasets("Parquet") from None
        return list(pq.read_schema(path).names)
    return None


def read_source(path: Path, split: str | None = None) -> Iterator[SourceRow]:
    """The records of ``path``: a directory is a ``datasets`` dataset (``split``: which of its splits),
    ``*.parquet`` a Parquet file, anything else JSONL (blank lines skipped, numbered by line)."""
    if path.is_dir():
        for number, record in enumerate(_load_dataset_dir(path, split), start=1):
            yield SourceRow(number, dict(record))
        return
    if split is not None:
        raise GymError("--split applies to a datasets directory only")
    if path.suffix == ".parquet":
        try:
            import pyarrow.parquet as pq
        except ImportError:
            raise _needs_datasets("Parquet") from None
        number = 0
        for batch in pq.ParquetFile(path).iter_batches():
            for record in batch.to_pylist():
                number += 1
                yield SourceRow(number, record)
        return
    with path.open(encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                value = json.loads(line)
            except ValueError as exc:
                yield SourceRow(number, {}, f"not JSON: {exc}")
                continue
            if not isinstance(value, dict):
                yield SourceRow(number, {}, f"a JSON {type(value).__name__}, not an object")
                continue
            yield SourceRow(number, value)


# --- mapping -----------------------------------------------------------------------------------------


def parse_assignments(items: Sequence[str], option: str, *, json_values: bool = False) -> dict[str, Any]:
    """``FIELD=VALUE`` options as a dict; with ``json_values`` a value that parses as JSON is that value."""
    parsed: dict[str, Any] = {}
    for item in items:
        name, sep, value = item.partition("=")
        name = name.strip()
        if not sep or not name or (not json_values and not value.strip()):
            raise GymError(f"{option} {item!r}: expected FIELD=VALUE")
        if name in parsed:
            raise GymError(f"{option}: field {name!r} given twice")
        if json_values:
            try:
                parsed[name] = json.loads(value)
            except ValueError:
                parsed[name] = value
        else:
            parsed[name] = value.strip()
    return parsed


def check_columns(mapping: ColumnMapping, columns: Sequence[str], where: str) -> None:
    """A :class:`~gym_core.errors.GymError` naming a mapped column ``columns`` lacks, with the closest one."""
    for target, column in mapping.columns.items():
        if column not in columns:
            raise GymError(
                f"--map {target}={column}: {where} has no column {column!r}{did_you_mean(column, columns)}; "
                f"its columns: {', '.join(columns)}"
            )


def _set(row: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, last = dotted.split(".")
    holder = row
    for key in parents:
        holder = holder.setdefault(key, {})
        if not isinstance(holder, dict):
            raise GymError(f"field {dotted!r}: {key!r} is not an object")
    holder[last] = value


def build_row(record: SourceRow, mapping: ColumnMapping) -> dict[str, Any]:
    """The task row of one record; a :class:`~gym_core.errors.GymError` says why it cannot be built."""
    if record.error is not None:
        raise GymError(record.error)
    if not mapping.columns:
        row = copy.deepcopy(record.values)
    else:
        row = {}
        for target, column in mapping.columns.items():
            if column not in record.values:
                raise GymError(f"no column {column!r} (for {target}){did_you_mean(column, record.values)}")
            value = record.values[column]
            if value is None:
                raise GymError(f"column {column!r} (for {target}) is null")
            if target == INPUT_FIELD:
                if isinstance(value, str):
                    value = [{"role": "user", "content": value}]
                elif not isinstance(value, list):
                    raise GymError(f"column {column!r} (for input) is a {type(value).__name__}: a string or messages")
                target = "responses_create_params.input"
            _set(row, target, copy.deepcopy(value))
    for target, value in mapping.constants.items():
        _set(row, target, copy.deepcopy(value))
    params = row.get("responses_create_params")
    if not isinstance(params, dict) or not params.get("input"):
        raise GymError("no prompt: the row has no responses_create_params.input (map one: --map input=COLUMN)")
    if mapping.system is not None:
        messages = params["input"]
        if isinstance(messages, str):
            messages = [{"role": "user", "content": messages}]
        params["input"] = [{"role": "system", "content": mapping.system}, *messages]
    return row


# --- checking ----------------------------------------------------------------------------------------


def _verify_body(row: dict[str, Any], text: str) -> bytes:
    from gym_core.schemas import Message, OutputText, Response

    message = Message(role="assistant", id="msg_import", status="completed", content=[OutputText(text=text)])
    return msgspec.json.encode({**row, "response": msgspec.to_builtins(Response(model="import", output=[message]))})


def _refusal(path: str, exc: ServerCallError) -> str:
    if exc.status is not None:
        return f"{path} answered {exc.status}: {exc.detail}"
    return f"{path} failed: {exc.detail}"


async def _check(
    client: ServerClient, resources: str, row: dict[str, Any], answer: Callable[[dict[str, Any]], str] | None
) -> None:
    cookies: dict[str, str] = {}
    try:
        await client.request("POST", resources, "/seed_session", body=row, cookies=cookies)
    except ServerCallError as exc:
        raise GymError(_refusal("seed_session", exc)) from None
    try:
        if answer is None:
            return
        text = answer(row)
        try:
            raw = await client.request("POST", resources, "/verify", body=_verify_body(row, text), cookies=cookies)
        except ServerCallError as exc:
            raise GymError(_refusal("verify", exc)) from None
        verdict = msgspec.json.decode(raw)
        reward = verdict.get("reward") if isinstance(verdict, dict) else None
        if reward != 1:
            extracted = verdict.get("extracted_answer", "")
            extracted = (
                ", nothing extracted" if extracted is None else f", extracted {extracted!r}" if extracted else ""
            )
            raise GymError(f"its reference answer {text!r} scored reward {reward} (expected 1{extracted})")
    finally:
        try:
            await client.request("POST", resources, "/close_session", body={}, cookies=cookies)
        except ServerCallError:
            pass  # the verdict is known; an environment without sessions to close changes nothing


async def check_rows(
    client: ServerClient,
    resources: str,
    records: Sequence[SourceRow],
    mapping: ColumnMapping,
    answer: Callable[[dict[str, Any]], str] | None,
    *,
    parallel: int = 8,
) -> ImportReport:
    """Build and check every record (at most ``parallel`` at once); rows keep the source's order."""
    limit = asyncio.Semaphore(parallel)
    outcomes: list[dict[str, Any] | Rejection] = []

    async def one(record: SourceRow) -> dict[str, Any] | Rejection:
        row: dict[str, Any] | None = None
        try:
            row = build_row(record, mapping)
            async with limit:
                await _check(client, resources, row, answer)
        except GymError as exc:
            return Rejection(record.number, str(exc), row if row is not None else record.values or None)
        return row

    outcomes = await asyncio.gather(*(one(r) for r in records))
    report = ImportReport(verified=answer is not None)
    for outcome in outcomes:
        if isinstance(outcome, Rejection):
            report.rejected.append(outcome)
        else:
            report.accepted.append(outcome)
    return report


def environment_config(
    path: Path, plugins: PluginManager, *, config_file: bool = False
) -> tuple[dict[str, Any], str, str]:
    """An environment's servers, every model among them ``scripted`` (no weights, no network), its
    resources server's instance name and its plugin. ``path``: a directory under
    ``plugins/resources`` (the setup of its example rollouts), or with ``config_file`` a config of
    any environment: one resources server, or one agent naming its ``resources_server``."""
    from gym_cli.example_rollouts import Setup, setup_config, setup_of

    setup = Setup((path.name,)) if config_file else setup_of(path)
    config = setup_config(path.parent if config_file else path, setup, plugins)
    servers = plugins.servers()

    def of_kind(kind: str) -> list[str]:
        return [
            name
            for name, options in config.items()
            if isinstance(options, dict)
            and (server := servers.get(str(options.get("plugin", "")))) is not None
            and server.kind == kind
        ]

    agents, environments = of_kind("agent"), of_kind("resources")
    resources = config[agents[0]].get("resources_server") if len(agents) == 1 else None
    if resources is None and len(environments) == 1:
        resources = environments[0]
    if not isinstance(resources, str) or resources not in environments:
        raise GymError(
            f"{path}: the config must run one resources server, or one agent naming its resources_server "
            f"(it runs {len(environments)} resources servers and {len(agents)} agents)"
        )
    return config, resources, config[resources]["plugin"]


def import_rows(
    path: Path,
    records: Sequence[SourceRow],
    mapping: ColumnMapping,
    *,
    config_file: bool = False,
    answer: str | None = None,
    plugins: PluginManager | None = None,
    parallel: int = 8,
) -> ImportReport:
    """Check ``records`` as rows of the environment of ``path`` (see :func:`environment_config`) on
    its servers run in this process. ``answer``: the reference answer's template, else the
    environment's in :data:`REFERENCE_ANSWERS`."""
    from gym_core.client import ServerClient
    from gym_core.options import ClientConfig
    from gym_core.plugins import get_plugin_manager

    from gym_cli.example_rollouts import serving
    from gym_cli.rollouts import run_async

    plugins = plugins or get_plugin_manager()
    config, resources, environment = environment_config(path, plugins, config_file=config_file)
    reference = answer_template(answer) if answer is not None else REFERENCE_ANSWERS.get(environment)

    async def run(global_config: Any) -> ImportReport:
        async with ServerClient(
            global_config, config=ClientConfig(timeout_s=60.0, max_attempts=1, deadline_s=60.0)
        ) as client:
            return await check_rows(
                client,
                resources,
                records,
                mapping,
                reference,
                parallel=parallel,
            )

    with serving(config, plugins) as global_config:
        return run_async(run(global_config))
