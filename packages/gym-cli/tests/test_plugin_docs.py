"""Plugin READMEs: the fixed sections of each kind, the Options tables generated from the config
descriptions (`gym plugin show NAME --markdown`, written by `gym plugin docs`), and the checks
`gym plugin docs --check`, `gym test` and `gym plugin build` make."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from gym_cli.catalog import find_catalog
from gym_cli.commands.plugin_new import render_template
from gym_cli.plugin_docs import (
    HEADINGS,
    check_package,
    describe_packages,
    options_markdown,
    readme_headings,
    required_headings,
)
from gym_cli.venvs import find_uv

REPO = Path(__file__).resolve().parents[3]
FIX = "run `uv run gym plugin docs` from the repository root (it rewrites the Options tables) and fix what it lists"


def catalog_packages() -> list[Path]:
    catalog = find_catalog(REPO)
    return sorted({entry.path for entry in catalog.entries.values() if entry.path is not None})


def test_every_plugin_readme_has_its_sections_and_current_options_tables():
    """Fix: each plugin README has the `##` sections of its kind (CONTRIBUTING.md, "README
    sections"), and its `## Options` tables are what the config descriptions say: run
    `uv run gym plugin docs` from the repository root and fix what it lists."""
    packages = describe_packages(catalog_packages())
    assert len(packages) >= 36
    report = []
    for package in packages:
        assert package.error is None, f"{package.directory}: {package.error}"
        assert package.servers, f"{package.directory} registers no server type"
        problems, _ = check_package(package, shown=str(package.directory.relative_to(REPO)))
        report += [f"{package.directory.relative_to(REPO)}: {p}" for p in problems]
    assert not report, "\n".join(report) + f"\n\n{FIX}"


def test_the_markdown_of_gym_plugin_show_is_the_readme_s_table(gym):
    result = gym("plugin", "show", "math", "--markdown")
    assert result.exit_code == 0, result.output
    readme = (REPO / "plugins" / "resources" / "math" / "README.md").read_text()
    block = re.search(r"<!-- options math: begin[^\n]*-->\n(.*?)<!-- options math: end -->", readme, re.DOTALL)
    assert block is not None and block[1] == result.output
    assert result.output.startswith("| option | type | default | description |\n| --- | --- | --- | --- |\n")
    assert "| `grading_mode` | `'library' \\| 'boxed'` | `\"library\"` |" in result.output


def test_show_refuses_json_and_markdown_together(gym):
    result = gym("plugin", "show", "math", "--markdown", "--json")
    assert result.exit_code == 2
    assert "exclude each other" in result.output


def test_options_markdown_escapes_what_a_table_cell_cannot_hold():
    options = [
        {
            "name": "a",
            "type": "int | None",
            "required": True,
            "default": None,
            "description": "a | b <think> *x*",
            "inherited": False,
        },
        {
            "name": "b",
            "type": "str",
            "required": False,
            "default": "y" * 80,
            "description": "uses `a|b` here",
            "inherited": False,
        },
        {
            "name": "host",
            "type": "str",
            "required": False,
            "default": "127.0.0.1",
            "description": "",
            "inherited": True,
        },
    ]
    table = options_markdown(options)
    rows = table.splitlines()
    assert rows[2] == "| `a` | `int \\| None` | required | a \\| b \\<think> \\*x\\* |"
    assert rows[3].startswith('| `b` | `str` | `"' + "y" * 38 + "`…")  # long defaults are cut, visibly
    assert "`a\\|b`" in rows[3]
    assert "host" not in table.split("\n\n")[0]  # the common options are named once, below
    assert options_markdown([options[2]]).startswith("No options of its own")


def test_headings_inside_code_blocks_do_not_count():
    text = "# t\n\n## Rows\n\n```markdown\n## Reward\n```\n\n   ```` ``` ```` inline\n\n## Options\n"
    assert readme_headings(text) == ["Rows", "Options"]


def test_required_headings_by_kind():
    assert required_headings(["resources"], metrics=True) == ["Rows", "Reward", "Options", "Metrics", "Example"]
    assert required_headings(["agent"], metrics=False) == list(HEADINGS["agent"])
    assert required_headings(["model"], metrics=False) == ["Options", "Example"]
    assert required_headings([], metrics=False) == []


@pytest.mark.parametrize("kind", ["resources", "agent", "model"])
def test_the_template_renders_a_readme_with_its_sections_and_table(tmp_path, kind):
    """Fix: the template's README (gym_cli/templates/plugin) has the sections of each kind;
    `gym plugin new` fills its Options table from the new package's config."""
    target = tmp_path / f"my_{kind}"
    render_template(kind, f"my_{kind}", target)
    (package,) = describe_packages([target])
    problems, notes = check_package(package)
    assert (problems, notes) == ([], [])
    headings = readme_headings((target / "README.md").read_text())
    assert [h for h in headings if h in required_headings([kind], False)] == required_headings([kind], False)
    assert f"<!-- options my_{kind}: begin" in (target / "README.md").read_text()


@pytest.fixture
def package(tmp_path) -> Path:
    """A fresh environment package from the template, with one trivial test."""
    target = tmp_path / "my_env"
    render_template("resources", "my_env", target)
    shutil.rmtree(target / "tests")
    (target / "tests").mkdir()
    (target / "tests" / "test_ok.py").write_text("def test_ok():\n    pass\n")
    return target


def _break_readme(package: Path) -> None:
    readme = package / "README.md"
    text = readme.read_text().replace("## Reward\n", "## Verify\n")
    text = re.sub(r"\| `ignore_case` \|[^\n]*", "| `ignore_case` | `bool` | `false` | stale |", text)
    readme.write_text(text)
    (package / "data" / "example.jsonl").unlink()


def test_docs_check_names_what_is_missing_and_docs_regenerates_the_table(package, gym):
    _break_readme(package)
    result = gym("plugin", "docs", "--check", str(package))
    assert result.exit_code == 1, result.output
    assert "lacks the section `## Reward`" in result.output
    assert "Options table of `my_env` is out of date with its config: run `gym plugin docs" in result.output
    assert "data/example.jsonl is missing" in result.output
    assert "stale" in (package / "README.md").read_text()  # --check writes nothing

    result = gym("plugin", "docs", str(package))
    assert result.exit_code == 1, result.output  # the section and the data are still missing
    assert "updated" in result.output and "out of date" not in result.output
    assert "stale" not in (package / "README.md").read_text()

    (package / "README.md").write_text((package / "README.md").read_text().replace("## Verify\n", "## Reward\n"))
    (package / "data" / "example.jsonl").write_text(
        '{"responses_create_params": {"input": "1 + 1?"}, "expected_answer": "2"}\n'
    )
    result = gym("plugin", "docs", "--check", str(package))
    assert result.exit_code == 0, result.output


def test_a_table_is_added_where_none_is_and_a_stale_one_removed(package, gym):
    readme = package / "README.md"
    text = re.sub(
        r"<!-- options my_env: begin.*?<!-- options my_env: end -->\n", "", readme.read_text(), flags=re.DOTALL
    )
    text = text.replace("## Options\n", "## Options\n\n<!-- options gone: begin -->\nold\n<!-- options gone: end -->\n")
    readme.write_text(text)
    problems, _ = check_package(describe_packages([package])[0])
    assert any("no generated table of `my_env`" in p for p in problems)
    assert any("table of `gone`, which the package does not register" in p for p in problems)
    assert gym("plugin", "docs", str(package)).exit_code == 0
    text = readme.read_text()
    assert "options gone" not in text and "<!-- options my_env: begin" in text


def test_a_package_that_does_not_load_is_noted_not_failed(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "pyproject.toml").write_text(
        '[project]\nname = "gym-pkg"\nversion = "0.1.0"\n\n[project.entry-points.gym]\npkg = "gym_pkg.plugin"\n'
    )
    (package / "README.md").write_text("# gym-pkg\n\nWhat it is.\n")
    problems, notes = check_package(describe_packages([package])[0])
    assert problems == []
    assert "do not load" in notes[0] and "gym_pkg" in notes[0]


def test_gym_test_fails_on_a_readme_that_lacks_its_sections(package, gym):
    _break_readme(package)
    result = gym("test", str(package), "--isolation", "none", "--quiet")
    assert result.exit_code == 1, result.output
    row = next(line for line in result.stdout.splitlines() if line.startswith("│ my_env "))
    cells = [cell.strip() for cell in row.strip("│").split("│")]
    assert cells[1] == "passed" and cells[-1] == "3 to fix"
    assert "docs: my_env: README.md lacks the section `## Reward`" in result.output
    assert "need fixing" in result.output

    result = gym("test", str(package), "--isolation", "none", "--quiet", "--skip-docs")
    assert result.exit_code == 0, result.output


@pytest.mark.skipif(find_uv() is None, reason="gym plugin build needs uv")
def test_build_refuses_a_readme_that_lacks_its_sections(package, tmp_path, gym):
    _break_readme(package)
    out = tmp_path / "dist"
    result = gym("plugin", "build", str(package), "--out", str(out))
    assert result.exit_code == 1, result.output
    assert "cannot be published" in result.output
    assert "README.md lacks the section `## Reward`" in result.output
    assert "data/example.jsonl is missing" in result.output
    assert list(out.iterdir()) == []


@pytest.mark.parametrize(("name", "ok"), [("my_env/parse_rate", True), ("parse_rate", False)])
def test_metric_names_carry_the_environment_s_prefix(package, name, ok):
    plugin = package / "src" / "gym_my_env" / "plugin.py"
    plugin.write_text(
        plugin.read_text() + f"\n\n@hookimpl\ndef gym_aggregate_metrics(rollouts):\n    return {{{name!r}: 1.0}}\n"
    )
    readme = package / "README.md"
    readme.write_text(readme.read_text().replace("## Example\n", "## Metrics\n\n`my_env/parse_rate`.\n\n## Example\n"))
    (package / "data" / "example_rollouts.jsonl").write_text(
        '{"task_index": 0, "rollout_index": 0, "reward": 1.0, "environment": "my_env", "resources_server": "my_env"}\n'
    )
    (described,) = describe_packages([package])
    assert described.metrics and described.metric_names == [name]
    problems, _ = check_package(described)
    if ok:
        assert problems == []
    else:
        assert problems == [
            "gym_aggregate_metrics names parse_rate without the environment's prefix (my_env/): "
            "metrics of all plugins share one name space"
        ]
