"""`gym plugin`: the template renders a working plugin of each kind; `list` and `install` behave.

The generated packages' own tests run in this environment, with the package's ``src`` on PYTHONPATH
(it is not installed): they start real servers, and the end-to-end ones use the first-party plugins
installed in the workspace.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from gym_cli._environments import find_uv
from gym_cli.main import cli

REPO = Path(__file__).resolve().parents[3]
GYM_CLI = REPO / "packages" / "gym-cli"

KINDS = [
    # kind, NAME as typed, plugin name, module
    ("model", "my-echo", "my_echo", "gym_my_echo"),
    ("resources", "my_adder", "my_adder", "gym_my_adder"),
    ("agent", "one-shot-agent", "one_shot_agent", "gym_one_shot_agent"),
]


def gym(*args: str, env: dict[str, str] | None = None):
    return CliRunner().invoke(cli(), list(args), env=env)


def files_under(directory: Path) -> set[str]:
    return {str(p.relative_to(directory)) for p in directory.rglob("*") if p.is_file() and "__pycache__" not in p.parts}


@pytest.mark.parametrize(("kind", "name", "plugin_name", "module"), KINDS)
def test_generated_plugin_passes_its_own_tests(tmp_path, kind, name, plugin_name, module):
    target = tmp_path / plugin_name
    result = gym("plugin", "new", kind, name, "--output-dir", str(target))
    assert result.exit_code == 0, result.output
    assert f"gym plugin install {target}" in result.output
    assert f"gym test {plugin_name}" in result.output

    expected = {
        "pyproject.toml",
        "README.md",
        f"configs/{plugin_name}.yaml",
        f"src/{module}/__init__.py",
        f"src/{module}/plugin.py",
        f"src/{module}/config.py",
        f"src/{module}/server.py",
        f"tests/test_{plugin_name}.py",
    }
    if kind == "resources":
        expected.add("data/example.jsonl")
    assert files_under(target) == expected

    project = tomllib.loads((target / "pyproject.toml").read_text())["project"]
    assert project["name"] == f"gym-{plugin_name.replace('_', '-')}"
    assert project["version"] == "0.1.0"
    assert project["entry-points"]["gym"] == {plugin_name: f"{module}.plugin"}
    assert any(dep.startswith("gym-core") for dep in project["dependencies"])
    if kind == "resources":
        assert len((target / "data" / "example.jsonl").read_text().splitlines()) >= 3

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(target / "src"), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", str(target / "tests"), "-q", "-p", "no:cacheprovider", "-rs"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert " passed" in proc.stdout
    assert "skipped" not in proc.stdout, proc.stdout  # the end-to-end tests ran too


def test_new_refuses_an_existing_directory(tmp_path):
    (tmp_path / "taken").mkdir()
    result = gym("plugin", "new", "model", "fresh", "--output-dir", str(tmp_path / "taken"))
    assert result.exit_code != 0
    assert "already exists" in result.output
    assert list((tmp_path / "taken").iterdir()) == []


@pytest.mark.parametrize("name", ["Bad Name", "1st", "a--b", "x_"])
def test_new_rejects_bad_names(tmp_path, name):
    result = gym("plugin", "new", "model", name, "--output-dir", str(tmp_path / "x"))
    assert result.exit_code != 0
    assert "not a valid plugin name" in result.output
    assert not (tmp_path / "x").exists()


def test_new_refuses_the_name_of_a_known_plugin(tmp_path):
    result = gym("plugin", "new", "resources", "counter", "--output-dir", str(tmp_path / "counter"))
    assert result.exit_code != 0
    assert "already" in result.output and "counter" in result.output


def test_new_default_directory_in_a_workspace(tmp_path):
    (tmp_path / "workspace.toml").write_text("[plugins]\n")
    result = gym("plugin", "new", "agent", "gym-planner", env={"GYM_WORKSPACE": str(tmp_path)})
    assert result.exit_code == 0, result.output
    assert (tmp_path / "plugins" / "agents" / "planner" / "src" / "gym_planner" / "server.py").is_file()


def test_new_default_directory_outside_a_workspace(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GYM_WORKSPACE", raising=False)
    result = gym("plugin", "new", "model", "solo")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "solo" / "pyproject.toml").is_file()


@pytest.mark.skipif(find_uv() is None, reason="needs uv")
def test_template_ships_in_the_wheel(tmp_path):
    subprocess.run([find_uv(), "build", "--wheel", str(GYM_CLI), "-o", str(tmp_path)],
                   check=True, capture_output=True, timeout=300)
    (wheel,) = tmp_path.glob("gym_cli-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    template = REPO / "packages/gym-cli/src/gym_cli/templates/plugin"
    for path in template.rglob("*"):
        if path.is_file() and "__pycache__" not in path.parts:
            assert f"gym_cli/templates/plugin/{path.relative_to(template)}" in names


# --- gym plugin list ------------------------------------------------------------------------------

LIST_SCRIPT = """
import json, sys
from click.testing import CliRunner
from gym_cli.main import cli
result = CliRunner().invoke(cli(), ["plugin", "list", "--json"])
heavy = [m for m in ("llama_cpp", "openai", "math_verify") if m in sys.modules]
print(json.dumps({"exit_code": result.exit_code, "stdout": result.stdout, "heavy": heavy}))
"""


def test_list_json_names_kinds_without_heavy_imports(tmp_path):
    env = {**os.environ, "GYM_HOME": str(tmp_path)}
    env.pop("GYM_WORKSPACE", None)
    proc = subprocess.run([sys.executable, "-c", LIST_SCRIPT], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["exit_code"] == 0, report
    assert report["heavy"] == []
    plugins = {p["name"]: p for p in json.loads(report["stdout"])}
    assert plugins["counter"]["kind"] == "resources"
    assert plugins["scripted"]["kind"] == "model"
    assert plugins["simple_agent"]["kind"] == "agent"
    counter = plugins["counter"]
    assert counter["source"] == "plugins/resources/counter" and counter["source_type"] == "path"
    assert counter["version"] and counter["in_catalog"] and counter["environment"] == "not built"


def test_list_table(tmp_path):
    result = gym("plugin", "list", env={"GYM_HOME": str(tmp_path)})
    assert result.exit_code == 0, result.output
    for name in ("counter", "scripted", "simple_agent"):
        assert name in result.output


# --- gym plugin install: errors before any environment is built -----------------------------------


def one_line_error(result) -> str:
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    assert lines[0].startswith("error: ")
    return lines[0]


def test_install_path_without_pyproject(tmp_path):
    (tmp_path / "not_a_package").mkdir()
    result = gym("plugin", "install", str(tmp_path / "not_a_package"), env={"GYM_HOME": str(tmp_path / "home")})
    assert result.exit_code != 0
    assert "has no pyproject.toml" in one_line_error(result)
    assert not (tmp_path / "home").exists()


def test_install_missing_directory(tmp_path):
    result = gym("plugin", "install", str(tmp_path / "nowhere"), env={"GYM_HOME": str(tmp_path / "home")})
    assert result.exit_code != 0
    assert "is not a directory" in one_line_error(result)


def test_install_package_without_gym_entry_point(tmp_path):
    package = tmp_path / "plain"
    package.mkdir()
    (package / "pyproject.toml").write_text('[project]\nname = "plain"\nversion = "1.0"\n')
    result = gym("plugin", "install", str(package), env={"GYM_HOME": str(tmp_path / "home")})
    assert result.exit_code != 0
    assert "declares no entry point in group 'gym'" in one_line_error(result)


def test_install_outside_a_workspace(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GYM_WORKSPACE", raising=False)
    result = gym("plugin", "install", "gym-anything")
    assert result.exit_code != 0
    assert "no workspace.toml" in one_line_error(result)


# --- one real environment: install a generated plugin, then test it there -------------------------


@pytest.mark.skipif(find_uv() is None, reason="needs uv")
def test_install_then_test_in_the_isolated_environment(tmp_path):
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "workspace.toml").write_text(f'[core]\npath = "{REPO / "packages" / "gym-core"}"\n')
    env = {"GYM_WORKSPACE": str(workspace), "GYM_HOME": str(tmp_path / "home")}
    assert gym("plugin", "new", "resources", "tiny-env", env=env).exit_code == 0

    result = gym("plugin", "install", str(workspace / "plugins" / "resources" / "tiny_env"), env=env)
    assert result.exit_code == 0, result.output
    assert "tiny_env (resources)" in result.output
    catalog = tomllib.loads((workspace / "workspace.toml").read_text())
    assert catalog["plugins"]["tiny_env"] == {"kind": "resources", "path": "plugins/resources/tiny_env"}

    listed = {p["name"]: p for p in json.loads(gym("plugin", "list", "--json", env=env).stdout)}
    assert listed["tiny_env"]["environment"] == "built"

    result = gym("test", "tiny_env", env=env)
    assert result.exit_code == 0, result.output
    assert "passed" in result.output
    shutil.rmtree(tmp_path / "home", ignore_errors=True)
