"""Plugins' venvs, built with the real uv (no mocks) from tiny packages made in tmp_path."""

from __future__ import annotations

import subprocess
import threading
from pathlib import Path

import pytest

from gym_cli.sources import PluginSource
from gym_cli.venvs import MARKER, UvNotFoundError, VenvBuildError, VenvManager, find_uv
from gym_cli.venvs.layout import site_packages

pytestmark = pytest.mark.skipif(find_uv() is None, reason="uv is not installed")

PYPROJECT = """\
[project]
name = "{name}"
version = "{version}"
dependencies = {dependencies}
{extra}
[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"
"""


def make_package(
    root: Path,
    name: str,
    *,
    version: str = "0.1.0",
    dependencies: list[str] | None = None,
    extra: str = "",
    code: str = "VALUE = 'v1'\n",
) -> Path:
    module = name.replace("-", "_")
    (root / "src" / module).mkdir(parents=True, exist_ok=True)
    (root / "src" / module / "__init__.py").write_text(code)
    deps = "[" + ", ".join(f'"{d}"' for d in (dependencies or [])) + "]"
    (root / "pyproject.toml").write_text(PYPROJECT.format(name=name, version=version, dependencies=deps, extra=extra))
    return root


@pytest.fixture
def core(tmp_path: Path) -> Path:
    return make_package(tmp_path / "core", "fake-gym-core", code="CORE = True\n")


@pytest.fixture
def plugin(tmp_path: Path) -> Path:
    return make_package(tmp_path / "plugin", "demo-plugin", dependencies=["fake-gym-core"])


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "gym-home"
    monkeypatch.setenv("GYM_HOME", str(home))
    return home


def manager(core: Path, messages: list[str] | None = None, **kwargs) -> VenvManager:
    sink = messages.append if messages is not None else None
    return VenvManager(core_path=core, console=sink, **kwargs)


def counting_uv(tmp_path: Path) -> tuple[str, Path]:
    """A uv that records each of its invocations in a file, then runs the real uv."""
    calls = tmp_path / "uv-calls.txt"
    script = tmp_path / "counting-uv"
    script.write_text(f'#!/bin/sh\necho "$*" >> "{calls}"\nexec "{find_uv()}" "$@"\n')
    script.chmod(0o755)
    return str(script), calls


def uv_calls(calls: Path) -> list[str]:
    return calls.read_text().splitlines() if calls.exists() else []


def run_in(env_python: Path, code: str) -> str:
    return subprocess.run([str(env_python), "-c", code], capture_output=True, text=True, check=True).stdout.strip()


def test_build_then_reuse_without_uv(home: Path, core: Path, plugin: Path, tmp_path: Path) -> None:
    messages: list[str] = []
    source = PluginSource("demo", path=plugin)
    uv, calls = counting_uv(tmp_path)
    env = manager(core, messages, uv=uv).ensure(source)
    assert not env.reused
    assert env.path.parent == home / "venvs" and env.path.name == f"demo-{env.key}" and len(env.key) == 12
    assert (env.path / MARKER).is_file()
    assert (
        run_in(env.python, "import demo_plugin, fake_gym_core; print(demo_plugin.VALUE, fake_gym_core.CORE)")
        == "v1 True"
    )
    assert messages[0] == "building venv for demo…" and messages[1].startswith("built venv for demo in ")
    built_with = uv_calls(calls)
    assert [call.split()[:2] for call in built_with] == [["venv", "--no-project"], ["pip", "install"]]
    # Installed with bytecode compiled: servers import without compiling, even where bytecode is
    # never written at import time.
    assert "--compile-bytecode" in built_with[1].split()

    # Reuse: uv is not called at all.
    messages.clear()
    again = manager(core, messages, uv=uv).ensure(source)
    assert again.reused and again.path == env.path and again.key == env.key
    assert messages == ["reused venv for demo"]
    assert uv_calls(calls) == built_with

    # Editable: a code edit shows without a rebuild, still without uv.
    (plugin / "src" / "demo_plugin" / "__init__.py").write_text("VALUE = 'v2'\n")
    assert manager(core, uv=uv).ensure(source).reused
    assert run_in(env.python, "import demo_plugin; print(demo_plugin.VALUE)") == "v2"
    assert uv_calls(calls) == built_with

    infos = manager(core).list_venvs()
    assert [(i.name, i.key, i.complete, i.source) for i in infos] == [("demo", env.key, True, str(plugin))]


def test_key_follows_dependencies_versions_and_core(home: Path, core: Path, plugin: Path, tmp_path: Path) -> None:
    source = PluginSource("demo", path=plugin)
    m = manager(core)
    first = m.ensure(source)
    assert m.key_for(source) == first.key

    make_package(plugin, "demo-plugin", dependencies=["fake-gym-core"], code="VALUE = 'edited'\n")
    assert m.key_for(source) == first.key  # code does not count

    make_package(
        plugin,
        "demo-plugin",
        dependencies=["fake-gym-core"],
        extra='[project.optional-dependencies]\nx = ["fake-gym-core"]\n',
    )
    with_extra = m.key_for(source)
    assert with_extra != first.key
    make_package(plugin, "demo-plugin", dependencies=["fake-gym-core", "fake-gym-core"])
    assert m.key_for(source) not in (first.key, with_extra)
    make_package(plugin, "demo-plugin", version="0.2.0", dependencies=["fake-gym-core"])
    assert m.key_for(source) != first.key
    make_package(
        plugin,
        "demo-plugin",
        dependencies=["fake-gym-core"],
        extra='[project.entry-points.gym]\ndemo = "demo_plugin"\n',
    )
    rebuilt = m.ensure(source)
    assert not rebuilt.reused and rebuilt.key != first.key and rebuilt.path != first.path
    assert (
        run_in(rebuilt.python, "from importlib.metadata import entry_points as e; print(e(group='gym')['demo'].value)")
        == "demo_plugin"
    )

    make_package(core, "fake-gym-core", version="0.2.0")
    assert m.key_for(source) != rebuilt.key  # gym-core's metadata counts too
    assert VenvManager(core_path=core, python="3.99").key_for(source) != m.key_for(source)
    assert m.key_for(PluginSource("other", path=plugin)) != m.key_for(source)
    req = PluginSource("demo", requirement="demo-plugin", version="1.0")
    assert req.install_requirement == "demo-plugin==1.0"
    assert m.key_for(req) != m.key_for(PluginSource("demo", requirement="demo-plugin", version="1.1"))


def test_failed_build_raises_with_uv_output_and_leaves_nothing(home: Path, core: Path, tmp_path: Path) -> None:
    broken = make_package(tmp_path / "broken", "broken-plugin", dependencies=["gym-no-such-package-xyz"])
    m = manager(core)
    with pytest.raises(VenvBuildError) as info:
        m.ensure(PluginSource("broken", path=broken))
    err = info.value
    assert err.plugin == "broken"
    assert any("gym-no-such-package-xyz" in line for line in err.output_tail)
    assert 0 < len(err.output_tail) <= 30
    assert "gym-no-such-package-xyz" in str(err) and "uv pip install" in str(err)
    assert not any(p for p in (home / "venvs").iterdir() if not p.name.startswith("."))
    assert m.list_venvs() == []
    assert (home / "logs").is_dir() and any((home / "logs").iterdir())  # the full log stays for reading


def test_leftover_of_interrupted_build_is_replaced(home: Path, core: Path, plugin: Path) -> None:
    source = PluginSource("demo", path=plugin)
    m = manager(core)
    path = m.venv_dir(source)
    (path / "bin").mkdir(parents=True)
    (path / "bin" / "junk").write_text("half-written")
    assert [i.complete for i in m.list_venvs()] == [False]
    assert m.lookup(source) is None
    env = m.ensure(source)
    assert not env.reused and not (path / "bin" / "junk").exists()
    assert m.lookup(source) == env.__class__(env.name, env.path, env.python, env.key, reused=True)


def test_concurrent_ensure_builds_once(home: Path, core: Path, plugin: Path) -> None:
    source = PluginSource("demo", path=plugin)
    results = []
    errors = []

    def worker() -> None:
        try:
            results.append(manager(core).ensure(source))  # separate managers, as separate processes would be
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors
    assert sorted(r.reused for r in results) == [False, True]
    assert results[0].path == results[1].path
    assert len(manager(core).list_venvs()) == 1


def test_ensure_many_reports_progress(home: Path, core: Path, plugin: Path, tmp_path: Path) -> None:
    other = make_package(tmp_path / "other", "other-plugin", dependencies=["fake-gym-core"])
    messages: list[str] = []
    m = manager(core, messages)
    building: list[str] = []
    ready: list[tuple[str, bool]] = []
    envs = m.ensure_many(
        [PluginSource("demo", path=plugin), PluginSource("other", path=other)],
        max_parallel=2,
        on_ready=lambda source, venv: ready.append((source.name, venv.reused)),
        on_building=lambda source: building.append(source.name),
    )
    assert [e.name for e in envs] == ["demo", "other"] and not any(e.reused for e in envs)
    # gym collect --serve's start-up steps: each build as it starts, each venv ready in order.
    assert sorted(building) == ["demo", "other"] and ready == [("demo", False), ("other", False)]
    assert sorted(m for m in messages if m.startswith("building")) == [
        "building venv for demo…",
        "building venv for other…",
    ]
    assert len([m for m in messages if m.startswith("built venv for ")]) == 2
    messages.clear()
    building.clear()
    again = m.ensure_many(
        [PluginSource("demo", path=plugin), PluginSource("other", path=other)],
        on_building=lambda source: building.append(source.name),
    )
    assert all(e.reused for e in again) and building == []
    assert sorted(messages) == ["reused venv for demo", "reused venv for other"]

    assert m.remove("demo") == [envs[0].path]
    assert not envs[0].path.exists() and envs[1].path.exists()
    assert [i.name for i in m.list_venvs()] == ["other"]


def test_missing_uv_says_how_to_install(home: Path, core: Path, plugin: Path) -> None:
    with pytest.raises(UvNotFoundError, match="pip install uv"):
        manager(core, uv="/nonexistent/uv").ensure(PluginSource("demo", path=plugin))
    assert manager(core).list_venvs() == []


def test_not_a_package(home: Path, core: Path, tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(VenvBuildError, match="no pyproject.toml"):
        manager(core).ensure(PluginSource("empty", path=tmp_path / "empty"))
    with pytest.raises(ValueError):
        PluginSource("both", path=tmp_path, requirement="x")


def test_extras_are_installed_and_keyed(home: Path, core: Path, tmp_path: Path) -> None:
    """On a Ray cluster gym installs a plugin's `ray` extra: the extra's dependencies land in the venv,
    and the venv is a different one from the plain plugin's (both may be needed, by two runs)."""
    from gym_cli.catalog import CatalogEntry
    from gym_cli.sources import source_of_entry

    extra_dep = make_package(tmp_path / "extra-dep", "fake-ray")
    plugin = make_package(
        tmp_path / "with-extra",
        "demo-plugin",
        dependencies=["fake-gym-core"],
        extra=f'[project.optional-dependencies]\nray = ["fake-ray @ file://{extra_dep}"]\n'
        "[tool.hatch.metadata]\nallow-direct-references = true\n",
    )
    entry = CatalogEntry(name="demo", kind="resources", path=plugin)
    plain, with_ray = source_of_entry(entry), source_of_entry(entry, ["ray", "gpu"])
    assert plain.extras == () and with_ray.extras == ("ray",)  # gpu: not declared by the package, dropped
    m = manager(core)
    assert m.key_for(plain) != m.key_for(with_ray)
    env = m.ensure(with_ray)
    # A dependency installed into site-packages comes with its bytecode (`--compile-bytecode`),
    # before anything imported it.
    installed = [site / "fake_ray" for site in site_packages(env.path) if (site / "fake_ray").is_dir()]
    assert installed and list((installed[0] / "__pycache__").glob("__init__.*.pyc"))
    assert run_in(env.python, "import fake_ray, demo_plugin; print('ok')") == "ok"
    bare = m.ensure(plain)
    assert bare.path != env.path
    assert subprocess.run([str(bare.python), "-c", "import fake_ray"], capture_output=True).returncode != 0
    # A requirement's declaration is unknown before it is installed: every asked-for extra goes to uv.
    published = source_of_entry(CatalogEntry(name="demo", kind="resources", requirement="demo-plugin>=0.1"), ["ray"])
    assert published.install_requirement == "demo-plugin[ray]>=0.1"
