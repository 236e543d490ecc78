"""What `gym test` installs into a plugin's venv before its tests run (gym_cli.plugin_tests): the kept
compiled wheels, a workspace sibling's extras, a sibling's code as it is now. Tiny packages made in
tmp_path and installed by uv offline into a bare venv: no index, no compile."""

from __future__ import annotations

import base64
import hashlib
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from rich.console import Console

from gym_cli.catalog import Catalog
from gym_cli.plugin_tests import TEST_REQUIREMENTS, _install_state, _install_test_requirements, requirements_for_tests
from gym_cli.sources import PluginSource
from gym_cli.venvs import Venv, VenvManager, find_uv
from gym_cli.venvs.keys import build_variables
from gym_cli.venvs.wheels import Wheelhouse

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    monkeypatch.setenv("UV_OFFLINE", "1")


def bare_venv(tmp_path: Path) -> Venv:
    path = tmp_path / "venv"
    uv = find_uv()
    assert uv is not None
    subprocess.run([uv, "venv", "-q", "--python", sys.executable, str(path)], check=True, timeout=60)
    return Venv("probe", path, path / "bin" / "python", "key", reused=True)


def run_in(venv: Venv, code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(venv.python), "-c", code], capture_output=True, text=True, timeout=60)


def make_wheel(directory: Path, name: str, body: str) -> Path:
    """A pure-Python wheel of distribution ``name`` 0.1 whose module holds ``body``."""
    module = name.replace("-", "_")
    dist_info = f"{module}-0.1.dist-info"
    files = {
        f"{module}.py": body,
        f"{dist_info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n",
        f"{dist_info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for path, text in files.items():
        sha = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={sha},{len(text.encode())}")
    files[f"{dist_info}/RECORD"] = "\n".join([*record, f"{dist_info}/RECORD,,"]) + "\n"
    directory.mkdir(parents=True, exist_ok=True)
    wheel = directory / f"{module}-0.1-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for path, text in files.items():
            zf.writestr(path, text)
    return wheel


def make_plugin(root: Path, folder: str, project: str, body: str) -> Path:
    """A hatchling package ``gym-<folder>`` with module ``gym_<folder>`` (``body``); ``project``: more
    of its [project] table."""
    package = root / folder
    module = package / "src" / f"gym_{folder}"
    module.mkdir(parents=True)
    (module / "__init__.py").write_text(body)
    (package / "pyproject.toml").write_text(
        f'[project]\nname = "gym-{folder}"\nversion = "0.1.0"\n{project}\n'
        '[build-system]\nrequires = ["hatchling"]\nbuild-backend = "hatchling.build"\n'
    )
    return package


def workspace(tmp_path: Path, plugins: dict[str, str], test_group: str) -> tuple[Catalog, Path]:
    """A catalog of ``plugins`` (folder -> [project] extra lines) and a plugin ``under_test`` whose test
    group is ``test_group``."""
    root = tmp_path / "ws"
    lines = []
    for folder, project in plugins.items():
        make_plugin(root, folder, project, "VALUE = 1\n")
        lines.append(f'[plugins.{folder}]\nkind = "resource"\npath = "{folder}"\n')
    (root / "workspace.toml").write_text("\n".join(lines))
    under_test = make_plugin(root, "under_test", f"\n[dependency-groups]\ntest = {test_group}\n", "")
    return Catalog(root / "workspace.toml"), under_test


def install(venv: Venv, requirements: list[str], home: Path, root: Path, source: PluginSource) -> None:
    _install_test_requirements(venv, requirements, Console(quiet=True), VenvManager(home=home), root, source)


def test_a_wheel_kept_in_its_subfolder_of_the_wheelhouse_is_offered_to_uv(tmp_path):
    """llama-cpp-python's wheel is kept in wheels/llama-cpp-python-<variables>/: a test venv must be
    offered that folder, or it compiles llama.cpp again (10 minutes). A tiny wheel stands in."""
    home = tmp_path / "home"
    variables = build_variables(None, ROOT)[0]  # pyright: ignore[reportArgumentType]
    kept = Wheelhouse(home / "wheels").path_for("llama-cpp-python", variables["llama-cpp-python"])
    make_wheel(kept, "gym-kept-probe", "KEPT = True\n")
    venv = bare_venv(tmp_path)
    source = PluginSource(name="probe", path=ROOT / "plugins" / "models" / "scripted")

    install(venv, ["gym-kept-probe"], home, ROOT, source)  # offline: only the kept folder has it

    assert run_in(venv, "import gym_kept_probe; print(gym_kept_probe.KEPT)").stdout.strip() == "True"


def test_a_sibling_plugin_s_extra_is_installed_with_its_dependencies(tmp_path):
    links = tmp_path / "links"
    make_wheel(links, "gym-extra-dep", "EXTRA = 'here'\n")
    catalog, under_test = workspace(
        tmp_path, {"x": '[project.optional-dependencies]\nfancy = ["gym-extra-dep"]\n'}, '["gym-x[fancy]"]'
    )
    requirements = requirements_for_tests(under_test, catalog)
    assert requirements == [*TEST_REQUIREMENTS, f"-e {catalog.root / 'x'}[fancy]"]
    venv = bare_venv(tmp_path)
    source = PluginSource(name="under_test", path=under_test, find_links=(str(links),))

    install(venv, requirements[len(TEST_REQUIREMENTS) :], tmp_path / "home", catalog.root, source)

    probe = run_in(venv, "import gym_x, gym_extra_dep; print(gym_x.VALUE, gym_extra_dep.EXTRA)")
    assert probe.stdout.split() == ["1", "here"], probe.stderr


def test_an_edited_sibling_plugin_is_what_the_next_run_imports(tmp_path):
    catalog, under_test = workspace(tmp_path, {"x": ""}, '["gym-x"]')
    requirements = requirements_for_tests(under_test, catalog)[len(TEST_REQUIREMENTS) :]
    venv = bare_venv(tmp_path)
    source = PluginSource(name="under_test", path=under_test)
    install(venv, requirements, tmp_path / "home", catalog.root, source)
    assert run_in(venv, "import gym_x; print(gym_x.VALUE)").stdout.strip() == "1"

    (catalog.root / "x" / "src" / "gym_x" / "__init__.py").write_text("VALUE = 2\n")
    install(venv, requirements, tmp_path / "home", catalog.root, source)  # the second `gym test`

    assert run_in(venv, "import gym_x; print(gym_x.VALUE)").stdout.strip() == "2"


def test_a_sibling_that_gains_a_dependency_is_installed_again(tmp_path):
    catalog, under_test = workspace(tmp_path, {"x": ""}, '["gym-x"]')
    requirements = requirements_for_tests(under_test, catalog)
    before = _install_state(requirements)
    pyproject = catalog.root / "x" / "pyproject.toml"
    pyproject.write_text(
        pyproject.read_text().replace('version = "0.1.0"\n', 'version = "0.1.0"\ndependencies = ["rich"]\n')
    )
    assert _install_state(requirements) != before
