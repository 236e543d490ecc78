"""Environments from published packages: `gym plugin build` and its metadata checks, and, outside this
repository, a fresh venv with gym installed from wheels that installs published plugins with
`gym plugin install NAME --find-links DIR`, collects rollouts on them and runs their tests."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from gym_cli.commands.plugin_new import render_template
from gym_cli.distributions import check_core_requirement, check_wheel
from gym_cli.plugin_examples import config_server_types, wheels_registering
from gym_cli.venvs import find_uv
from gym_cli.venvs.wheels import installed_wheel

ROOT = Path(__file__).resolve().parents[3]
COUNTER_TASKS = ROOT / "plugins" / "resources" / "counter" / "data" / "example.jsonl"
COUNTER_CONFIG = ROOT / "plugins" / "resources" / "counter" / "configs" / "counter_scripted.yaml"


# --- the gym-core dependency -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "requires",
    [
        ["gym-core>=0.1"],
        ["gym-core>=0.1,<0.2"],
        ["gym-core~=0.1"],
        ["gym-core==0.1.*"],
        ["msgspec", "gym_core >= 0.1.0"],
    ],
)
def test_a_floor_on_gym_core_is_accepted(requires):
    assert check_core_requirement(requires, "0.1.0") == []


@pytest.mark.parametrize(
    "requires, says",
    [
        (["gym-core"], "no version range"),
        (["gym-core==0.1.0"], "exact pin (==0.1.0)"),
        (["gym-core===0.1.0"], "exact pin"),
        (["gym-core>=0.1.0.dev3"], "development or local version"),
        (["gym-core>=0.1,!=0.1.0+ws"], "development or local version"),
        (["gym-core<0.2"], "has no floor"),
        (["gym-core>=0.3"], "excludes the gym-core running now (0.1.0)"),
        (["gym-core @ file:///work/packages/gym-core"], "points at file:///work/packages/gym-core"),
        (["msgspec", "gym-core>=0.1; extra == 'dev'"], "does not depend on gym-core"),
    ],
)
def test_a_bad_gym_core_dependency_is_named(requires, says):
    problems = check_core_requirement(requires, "0.1.0")
    assert len(problems) == 1 and says in problems[0], problems
    assert "gym-core>=0.1.0" in problems[0]  # the fix, with this gym's version


def test_the_template_depends_on_a_floor_the_checks_accept(tmp_path):
    """A plugin made with `gym plugin new` can be published as it is, also from a development gym."""
    render_template("resources", "my_env", tmp_path / "my_env")
    requires = tomllib.loads((tmp_path / "my_env" / "pyproject.toml").read_text())["project"]["dependencies"]
    assert [r for r in requires if r.startswith("gym-core")] == ["gym-core>=0.1.0"]
    assert check_core_requirement(requires, "0.1.0") == []


# --- wheels and `gym plugin build` -----------------------------------------------------------------


def _wheel(path: Path, metadata: str, entry_points: str | None, files: dict[str, str]) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        for name, text in files.items():
            zf.writestr(name, text)
        zf.writestr("gym_x-0.1.0.dist-info/METADATA", metadata)
        if entry_points is not None:
            zf.writestr("gym_x-0.1.0.dist-info/entry_points.txt", entry_points)
    return path


def test_check_wheel_accepts_a_good_wheel_and_names_what_is_wrong_with_bad_ones(tmp_path):
    head = "Metadata-Version: 2.3\nName: gym-x\nVersion: 0.1.0\nRequires-Dist: gym-core>=0.1\n"
    good = check_wheel(
        _wheel(
            tmp_path / "good.whl",
            head + "\n# gym-x\n",
            "[gym]\nx = gym_x.plugin\n",
            {"gym_x/__init__.py": "", "gym_x/plugin.py": ""},
        ),
        "0.1.0",
    )
    assert (good.problems, good.name, good.version, good.entry_points) == ([], "gym-x", "0.1.0", {"x": "gym_x.plugin"})

    other_group = check_wheel(
        _wheel(
            tmp_path / "other.whl", head + "\n# gym-x\n", "[console_scripts]\nx = gym_x:main\n", {"gym_x/plugin.py": ""}
        ),
        "0.1.0",
    )
    assert len(other_group.problems) == 1
    assert "no entry point in group 'gym'" in other_group.problems[0]
    assert '[project.entry-points.gym] x = "<module>.plugin"' in other_group.problems[0]

    typo = check_wheel(
        _wheel(
            tmp_path / "typo.whl", head + "\n# gym-x\n", "[gym]\nx = gym_x.plugins\n", {"gym_x/plugin/__init__.py": ""}
        ),
        "0.1.0",
    )
    assert (
        len(typo.problems) == 1 and "names module 'gym_x.plugins', which the wheel does not contain" in typo.problems[0]
    )

    no_readme = check_wheel(
        _wheel(tmp_path / "bare.whl", head, "[gym]\nx = gym_x.plugin\n", {"gym_x/plugin/__init__.py": ""}), "0.1.0"
    )
    assert len(no_readme.problems) == 1 and "no long description" in no_readme.problems[0]
    assert 'readme = "README.md"' in no_readme.problems[0]


def _package(directory: Path, *, entry_point: str, readme: bool, core: str) -> Path:
    (directory / "src" / "gym_bad").mkdir(parents=True)
    (directory / "src" / "gym_bad" / "__init__.py").write_text("")
    (directory / "src" / "gym_bad" / "plugin.py").write_text("")
    if readme:
        (directory / "README.md").write_text("# gym-bad\n")
    (directory / "pyproject.toml").write_text(
        '[project]\nname = "gym-bad"\nversion = "0.1.0"\nrequires-python = ">=3.11"\n'
        + ('readme = "README.md"\n' if readme else "")
        + f'dependencies = ["{core}"]\n\n[project.entry-points.gym]\nbad = "{entry_point}"\n\n'
        '[build-system]\nrequires = ["hatchling"]\nbuild-backend = "hatchling.build"\n'
    )
    return directory


def test_build_refuses_a_package_listing_every_problem_and_writes_nothing(tmp_path, gym):
    package = _package(tmp_path / "bad", entry_point="gym_bad.plugins", readme=False, core="gym-core")
    out = tmp_path / "dist"
    result = gym("plugin", "build", str(package), "--out", str(out))
    assert result.exit_code == 1, result.output
    assert "gym_bad-0.1.0-py3-none-any.whl cannot be published" in result.output
    assert "names module 'gym_bad.plugins', which the wheel does not contain" in result.output
    assert "no long description" in result.output
    assert "gym-core dependency has no version range" in result.output
    assert "holds no tests/" in result.output  # a note, not a problem
    assert [p.name for p in out.iterdir()] == []  # nothing half-checked to install or publish


def test_build_writes_the_sdist_and_wheel_of_a_good_package(tmp_path, gym):
    package = _package(tmp_path / "good", entry_point="gym_bad.plugin", readme=True, core="gym-core>=0.1")
    out = tmp_path / "dist"
    result = gym("plugin", "build", str(package), "--out", str(out))
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in out.iterdir()) == ["gym_bad-0.1.0-py3-none-any.whl", "gym_bad-0.1.0.tar.gz"]
    assert f"gym plugin install gym-bad --find-links {out}" in result.output


def test_build_of_a_catalog_plugin_installed_from_a_requirement_is_refused(tmp_path, monkeypatch, gym):
    (tmp_path / "workspace.toml").write_text('[plugins.far]\nkind = "resources"\nrequirement = "gym-far"\n')
    monkeypatch.setenv("GYM_WORKSPACE", str(tmp_path))
    result = gym("plugin", "build", "far")
    assert result.exit_code == 2
    assert "installed from gym-far, not from a package directory" in result.output


def test_install_options_are_checked_before_anything_is_built(tmp_path, monkeypatch, gym):
    monkeypatch.setenv("GYM_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    missing = gym("plugin", "install", "gym-x", "--find-links", str(tmp_path / "nowhere"))
    assert missing.exit_code == 2
    assert f"--find-links {tmp_path / 'nowhere'}: no such directory" in missing.output
    on_a_path = gym("plugin", "install", str(ROOT / "plugins" / "resources" / "counter"), "--find-links", str(tmp_path))
    assert on_a_path.exit_code == 2
    assert "--find-links and --index-url apply to a requirement" in on_a_path.output
    secret = gym("plugin", "install", "gym-x", "--index-url", "https://me:s3cret@pkgs.example/simple")
    assert secret.exit_code == 2
    assert "--index-url: the URL holds credentials" in secret.output and "s3cret" not in secret.output
    assert not (tmp_path / "home" / "venvs").exists()


def test_an_editable_gym_core_is_never_rebuilt_as_a_wheel(tmp_path):
    """In the workspace gym-core is an editable install: its venvs install the source directory."""
    with pytest.raises(ValueError, match="installed editable"):
        installed_wheel("gym-core", tmp_path)


# --- example data and configs, and the server types they use -------------------------------------


def test_the_server_types_an_environment_s_configs_use_and_the_wheels_that_register_them(tmp_path):
    configs = tmp_path / "configs"
    configs.mkdir()
    (configs / "a.yaml").write_text("env:\n  plugin: my_env\nagent:\n  plugin: simple_agent\n  x: 1\n")
    (configs / "b.yml").write_text("# comment only\nmodel: {plugin: scripted}\nnot_an_instance: 3\n")
    (configs / "broken.yaml").write_text("a: [\n")  # reported where it is used, not here
    (tmp_path / "data.yaml").write_text("x:\n  plugin: not_a_config\n")  # outside configs/
    files = [*configs.iterdir(), tmp_path / "data.yaml"]
    assert config_server_types(files) == {"my_env", "simple_agent", "scripted"}

    wheels = tmp_path / "wheels"
    wheels.mkdir()
    head = "Metadata-Version: 2.3\nName: gym-x\nVersion: 0.1.0\n"
    _wheel(wheels / "gym_x-0.1.0-py3-none-any.whl", head, "[gym]\nsimple_agent = gym_x.plugin\n", {})
    _wheel(wheels / "other-0.1.0-py3-none-any.whl", head, "[console_scripts]\nscripted = gym_x:main\n", {})
    (wheels / "broken-0.1.0-py3-none-any.whl").write_bytes(b"not a zip")
    found = wheels_registering(
        [str(wheels), str(tmp_path / "nowhere"), "https://pkgs.example/simple"], ["scripted", "simple_agent"]
    )
    assert found == {"simple_agent": "gym-x"}  # scripted: no wheel registers it in group gym


def test_examples_copies_a_plugin_s_data_and_configs_and_keeps_what_is_there(tmp_path, gym):
    out = tmp_path / "counter"
    copied = gym("plugin", "examples", "counter", "--out", str(out))
    assert copied.exit_code == 0, copied.output
    source = ROOT / "plugins" / "resources" / "counter"
    expected = sorted(
        p.relative_to(source).as_posix() for d in ("data", "configs") for p in (source / d).rglob("*") if p.is_file()
    )
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()) == expected
    assert (out / "data" / "example.jsonl").read_bytes() == COUNTER_TASKS.read_bytes()

    (out / "data" / "example.jsonl").write_text("mine\n")
    again = gym("plugin", "examples", "counter", "--out", str(out))
    assert again.exit_code == 2 and "already holds" in again.output and "--force" in again.output
    assert (out / "data" / "example.jsonl").read_text() == "mine\n"  # nothing overwritten
    forced = gym("plugin", "examples", "counter", "--out", str(out), "--force")
    assert forced.exit_code == 0 and (out / "data" / "example.jsonl").read_bytes() == COUNTER_TASKS.read_bytes()

    unknown = gym("plugin", "examples", "countr", "--out", str(tmp_path / "x"))
    assert unknown.exit_code == 2 and "unknown server type 'countr'" in unknown.output
    assert not (tmp_path / "x").exists()


def test_every_plugin_ships_its_data_and_configs_in_its_wheel():
    """Each plugin with data/ or configs/ force-includes them under <module>/examples/ (what `gym plugin
    examples` reads from an installed wheel); the template's plugins too (checked where it is rendered)."""
    missing = []
    for pyproject in sorted(ROOT.glob("plugins/*/*/pyproject.toml")):
        directory = pyproject.parent
        table = tomllib.loads(pyproject.read_text())
        module = next(iter(table["project"]["entry-points"]["gym"].values())).split(".")[0]
        included = table.get("tool", {}).get("hatch", {}).get("build", {}).get("targets", {}).get("wheel", {})
        included = included.get("force-include", {})
        for name in ("data", "configs"):
            if (directory / name).is_dir() and included.get(name) != f"{module}/examples/{name}":
                missing.append(f"{directory.relative_to(ROOT)}: {name}")
    assert missing == [], missing


def test_the_template_ships_its_data_and_configs_in_its_wheel(tmp_path):
    uv = find_uv()
    assert uv is not None
    render_template("resources", "my_env", tmp_path / "my_env")
    subprocess.run(
        [uv, "build", "--wheel", "--out-dir", str(tmp_path / "dist"), str(tmp_path / "my_env")],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = (tmp_path / "dist").glob("*.whl")
    with zipfile.ZipFile(wheel) as zf:
        examples = sorted(n for n in zf.namelist() if "/examples/" in n)
    assert examples == ["gym_my_env/examples/configs/my_env.yaml", "gym_my_env/examples/data/example.jsonl"]


def test_build_all_builds_every_catalog_plugin_and_names_those_that_fail(tmp_path, monkeypatch, gym):
    first = _package(tmp_path / "one", entry_point="gym_bad.plugin", readme=True, core="gym-core>=0.1")
    second = _package(tmp_path / "two", entry_point="gym_two.plugins", readme=True, core="gym-core>=0.1")
    (second / "pyproject.toml").write_text((second / "pyproject.toml").read_text().replace("gym-bad", "gym-two"))
    (second / "src" / "gym_bad").rename(second / "src" / "gym_two")
    (second / "configs").mkdir()
    (second / "configs" / "two.yaml").write_text("two:\n  plugin: two\n")  # not in its wheel either
    (tmp_path / "workspace.toml").write_text(
        '[plugins.one]\nkind = "resources"\npath = "one"\n\n[plugins.two]\nkind = "resources"\npath = "two"\n'
    )
    monkeypatch.setenv("GYM_WORKSPACE", str(tmp_path))
    neither = gym("plugin", "build")
    assert neither.exit_code == 2 and "or give --all" in neither.output
    out = tmp_path / "dist"
    built = gym("plugin", "build", "--all", "--out", str(out))
    assert built.exit_code == 1, built.output
    assert "1 of 2 plugins cannot be published: two" in built.output
    assert "names module 'gym_two.plugins', which the wheel does not contain" in built.output
    assert "its configs/ is not in the wheel" in built.output
    assert '[tool.hatch.build.targets.wheel.force-include] "configs" = "gym_two/examples/configs"' in built.output
    assert sorted(p.name for p in out.iterdir()) == ["gym_bad-0.1.0-py3-none-any.whl", "gym_bad-0.1.0.tar.gz"]
    assert first.is_dir()


# --- outside the repository ------------------------------------------------------------------------


def _run(argv: list[str], cwd: Path, env: dict[str, str], timeout: float = 300) -> str:
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"{' '.join(argv)} exited {proc.returncode}:\n{output}"
    return output


def test_published_plugins_install_run_and_test_outside_the_repository(tmp_path, gym):
    """gym and three plugins built into local package directories; a fresh venv with gym installed from
    them, with no network (uv offline: its cache and those directories only); in an empty directory:
    install the environment (the agent and model its example config uses come along), copy its
    example data and configs out of its wheel, collect, test. gym-core comes from no index: the
    plugins' venvs get the wheel gym rebuilds from its own installed gym-core."""
    uv = find_uv()
    assert uv is not None
    env = {
        k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "GYM_WORKSPACE", "PYTHONPATH", "GYM_PLUGINS")
    }
    # Third-party packages at the versions the workspace locks (so uv's cache has them).
    constraints = tmp_path / "constraints.txt"
    constraints.write_text(
        _run(
            [uv, "export", "--frozen", "--no-hashes", "--no-emit-workspace", "--all-groups", "--all-packages"],
            ROOT,
            env,
        )
    )
    env.update(GYM_HOME=str(tmp_path / "home"), UV_CONSTRAINT=str(constraints), UV_OFFLINE="1")

    gym_wheels, plugins = tmp_path / "gym-wheels", tmp_path / "plugins"
    for package in ("gym-core", "gym-cli"):
        _run(
            [uv, "build", "--wheel", "--no-sources", "--out-dir", str(gym_wheels), str(ROOT / "packages" / package)],
            ROOT,
            env,
        )
    directories = [str(ROOT / "plugins" / p) for p in ("resources/counter", "agents/simple_agent", "models/scripted")]
    built = gym("plugin", "build", *directories, "--out", str(plugins))
    assert built.exit_code == 0, built.output
    assert not any(p.name.startswith("gym_core") for p in plugins.iterdir())  # gym-core is not offered there
    with zipfile.ZipFile(plugins / "gym_counter-0.1.0-py3-none-any.whl") as wheel:
        examples = sorted(n for n in wheel.namelist() if "/examples/" in n)
    assert examples == [
        "gym_counter/examples/configs/counter.yaml",
        "gym_counter/examples/configs/counter_scripted.yaml",
        "gym_counter/examples/data/example.jsonl",
        "gym_counter/examples/data/example_rollouts.jsonl",
    ]

    venv = tmp_path / "venv"
    _run([uv, "venv", "--python", sys.executable, str(venv)], tmp_path, env)
    _run(
        [uv, "pip", "install", "--python", str(venv / "bin" / "python"), "--find-links", str(gym_wheels), "gym-cli"],
        tmp_path,
        env,
    )
    gym = str(venv / "bin" / "gym")

    work = tmp_path / "work"
    work.mkdir()
    # The environment only: the server types its configs use come from the same directory.
    installed = _run([gym, "plugin", "install", "gym-counter", "--find-links", str(plugins)], work, env)
    for distribution in ("gym-counter", "gym-simple-agent", "gym-scripted"):
        assert f"installed {distribution} 0.1.0" in installed, installed
    catalog = tomllib.loads((tmp_path / "home" / "workspace.toml").read_text())["plugins"]
    assert catalog["counter"] == {"kind": "resources", "requirement": "gym-counter", "find-links": [str(plugins)]}
    assert catalog["simple_agent"]["requirement"] == "gym-simple-agent"
    assert sorted(catalog) == ["counter", "scripted", "simple_agent"]
    (site,) = (tmp_path / "home" / "venvs").glob("counter-*/lib/python*/site-packages")
    (core,) = site.glob("gym_core-*.dist-info")
    origin = json.loads((core / "direct_url.json").read_text())["url"]
    assert origin.startswith(f"file://{tmp_path / 'home' / 'wheels' / 'gym-core'}/") and origin.endswith(".whl")
    assert (site / "gym_counter").is_dir() and not list(site.glob("*.pth"))  # installed, not editable

    copied = _run([gym, "plugin", "examples", "counter"], work, env)
    assert "copied 4 files of counter" in copied, copied
    assert (work / "counter" / "data" / "example.jsonl").read_text() == COUNTER_TASKS.read_text()
    assert (work / "counter" / "configs" / "counter_scripted.yaml").read_text() == COUNTER_CONFIG.read_text()
    _run(
        [
            gym,
            "collect",
            "--serve",
            "counter/configs/counter_scripted.yaml",
            "--set",
            "head_server.port=0",
            "--input",
            "counter/data/example.jsonl",
            "--limit",
            "3",
            "--output",
            str(tmp_path / "rollouts.jsonl"),
            "--no-profile",
        ],
        work,
        env,
    )
    rows = [json.loads(line) for line in (tmp_path / "rollouts.jsonl").read_text().splitlines()]
    # The script adds 3: only the first task (0 -> 3) is solved.
    assert [(r["task_index"], r["reward"], r["environment"]) for r in sorted(rows, key=lambda r: r["task_index"])] == [
        (0, 1.0, "counter"),
        (1, 0.0, "counter"),
        (2, 0.0, "counter"),
    ]

    tested = _run([gym, "test", "counter", "-q"], work, env, timeout=600)
    assert re.search(r"│ counter\s*│ passed\s*│\s*[1-9]\d* │\s*0 │", tested), tested  # some ran, none failed
    assert (tmp_path / "home" / "sources" / "gym-counter-0.1.0" / "tests").is_dir()  # from its sdist
    assert sorted(p.name for p in work.iterdir()) == ["counter"]  # nothing written where the user is but the copy


def test_a_config_naming_a_server_type_no_plugin_registers_says_to_install_it(tmp_path, gym):
    config = tmp_path / "config.yaml"
    config.write_text("env:\n  plugin: counter\nagent:\n  plugin: my_agent\n")
    result = gym(
        "collect", "--serve", str(config), "--input", str(COUNTER_TASKS), "--output", str(tmp_path / "o.jsonl")
    )
    assert result.exit_code == 2, result.output
    assert "agent.plugin: unknown server type 'my_agent'" in result.output
    assert "`gym plugin install gym-my-agent`, say" in result.output
