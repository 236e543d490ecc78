"""``gym test``: run each plugin's own ``tests/`` with pytest, in the plugin's venv
(:mod:`gym_cli.plugin_tests`, imported when the command runs: ``gym --help`` imports every command
module, and this one needs rich, the catalog and the venv manager only to run)."""

from __future__ import annotations

import click

from gym_cli.cli_options import ISOLATION_MODES
from gym_cli.exits import CommandFailed

__all__ = ["test"]


@click.command()
@click.argument("plugins", nargs=-1, metavar="[PLUGIN|DIR]...")
@click.option(
    "--isolation",
    type=click.Choice(ISOLATION_MODES),
    default="venv",
    show_default=True,
    help="venv: in each plugin's own venv (pytest added once); none: with the Python running gym.",
)
@click.option("-q", "--quiet", is_flag=True, help="Show only the output of failing plugins (their last lines).")
@click.option("--skip-docs", is_flag=True, help="Do not check the plugins' READMEs and example data.")
def test(plugins: tuple[str, ...], isolation: str, quiet: bool, skip_docs: bool) -> None:
    """Run the tests/ of each PLUGIN (default: every plugin of the catalog) with pytest.

    Each plugin is tested in its venv, as `gym run` would run it; a summary table follows, and
    the exit status is 1 when any plugin's tests fail. A plugin whose package directory is here also
    gets its README and example data checked, as `gym plugin docs --check` does (CONTRIBUTING.md):
    the sections of its kind under their fixed headings, its Options tables current, an
    environment's data/example.jsonl. What is missing is listed and counts as a failure.

    \b
    Examples:
      gym test counter math
      gym test --isolation none          # every catalog plugin, with the Python running gym
      gym test plugins/resources/my_env  # a package directory
    """
    from rich.markup import escape

    from gym_cli.catalog import find_catalog
    from gym_cli.consoles import output_console
    from gym_cli.plugin_tests import check_docs, find_targets, run_plugin_tests, summary_table

    console = output_console(stderr=True, highlight=False, soft_wrap=True)
    targets = find_targets(plugins, find_catalog())
    outcomes = [run_plugin_tests(target, isolation, console, stream=not quiet) for target in targets]
    if not skip_docs:
        check_docs(targets, outcomes)
    output_console().print(summary_table(outcomes))
    for outcome in outcomes:
        if outcome.result == "error":
            console.print(f"[bold red]error:[/] {outcome.name}: {escape(outcome.detail)}")
        for note in outcome.docs_notes or ():
            console.print(f"[yellow]note:[/] {outcome.name}: {escape(note)}")
        for problem in outcome.docs or ():
            console.print(f"[bold red]docs:[/] {outcome.name}: {escape(problem)}")
    failed = [o.name for o in outcomes if not o.ok]
    undocumented = [o.name for o in outcomes if o.docs]
    if failed or undocumented:
        parts = [f"the tests of {len(failed)} of {len(outcomes)} plugins failed: {', '.join(failed)}"] if failed else []
        if undocumented:
            parts.append(
                f"the README or example data of {', '.join(undocumented)} need fixing "
                "(`gym plugin docs` regenerates the Options tables; `--skip-docs` skips the check)"
            )
        raise CommandFailed("; ".join(parts))
