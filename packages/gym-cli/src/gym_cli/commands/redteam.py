"""``gym redteam``: try the answers that score without solving on environments, before training does."""

from __future__ import annotations

from pathlib import Path

import click

from gym_core.errors import GymError

from gym_cli.exits import CommandFailed

__all__ = ["redteam"]


@click.command()
@click.argument("names", nargs=-1)
@click.option(
    "--config",
    "config_path",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Probe the environment of this config (one agent, its resources server, its models) instead of NAMEs.",
)
@click.option(
    "--input",
    "input_path",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="With --config: the task rows to probe on (JSONL; a conformance field says a solving answer).",
)
@click.option(
    "--rows", type=click.IntRange(min=1), default=4, show_default=True, help="Tasks per environment to probe on."
)
@click.option(
    "--threshold",
    type=float,
    default=0.0,
    show_default=True,
    help="A probe is gameable when its reward exceeds the honest failure's on the same task by more than this.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON instead of a table.")
def redteam(
    names: tuple[str, ...],
    config_path: Path | None,
    input_path: Path | None,
    rows: int,
    threshold: float,
    as_json: bool,
) -> None:
    """Try reward hacks on environments: forged verdicts and judge injection, several or huge answers,
    keyword stuffing, programs that read their tests or exit early, SQL that matches everything, tool
    and control-route abuse, forged and closed session cookies.

    Each environment runs in this process on loopback with every model scripted (the setup of its
    example rollouts), and each probe is played through its real agent and endpoints on --rows of its
    example tasks, against the reward of an honest failure on the same task. A judged environment is
    probed twice: with its scripted judges, and with a judge that quotes the candidate before ruling
    against it. NAME is a directory under plugins/resources (default: every one); --config and
    --input probe any environment, a third party's too. Probes an environment declares through the
    gym_redteam_probes hook run after gym's own. Runs of an environment whose options are documented
    reference behaviour (verdict_mode, several_answers or keyword_stuffing: reference) are listed,
    not counted.

    Exit status 1 when a probe is gameable, or got a server error (5xx) instead of a reward or a 4xx.

    \b
    Example:
      gym redteam math mcqa
      gym redteam --json > redteam.json
      gym redteam --config my_env.yaml --input my_env/example.jsonl
    """
    import json

    import yaml
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from gym_core.errors import did_you_mean
    from gym_core.plugins import get_plugin_manager

    from gym_cli.catalog import CATALOG_FILE, find_catalog
    from gym_cli.example_rollouts import environment_directories
    from gym_cli.redteam import ERROR, GAMEABLE, checks_of_config, checks_of_directory, read_rows, run_check, summarise

    plugins = get_plugin_manager()
    declarations = plugins.redteam_declarations()
    if config_path is not None:
        if names:
            raise GymError("give NAMEs or --config, not both")
        if input_path is None:
            raise GymError("--config needs --input: the task rows to probe on")
        loaded = yaml.safe_load(config_path.read_text())
        if not isinstance(loaded, dict):
            raise GymError(f"{config_path}: a config is a mapping of instance names to options")
        checks = checks_of_config(config_path.stem, loaded, read_rows(input_path), plugins, declarations, count=rows)
    else:
        if input_path is not None:
            raise GymError("--input goes with --config")
        catalog = find_catalog()
        if not catalog.in_workspace:
            raise GymError(f"no {CATALOG_FILE} here or above: run inside a gym workspace, or set $GYM_WORKSPACE to one")
        found = {d.name: d for d in environment_directories(catalog.root)}
        for name in names:
            if name not in found:
                raise GymError(f"no environment {name!r} under plugins/resources{did_you_mean(name, found)}")
        checks = [
            c for n in names or sorted(found) for c in checks_of_directory(found[n], plugins, declarations, count=rows)
        ]

    err = Console(stderr=True)
    summaries = []
    problems: list[str] = []
    for check in checks:
        try:
            results, trouble = run_check(check, plugins, threshold=threshold)
        except Exception as exc:  # noqa: BLE001 - its servers did not start: the others are still probed
            problems.append(f"{check.label}: not probed: {type(exc).__name__}: {exc}")
            continue
        problems += trouble
        summaries += summarise(check, results)
        if not as_json:
            bad = sum(s.verdict == GAMEABLE for s in summaries if s.environment == check.label)
            err.print(f"{escape(check.label)}: {len({r.probe for r in results})} probes, {bad} gameable")
    counted = [s for s in summaries if s.verdict == GAMEABLE and not s.reference]
    errors = [s for s in summaries if s.verdict == ERROR and not s.reference]
    if as_json:
        report = {
            "threshold": threshold,
            "gameable": len(counted),
            "errors": len(errors),
            "results": [s.as_json() for s in summaries],
            "problems": problems,
        }
        click.echo(json.dumps(report, indent=2))
    else:
        table = Table(title="gym redteam")
        for column in ("environment", "probe", "family", "reward", "honest", "verdict"):
            table.add_column(column, justify="right" if column in ("reward", "honest") else "left")
        style = {"gameable": "red", "error": "yellow", "robust": "green"}
        for s in summaries:
            verdict = f"[{style[s.verdict]}]{s.verdict}[/]" + (" (reference)" if s.reference else "")
            reward = "refused" if s.reward is None else f"{s.reward:.3g}"
            table.add_row(escape(s.environment), s.probe, s.family, reward, f"{s.baseline:.3g}", verdict)
        Console(soft_wrap=True).print(table)
        for problem in problems:
            err.print(f"[yellow]{escape(problem)}[/yellow]")
    if counted:
        raise CommandFailed(
            f"{len(counted)} gameable probe(s): "
            + ", ".join(
                f"{s.environment}/{s.probe} ({'reached' if s.reward is None else f'{s.reward:.3g}'} > {s.baseline:.3g})"
                for s in counted
            )
        )
    if errors:
        raise CommandFailed(
            f"{len(errors)} probe(s) answered with a server error, never a reward nor a 4xx: "
            + ", ".join(f"{s.environment}/{s.probe}" for s in errors)
        )
    if problems:
        raise CommandFailed(f"{len(problems)} task(s) could not be probed")
