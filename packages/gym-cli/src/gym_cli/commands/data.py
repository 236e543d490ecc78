"""``gym data``: datasets made into an environment's task rows, each row checked by the environment."""

from __future__ import annotations

from pathlib import Path

import click

from gym_core.errors import GymError

from gym_cli.exits import CommandFailed

__all__ = ["data"]


@click.group()
def data() -> None:
    """Datasets made into an environment's task rows."""


@data.command("import")
@click.argument("source", type=click.Path(exists=True, path_type=Path))
@click.option("--env", "env", help="The environment: a directory under plugins/resources.")
@click.option(
    "--config",
    "config_path",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Instead of --env: the config of any environment (one resources server, or one agent naming its "
    "resources_server); its models are replaced by scripted ones.",
)
@click.option(
    "--map",
    "maps",
    multiple=True,
    metavar="FIELD=COLUMN",
    help="Row field from source column (repeatable; dotted FIELD for nested ones). FIELD 'input' is the "
    "prompt: a string column becomes one user message, a list column the messages. "
    "Without --map every column is the field of its name.",
)
@click.option(
    "--set",
    "sets",
    multiple=True,
    metavar="FIELD=VALUE",
    help="Row field set to VALUE in every row (JSON where it parses, else the string); repeatable.",
)
@click.option("--system", help="A system message put before every row's prompt.")
@click.option("--split", help="The split of a datasets directory that holds several.")
@click.option(
    "--reference-answer",
    "answer",
    metavar="TEMPLATE",
    help="The answer that must score 1, $FIELD for the row's fields (default: the environment's own, "
    "e.g. math's \\boxed{$expected_answer}; environments without one are seeded, not verified).",
)
@click.option(
    "-o",
    "--output",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="The accepted rows (JSONL); rejected ones go to OUTPUT's name with .rejected.jsonl.",
)
@click.option("--parallel", type=click.IntRange(min=1), default=8, show_default=True, help="Rows checked at once.")
def import_(
    source: Path,
    env: str | None,
    config_path: Path | None,
    maps: tuple[str, ...],
    sets: tuple[str, ...],
    system: str | None,
    split: str | None,
    answer: str | None,
    output: Path,
    parallel: int,
) -> None:
    """Make SOURCE's records into task rows of an environment, checking every row first.

    SOURCE is a JSONL file, a Parquet file (*.parquet) or a Hugging Face datasets directory written
    by save_to_disk (these two need the export extra: pip install 'gym-cli[export]'). Each row is
    checked on the environment's own servers, started in this process on loopback with every model
    scripted, before any model sees it: the row's seed_session must accept it, and where the
    environment scores a reference answer without a model (math, mcqa, equivalence_rule,
    string_match, or --reference-answer), /verify with that answer must give reward 1. A rejected
    row is written with its source line (JSONL) or row number (from 1) and the reason to
    OUTPUT.rejected.jsonl, and summarised.

    Exit status 0 when every row was accepted, 1 when some were rejected (the accepted ones are
    written), 2 for bad usage (an unknown environment or column: nothing is checked). --config
    checks rows of any environment, a third party's too.

    \b
    Example:
      gym data import qa.parquet --env mcqa --map input=prompt --map expected_answer=answer \\
          --map options=choices -o data/mcqa.jsonl
      gym data import ./gsm8k_saved --split test --env math --map input=question \\
          --map expected_answer=answer -o data/gsm8k.jsonl
    """
    import msgspec
    from rich.markup import escape

    from gym_core.errors import did_you_mean

    from gym_cli.catalog import CATALOG_FILE, find_catalog
    from gym_cli.consoles import output_console
    from gym_cli.data_import import (
        ColumnMapping,
        check_columns,
        import_rows,
        parse_assignments,
        read_source,
        source_columns,
    )
    from gym_cli.example_rollouts import environment_directories

    if (env is None) == (config_path is None):
        raise click.UsageError("give --env NAME or --config FILE (one of them)")
    if env is not None:
        catalog = find_catalog()
        if not catalog.in_workspace:
            raise GymError(f"no {CATALOG_FILE} here or above: run inside a gym workspace, or set $GYM_WORKSPACE to one")
        found = {d.name: d for d in environment_directories(catalog.root)}
        if env not in found:
            raise GymError(f"--env: no environment {env!r} under plugins/resources{did_you_mean(env, found)}")
        environment = found[env]
    else:
        assert config_path is not None
        environment = config_path.resolve()
    mapping = ColumnMapping(
        parse_assignments(maps, "--map"), parse_assignments(sets, "--set", json_values=True), system
    )
    columns = source_columns(source, split)
    records = list(read_source(source, split))
    if columns is None:  # JSONL: the keys its records have
        columns = list(dict.fromkeys(k for r in records for k in r.values))
    if mapping.columns:
        check_columns(mapping, columns, str(source))
    if not records:
        raise GymError(f"{source}: no records")
    report = import_rows(
        environment, records, mapping, config_file=config_path is not None, answer=answer, parallel=parallel
    )

    rejected_path = output.with_name(f"{output.stem}.rejected.jsonl")
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_bytes(b"".join(msgspec.json.encode(row) + b"\n" for row in report.accepted))
    if report.rejected:
        rejected_path.write_bytes(
            b"".join(
                msgspec.json.encode({"line": r.number, "reason": r.reason, "row": r.row}) + b"\n"
                for r in report.rejected
            )
        )
    elif rejected_path.exists():
        rejected_path.unlink()  # a previous import's rejections are not this one's
    console = output_console(stderr=True)
    checks = "seed_session and a reference answer's verify" if report.verified else "seed_session (no reference answer)"
    console.print(
        f"{report.read} rows read from {escape(str(source))}, checked by {escape(env or str(config_path))}'s {checks}: "
        f"{len(report.accepted)} accepted -> {escape(str(output))}, {len(report.rejected)} rejected"
        + (f" -> {escape(str(rejected_path))}" if report.rejected else "")
    )
    for rejection in report.rejected[:10]:
        console.print(f"  line {rejection.number}: {escape(rejection.reason[:300])}")
    if len(report.rejected) > 10:
        console.print(f"  ... and {len(report.rejected) - 10} more in {escape(str(rejected_path))}")
    if report.rejected:
        raise CommandFailed()
