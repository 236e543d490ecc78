"""Regenerate what the docs copy from the code, or check that it is current (``--check``):

- ``docs/cli.md``: every command's ``--help`` (:mod:`gym_cli.cli_reference`);
- the code blocks of the docs pages that show a file of ``docs/examples/`` (a block right after
  ``<!-- example: docs/examples/FILE -->`` holds that file; ``FILE#NAME`` holds the lines between
  ``# [NAME]`` and ``# [/NAME]`` in it), so that every example shown is one a test runs;
- the Options tables of every plugin README (what ``gym plugin docs`` writes).

    uv run python docs/generate.py            # rewrite them
    uv run python docs/generate.py --check    # exit status 1 and what differs, changing nothing

The tests (``packages/gym-cli/tests/test_docs.py``) run the check.
"""

from __future__ import annotations

import argparse
import re
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CLI_PAGE = ROOT / "docs" / "cli.md"
EXAMPLE_PAGES = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]

EXAMPLE = re.compile(
    r"^<!-- example: (?P<path>[^\s#]+)(?:#(?P<region>[\w-]+))? -->\n(?P<fence>`{3,})(?P<lang>[^\n]*)\n(?P<body>.*?)^(?P=fence)[ \t]*$",
    re.MULTILINE | re.DOTALL,
)


def example_text(path: str, region: str | None) -> str:
    """The text a block shows: the whole file, or its region ``region``, dedented."""
    text = (ROOT / path).read_text()
    if region is None:
        return text
    match = re.search(
        rf"^[ \t]*# \[{re.escape(region)}\][ \t]*\n(.*?)^[ \t]*# \[/{re.escape(region)}\]",
        text,
        re.MULTILINE | re.DOTALL,
    )
    if match is None:
        raise SystemExit(f"{path} has no region `# [{region}]` ... `# [/{region}]`")
    return textwrap.dedent(match[1])


def with_examples(text: str) -> str:
    """``text`` with each example block holding its file's current text."""
    return EXAMPLE.sub(
        lambda m: (
            f"<!-- example: {m['path']}{'#' + m['region'] if m['region'] else ''} -->\n"
            f"{m['fence']}{m['lang']}\n{example_text(m['path'], m['region'])}{m['fence']}"
        ),
        text,
    )


def generated() -> dict[Path, str]:
    """Each generated page's path and the text it should have."""
    from gym_cli.cli_reference import render

    pages = {CLI_PAGE: render()}
    for page in EXAMPLE_PAGES:
        if page.is_file() and page != CLI_PAGE:  # generated whole, above
            pages[page] = with_examples(page.read_text())
    return pages


def plugin_readmes(check: bool) -> list[str]:
    """Regenerate (or, ``check``, only compare) the Options tables of the catalog's plugins; the
    READMEs whose tables are not current."""
    from gym_cli.catalog import find_catalog
    from gym_cli.plugin_docs import describe_packages, render_readme

    catalog = find_catalog(ROOT)
    directories = sorted({entry.path for entry in catalog.entries.values() if entry.path is not None})
    stale = []
    for package in describe_packages(directories):
        if package.error is not None:
            raise SystemExit(f"{package.directory}: its plugin modules do not load: {package.error}")
        readme = package.directory / "README.md"
        text = readme.read_text()
        rendered = render_readme(text, package)
        if rendered != text:
            stale.append(str(readme.relative_to(ROOT)))
            if not check:
                readme.write_text(rendered)
    return stale


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 when something is not current")
    args = parser.parse_args(argv)
    stale = []
    for path, text in generated().items():
        if not path.is_file() or path.read_text() != text:
            stale.append(str(path.relative_to(ROOT)))
            if not args.check:
                path.write_text(text)
    stale += plugin_readmes(args.check)
    if args.check and stale:
        print("not current (run `uv run python docs/generate.py`):\n  " + "\n  ".join(stale))
        return 1
    print(("rewrote: " + ", ".join(stale)) if stale else "the generated docs are current")
    return 0


if __name__ == "__main__":
    sys.exit(main())
