"""`gym plugin`: the template renders a working plugin of each kind; `list` and `install` behave.

The generated packages' own tests run in this environment, with the package's ``src`` on PYTHONPATH
(it is not installed): they start real servers, and the end-to-end ones use the first-party plugins
installed in the workspace.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from gym_cli.venvs import find_uv

REPO = Path(__file__).resolve().parents[3]
GYM_CLI = REPO / "packages" / "gym-cli"

KINDS = [
    # kind, NAME as typed, plugin name, module
    ("model", "my-echo", "my_echo", "gym_my_echo"),
    ("resources", "my_adder", "my_adder", "gym_my_adder"),
    ("agent", "one-shot-agent", "one_shot_agent", "gym_one_shot_agent"),
]


def files_under(directory: Path) -> set[str]:
    return {str(p.relative_to(directory)) for p in directory.rglob("*") if p.is_file() and "__pycache__" not in p.parts}


@pytest.mark.parametrize(("kind", "name", "plugin_name", "module"), KINDS)
def test_generated_plugin_passes_its_own_tests(tmp_path, kind, name, plugin_name, module, gym):
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
    # The one registration style: a "module:Class" string, the config struct from config.py,
    # option descriptions in msgspec.Meta.
    registration = (target / "src" / module / "plugin.py").read_text()
    assert f'server="{module}.server:' in registration and f"from {module}.config import" in registration
    assert "Meta(description=" in (target / "src" / module / "config.py").read_text()
    # The tests subclass gym's conformance kit for the kind.
    kit = {"model": "ModelServerTests", "resources": "ResourcesServerTests", "agent": "AgentServerTests"}[kind]
    assert f"({kit}):" in (target / "tests" / f"test_{plugin_name}.py").read_text()

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(target / "src"), os.environ.get("PYTHONPATH", "")])}
    overridden = subprocess.run(
        [sys.executable, "-c", SIGNATURES, module], env=env, capture_output=True, text=True, timeout=120
    )
    assert overridden.returncode == 0, overridden.stderr
    assert json.loads(overridden.stdout) == {}, "methods whose signature differs from the base class's"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", str(target / "tests"), "-q", "-p", "no:cacheprovider", "-rs"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert " passed" in proc.stdout
    assert "skipped" not in proc.stdout, proc.stdout  # the end-to-end tests ran too


# The methods of the generated server class whose parameters differ from those of the method they
# override (bug: the agent template's responses() took a `cookies` the base class never passes).
SIGNATURES = """
import importlib, inspect, json, sys
from gym_core import AgentServer, ModelServer, ResourcesServer
module = importlib.import_module(sys.argv[1] + ".server")
bases = (AgentServer, ModelServer, ResourcesServer)
(cls,) = [v for v in vars(module).values() if isinstance(v, type) and issubclass(v, bases) and v.__module__ == module.__name__]
base = next(b for b in bases if issubclass(cls, b))
print(json.dumps({
    name: str(inspect.signature(fn)) for name, fn in vars(cls).items()
    if callable(fn) and not name.startswith("__") and hasattr(base, name)
    and list(inspect.signature(fn).parameters) != list(inspect.signature(getattr(base, name)).parameters)
}))
"""


def test_new_refuses_an_existing_directory(tmp_path, gym):
    (tmp_path / "taken").mkdir()
    result = gym("plugin", "new", "model", "fresh", "--output-dir", str(tmp_path / "taken"))
    assert result.exit_code != 0
    assert "already exists" in result.output
    assert list((tmp_path / "taken").iterdir()) == []


@pytest.mark.parametrize("name", ["Bad Name", "1st", "a--b", "x_"])
def test_new_rejects_bad_names(tmp_path, name, gym):
    result = gym("plugin", "new", "model", name, "--output-dir", str(tmp_path / "x"))
    assert result.exit_code != 0
    assert "not a valid plugin name" in result.output
    assert not (tmp_path / "x").exists()


def test_new_refuses_the_name_of_a_known_plugin(tmp_path, gym):
    result = gym("plugin", "new", "resources", "counter", "--output-dir", str(tmp_path / "counter"))
    assert result.exit_code != 0
    assert "already" in result.output and "counter" in result.output


def test_new_default_directory_in_a_workspace(tmp_path, gym):
    (tmp_path / "workspace.toml").write_text("[plugins]\n")
    result = gym("plugin", "new", "agent", "gym-planner", env={"GYM_WORKSPACE": str(tmp_path)})
    assert result.exit_code == 0, result.output
    assert (tmp_path / "plugins" / "agents" / "planner" / "src" / "gym_planner" / "server.py").is_file()
    # A catalog without a uv workspace: the catalog entry only, then the install hint.
    catalog = tomllib.loads((tmp_path / "workspace.toml").read_text())
    assert catalog["plugins"] == {"planner": {"kind": "agent", "path": "plugins/agents/planner"}}
    assert "gym plugin install" in result.output and not (tmp_path / "pyproject.toml").exists()


def test_new_default_directory_outside_a_workspace(tmp_path, monkeypatch, gym):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GYM_WORKSPACE", raising=False)
    result = gym("plugin", "new", "model", "solo")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "solo" / "pyproject.toml").is_file()


@pytest.mark.skipif(find_uv() is None, reason="needs uv")
def test_template_ships_in_the_wheel(tmp_path):
    subprocess.run(
        [find_uv(), "build", "--wheel", str(GYM_CLI), "-o", str(tmp_path)], check=True, capture_output=True, timeout=300
    )
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
    proc = subprocess.run(
        [sys.executable, "-c", LIST_SCRIPT], cwd=REPO, env=env, capture_output=True, text=True, timeout=120
    )
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
    assert counter["version"] and counter["in_catalog"] and counter["venv"] == "not built"


def test_list_table(tmp_path, gym):
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


def test_install_path_without_pyproject(tmp_path, gym):
    (tmp_path / "not_a_package").mkdir()
    result = gym("plugin", "install", str(tmp_path / "not_a_package"), env={"GYM_HOME": str(tmp_path / "home")})
    assert result.exit_code != 0
    assert "has no pyproject.toml" in one_line_error(result)
    assert not (tmp_path / "home").exists()


def test_install_missing_directory(tmp_path, gym):
    result = gym("plugin", "install", str(tmp_path / "nowhere"), env={"GYM_HOME": str(tmp_path / "home")})
    assert result.exit_code != 0
    assert "is not a directory" in one_line_error(result)


def test_install_package_without_gym_entry_point(tmp_path, gym):
    package = tmp_path / "plain"
    package.mkdir()
    (package / "pyproject.toml").write_text('[project]\nname = "plain"\nversion = "1.0"\n')
    result = gym("plugin", "install", str(package), env={"GYM_HOME": str(tmp_path / "home")})
    assert result.exit_code != 0
    assert "declares no entry point in group 'gym'" in one_line_error(result)


def test_install_outside_a_workspace_records_in_the_user_catalog_only_what_installed(tmp_path, monkeypatch, gym):
    """Outside a workspace the catalog is $GYM_HOME/workspace.toml; a package no index has is a clear
    error that records nothing (UV_OFFLINE: the answer comes from uv's cache, not the network)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GYM_WORKSPACE", raising=False)
    home = tmp_path / "home"
    result = gym("plugin", "install", "gym-anything-not-published", env={"GYM_HOME": str(home), "UV_OFFLINE": "1"})
    assert result.exit_code == 2, result.output
    assert "cannot build the venv of plugin 'anything_not_published'" in result.output
    assert "gym-anything-not-published" in result.output
    assert not (home / "workspace.toml").exists() and not (tmp_path / "workspace.toml").exists()


# --- one real environment: install a generated plugin, then test it there -------------------------


@pytest.mark.skipif(find_uv() is None, reason="needs uv")
def test_install_then_test_in_the_isolated_environment(tmp_path, gym):
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
    assert listed["tiny_env"]["venv"] == "built"
    # Not installed in this process: `show` asks the plugin's venv.
    shown = gym("plugin", "show", "tiny_env", "--json", env=env)
    assert shown.exit_code == 0, shown.output
    assert {k: json.loads(shown.stdout)[k] for k in ("name", "kind", "distribution")} == {
        "name": "tiny_env",
        "kind": "resources",
        "distribution": "gym-tiny-env",
    }

    result = gym("test", "tiny_env", env=env)
    assert result.exit_code == 0, result.output
    assert "passed" in result.output
    shutil.rmtree(tmp_path / "home", ignore_errors=True)


# --- the workspace's member lists: registration by `gym plugin new`, `gym workspace check/sync` ----


def test_the_repository_is_in_sync_with_its_members():
    from gym_cli.workspace import check

    drift = check(REPO)
    assert drift == [], "the root pyproject.toml or workspace.toml is out of date: run `gym workspace sync`"


def copy_of_workspace(tmp_path: Path) -> Path:
    """The repository's root toml files and its members' pyproject.toml files, in ``tmp_path/ws``."""
    from gym_cli.workspace import find_members

    root = tmp_path / "ws"
    root.mkdir()
    for name in ("pyproject.toml", "workspace.toml"):
        shutil.copy(REPO / name, root / name)
    for member in find_members(REPO):
        (root / member.directory).mkdir(parents=True)
        shutil.copy(REPO / member.directory / "pyproject.toml", root / member.directory / "pyproject.toml")
    return root


def comment_lines(path: Path) -> list[str]:
    return [line for line in path.read_text().splitlines() if line.lstrip().startswith("#")]


def test_new_registers_the_plugin_in_the_workspace(tmp_path, gym):
    from gym_cli.workspace import check, register_member

    root = copy_of_workspace(tmp_path)
    comments = {name: comment_lines(root / name) for name in ("pyproject.toml", "workspace.toml")}
    result = gym("plugin", "new", "resources", "probe-env-xyz", env={"GYM_WORKSPACE": str(root)})
    assert result.exit_code == 0, result.output
    assert "uv run pytest" in result.output and "plugins/resources/probe_env_xyz" in result.output

    pyproject = tomllib.loads((root / "pyproject.toml").read_text())
    assert "gym-probe-env-xyz" in pyproject["project"]["dependencies"]
    assert pyproject["tool"]["uv"]["sources"]["gym-probe-env-xyz"] == {"workspace": True}
    assert {"jsonschema>=4.18", "pytest>=8"} <= set(pyproject["dependency-groups"]["test"])
    catalog = tomllib.loads((root / "workspace.toml").read_text())
    assert catalog["plugins"]["probe_env_xyz"] == {"kind": "resources", "path": "plugins/resources/probe_env_xyz"}
    for name, lines in comments.items():
        assert comment_lines(root / name) == lines  # comments kept, in place
    # In sync now; registering again changes nothing.
    assert check(root) == []
    before = (root / "pyproject.toml").read_text(), (root / "workspace.toml").read_text()
    directory = root / "plugins" / "resources" / "probe_env_xyz"
    assert register_member(root, directory, "resources", "probe_env_xyz", "gym-probe-env-xyz") == []
    assert ((root / "pyproject.toml").read_text(), (root / "workspace.toml").read_text()) == before


def test_new_outside_the_workspace_directory_registers_nothing(tmp_path, gym):
    root = copy_of_workspace(tmp_path)
    before = (root / "pyproject.toml").read_text(), (root / "workspace.toml").read_text()
    result = gym(
        "plugin",
        "new",
        "model",
        "elsewhere",
        "--output-dir",
        str(tmp_path / "elsewhere"),
        env={"GYM_WORKSPACE": str(root)},
    )
    assert result.exit_code == 0, result.output
    assert ((root / "pyproject.toml").read_text(), (root / "workspace.toml").read_text()) == before
    assert "gym plugin install" in result.output


def test_a_member_outside_the_member_globs_is_added_to_them(tmp_path, gym):
    from gym_cli.workspace import check, find_members

    root = copy_of_workspace(tmp_path)
    result = gym(
        "plugin",
        "new",
        "agent",
        "odd-one",
        "--output-dir",
        str(root / "extras" / "odd_one"),
        env={"GYM_WORKSPACE": str(root)},
    )
    assert result.exit_code == 0, result.output
    members = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["uv"]["workspace"]["members"]
    assert "extras/odd_one" in members
    assert "extras/odd_one" in [m.directory for m in find_members(root)]
    assert check(root) == []  # its kind came from `gym plugin new`, recorded in workspace.toml


def test_workspace_check_reports_drift_and_sync_repairs_it(tmp_path, gym):
    root = copy_of_workspace(tmp_path)
    env = {"GYM_WORKSPACE": str(root)}
    assert gym("workspace", "check", env=env).exit_code == 0
    comments = comment_lines(root / "pyproject.toml")
    # Drift: a member missing from the root lists, a stale catalog entry, a member's new test dependency.
    text = (root / "pyproject.toml").read_text()
    text = text.replace('    "gym-counter",\n', "", 1).replace("gym-counter = { workspace = true }\n", "")
    (root / "pyproject.toml").write_text(text)
    with open(root / "workspace.toml", "a") as catalog:
        catalog.write('\n[plugins.gone]\nkind = "resources"\npath = "plugins/resources/gone"\n')
    counter = root / "plugins" / "resources" / "counter" / "pyproject.toml"
    counter.write_text(counter.read_text().replace('"jsonschema>=4.18"]', '"jsonschema>=4.18", "rich>=13"]'))

    result = gym("workspace", "check", env=env)
    assert result.exit_code == 1, result.output
    for expected in (
        "added gym-counter to [project] dependencies",
        "[tool.uv.sources]",
        "added rich>=13",
        "removed [plugins.gone]",
        "gym workspace sync",
    ):
        assert expected in result.output, result.output
    assert "gym-counter = " not in (root / "pyproject.toml").read_text()  # check writes nothing

    result = gym("workspace", "sync", env=env)
    assert result.exit_code == 0, result.output
    assert gym("workspace", "check", env=env).exit_code == 0
    pyproject = tomllib.loads((root / "pyproject.toml").read_text())
    assert (
        "gym-counter" in pyproject["project"]["dependencies"] and "rich>=13" in pyproject["dependency-groups"]["test"]
    )
    assert "gone" not in tomllib.loads((root / "workspace.toml").read_text())["plugins"]
    assert comment_lines(root / "pyproject.toml") == comments
    assert gym("workspace", "sync", env=env).output.strip().endswith("was in sync already")


def test_workspace_check_outside_a_workspace_is_a_usage_error(tmp_path, monkeypatch, gym):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GYM_WORKSPACE", raising=False)
    result = gym("workspace", "check")
    assert result.exit_code == 2
    assert "no workspace.toml" in result.output


@pytest.mark.skipif(find_uv() is None, reason="needs uv")
def test_uv_run_pytest_runs_a_new_plugin_s_tests(tmp_path, gym):
    """End to end, as a user would: `gym plugin new`, then `uv run pytest` installs the new member
    and runs its tests. A small workspace (gym-core and the new plugin) keeps its venv quick to build."""
    root = tmp_path / "ws"
    core = root / "packages" / "gym-core"
    core.mkdir(parents=True)
    (core / "src").symlink_to(REPO / "packages" / "gym-core" / "src")
    shutil.copy(REPO / "packages" / "gym-core" / "README.md", core / "README.md")
    # gym-core without its test group: that names first-party plugins this workspace lacks.
    project = (REPO / "packages" / "gym-core" / "pyproject.toml").read_text().split("[dependency-groups]")[0]
    (core / "pyproject.toml").write_text(
        project + '[build-system]\nrequires = ["hatchling"]\nbuild-backend = "hatchling.build"\n'
    )
    (root / "pyproject.toml").write_text(
        '[project]\nname = "ws"\nversion = "0"\nrequires-python = ">=3.11"\ndependencies = ["gym-core"]\n\n'
        '[dependency-groups]\ntest = ["pytest>=8"]\ndev = [{ include-group = "test" }]\n\n'
        '[tool.uv]\npackage = false\n\n[tool.uv.workspace]\nmembers = ["packages/*", "plugins/resources/*"]\n\n'
        "[tool.uv.sources]\ngym-core = { workspace = true }\n"
    )
    (root / "workspace.toml").write_text('[core]\npath = "packages/gym-core"\n')
    assert gym("plugin", "new", "resources", "probe-env-xyz", env={"GYM_WORKSPACE": str(root)}).exit_code == 0

    environ = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "UV_PROJECT_ENVIRONMENT", "PYTHONPATH")}
    proc = subprocess.run(
        [find_uv(), "run", "pytest", "plugins/resources/probe_env_xyz", "-q", "-p", "no:cacheprovider"],
        cwd=root,
        env=environ,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = proc.stdout.strip().splitlines()[-1]
    # Every test of the new plugin ran, bar the one of the example config (no first-party plugins here).
    assert re.fullmatch(r"\d+ passed, 1 skipped in .*", summary), proc.stdout
