"""`[tool.gym] root-install = false`: a workspace member kept out of the root venv (gym-train, torch).

`gym workspace check`/`sync` derive the root lists from the members; such a member is left out of the
root dependencies, sources and test group, and is removed from them when found there.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from gym_core.errors import GymError

from gym_cli.workspace import check, find_members, sync

REPO = Path(__file__).resolve().parents[3]

ROOT = """\
[project]
name = "ws"
version = "0"
requires-python = ">=3.11"
dependencies = [
    "gym-light",
]

[dependency-groups]
test = [
    "pytest>=8",
]
dev = [{ include-group = "test" }]

[tool.uv]
package = false

[tool.uv.workspace]
members = ["packages/*"]

[tool.uv.sources]
gym-light = { workspace = true }
"""


def member(root: Path, name: str, test: list[str], extra: str = "") -> None:
    directory = root / "packages" / name
    directory.mkdir(parents=True)
    (directory / "pyproject.toml").write_text(
        f'[project]\nname = "{name}"\nversion = "0.1.0"\n\n[dependency-groups]\ntest = {test!r}\n{extra}'.replace(
            "'", '"'
        )
    )


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "pyproject.toml").write_text(ROOT)
    (root / "workspace.toml").write_text("[plugins]\n")
    member(root, "gym-light", ["pytest>=8"])
    member(root, "gym-heavy", ["pytest>=8", "heavy-test-only>=1"], "\n[tool.gym]\nroot-install = false\n")
    return root


def test_an_opted_out_member_is_left_out_of_the_root_lists(workspace):
    members = {m.distribution: m for m in find_members(workspace)}
    assert members["gym-heavy"].root_install is False and members["gym-light"].root_install is True
    # The root lists name gym-light only, and that is in sync: gym-heavy is not required there.
    assert check(workspace) == []
    pyproject = tomllib.loads((workspace / "pyproject.toml").read_text())
    assert pyproject["project"]["dependencies"] == ["gym-light"]
    assert "heavy-test-only>=1" not in pyproject["dependency-groups"]["test"]


def test_an_opted_out_member_found_in_the_root_lists_is_reported_and_removed(workspace):
    text = (workspace / "pyproject.toml").read_text()
    text = text.replace('    "gym-light",\n', '    "gym-light",\n    "gym-heavy",\n')
    text += "gym-heavy = { workspace = true }\n"
    (workspace / "pyproject.toml").write_text(text)

    drift = check(workspace)
    assert any("removed gym-heavy from [project] dependencies" in d and "root-install = false" in d for d in drift), (
        drift
    )
    assert any("removed gym-heavy from [tool.uv.sources]" in d for d in drift), drift

    changes, problems = sync(workspace)
    assert problems == [] and len(changes) == 2
    pyproject = tomllib.loads((workspace / "pyproject.toml").read_text())
    assert pyproject["project"]["dependencies"] == ["gym-light"]
    assert set(pyproject["tool"]["uv"]["sources"]) == {"gym-light"}
    assert check(workspace) == []


def test_the_command_agrees(workspace, gym):
    result = gym("workspace", "check", env={"GYM_WORKSPACE": str(workspace)})
    assert result.exit_code == 0, result.output
    assert "in sync" in result.output


def test_a_framework_package_with_a_command_is_not_catalogued(workspace):
    """A member under packages/ registering a command (as gym-train registers `gym train`) is no
    server plugin: workspace.toml, the catalog of server plugins, does not list it."""
    path = workspace / "packages" / "gym-heavy" / "pyproject.toml"
    path.write_text(path.read_text() + '\n[project.entry-points.gym]\ntrain = "gym_heavy.plugin"\n')
    assert check(workspace) == []
    assert sync(workspace) == ([], [])
    assert (workspace / "workspace.toml").read_text() == "[plugins]\n"


def test_a_root_install_that_is_not_a_boolean_is_a_clear_error(workspace):
    path = workspace / "packages" / "gym-heavy" / "pyproject.toml"
    path.write_text(path.read_text().replace("root-install = false", 'root-install = "no"'))
    with pytest.raises(GymError, match=r"gym-heavy/pyproject.toml: \[tool.gym\] root-install must be true or false"):
        check(workspace)


def test_gym_train_stays_out_of_the_root_venv():
    """torch (gym-train's) must never enter the root `uv sync`: gym-train opts out, and the root lists
    (kept in sync by test_the_repository_is_in_sync_with_its_members) do not name it."""
    members = {m.distribution: m for m in find_members(REPO)}
    assert members["gym-train"].root_install is False
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert "gym-train" not in pyproject["project"]["dependencies"]
    assert "gym-train" not in pyproject["tool"]["uv"]["sources"]
    assert not any(str(r).startswith("torch") for r in pyproject["dependency-groups"]["test"])
