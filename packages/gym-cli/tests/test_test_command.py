"""`gym test`: runs plugins' own tests with pytest and sums them up in a table."""

from __future__ import annotations

from pathlib import Path

from gym_cli.plugin_tests import TEST_REQUIREMENTS, pytest_arguments, requirements_for_tests

REPO = Path(__file__).resolve().parents[3]


def summary_row(result, plugin: str) -> list[str]:
    """The cells of ``plugin``'s row in the summary table."""
    row = next(line for line in result.stdout.splitlines() if line.startswith(f"│ {plugin} "))
    return [cell.strip() for cell in row.strip("│").split("│")]


def test_counter_in_this_environment(gym):
    result = gym("test", "counter", "--isolation", "none")
    assert result.exit_code == 0, result.output
    plugin, outcome, passed, failed = summary_row(result, "counter")[:4]
    assert outcome.startswith(("passed", "no tests")) and failed == "0"


def test_unknown_plugin_suggests_a_name(gym):
    result = gym("test", "countr", "--isolation", "none")
    assert result.exit_code != 0
    assert "unknown plugin 'countr' (did you mean 'counter'?)" in result.output


def make_package(root: Path, body: str) -> Path:
    package = root / "pkg"
    (package / "tests").mkdir(parents=True)
    (package / "pyproject.toml").write_text(
        '[project]\nname = "gym-pkg"\nversion = "0.1.0"\n\n[project.entry-points.gym]\npkg = "gym_pkg.plugin"\n'
    )
    (package / "tests" / "test_pkg.py").write_text(body)
    (package / "README.md").write_text("# gym-pkg\n\nA package whose plugin module does not exist.\n")
    return package


def test_a_failing_plugin_fails_the_run(tmp_path, gym):
    package = make_package(tmp_path, "def test_ok():\n    pass\n\ndef test_broken():\n    assert 1 == 2\n")
    result = gym("test", str(package), "--isolation", "none", "--quiet")
    assert result.exit_code == 1, result.output
    assert "pkg | " in result.output  # the failure's tail, prefixed by the plugin's name
    assert summary_row(result, "pkg")[:4] == ["pkg", "failed", "1", "1"]


def test_async_tests_run_in_auto_mode(tmp_path, gym):
    package = make_package(tmp_path, "import asyncio\n\nasync def test_sleep():\n    await asyncio.sleep(0)\n")
    result = gym("test", str(package), "--isolation", "none")
    assert result.exit_code == 0, result.output
    assert "pkg | 1 passed" in result.output


def test_pytest_settings_of_the_plugin_win(tmp_path):
    (tmp_path / "pyproject.toml").write_text(
        '[tool.pytest.ini_options]\nasyncio_mode = "strict"\naddopts = "--import-mode=prepend"\n'
    )
    args = pytest_arguments(tmp_path, tmp_path / "junit.xml")
    assert args[:3] == ["tests", "-c", str(tmp_path / "pyproject.toml")]
    overrides = [args[i + 1] for i, arg in enumerate(args) if arg == "-o"]
    assert overrides == ["asyncio_default_fixture_loop_scope=function", "timeout=300"]  # not asyncio_mode
    assert "--import-mode=importlib" not in args


def test_requirements_include_the_package_test_group(tmp_path):
    (tmp_path / "pyproject.toml").write_text(
        '[dependency-groups]\ntest = ["pytest>=8", "hypothesis>=6", {include-group = "lint"}]\nlint = ["ruff"]\n'
    )
    assert requirements_for_tests(tmp_path) == [*TEST_REQUIREMENTS, "hypothesis>=6"]


def test_a_second_gym_test_runs_the_edited_code_of_a_sibling_plugin(tmp_path, gym):
    """A sibling plugin named by the test group is installed editable: after an edit of its module, the
    next `gym test` (same requirements, venv reused) runs the edited code, not a copy from the first."""
    ws = tmp_path / "ws"
    hatchling = '[build-system]\nrequires = ["hatchling"]\nbuild-backend = "hatchling.build"\n'
    sibling = ws / "x" / "src" / "gym_x"
    sibling.mkdir(parents=True)
    (sibling / "__init__.py").write_text("VALUE = 1\n")
    (ws / "x" / "pyproject.toml").write_text(f'[project]\nname = "gym-x"\nversion = "0.1.0"\n\n{hatchling}')
    package = ws / "y"
    (package / "src" / "gym_y").mkdir(parents=True)
    (package / "src" / "gym_y" / "__init__.py").write_text("")
    (package / "pyproject.toml").write_text(
        f'[project]\nname = "gym-y"\nversion = "0.1.0"\n\n[project.entry-points.gym]\ny = "gym_y.plugin"\n\n'
        f'[dependency-groups]\ntest = ["gym-x"]\n\n{hatchling}'
    )
    (package / "tests").mkdir()
    (package / "tests" / "expected.txt").write_text("1")
    (package / "tests" / "test_y.py").write_text(
        "from pathlib import Path\n\nimport gym_x\n\n\ndef test_sibling_value():\n"
        "    assert gym_x.VALUE == int(Path(__file__).with_name('expected.txt').read_text())\n"
    )
    (ws / "workspace.toml").write_text('[plugins.x]\nkind = "resource"\npath = "x"\n')
    env = {"GYM_WORKSPACE": str(ws), "GYM_HOME": str(tmp_path / "home"), "UV_OFFLINE": "1"}

    first = gym("test", str(package), "--skip-docs", env=env)
    assert first.exit_code == 0, first.output
    assert summary_row(first, "y")[:4] == ["y", "passed", "1", "0"]

    (sibling / "__init__.py").write_text("VALUE = 2\n")
    (package / "tests" / "expected.txt").write_text("2")
    second = gym("test", str(package), "--skip-docs", env=env)
    assert second.exit_code == 0, second.output
    assert "installing" not in second.output  # the same requirements: uv is not run again
    assert summary_row(second, "y")[:4] == ["y", "passed", "1", "0"]
