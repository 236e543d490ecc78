"""Running each plugin's own ``tests/`` with pytest, in the plugin's venv: what ``gym test``
(:mod:`gym_cli.commands.test`) does.

A plugin is tested where it runs: in its venv (gym-core and the plugin, to which pytest, the pytest
plugins gym's tests use and the package's own ``test`` dependency group are added once; workspace
siblings that group names editable, so their edits count without a reinstall), or with
``--isolation none`` with the Python running gym. A plugin installed from a requirement is tested
with the tests of its sdist, the same version as its venv has (:mod:`gym_cli.distributions`).
pytest is configured the same way wherever the plugin lives: the plugin's own pytest settings (from its
pyproject.toml) plus gym's defaults for those it does not set (asyncio mode auto, importlib imports,
a per-test timeout), so a plugin's tests behave alike inside and outside the workspace.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from gym_core.errors import GymError, did_you_mean

from gym_cli.catalog import Catalog, CatalogEntry
from gym_cli.sources import (
    PluginSource,
    looks_like_path,
    normalize_name,
    read_pyproject,
    requirement_name,
    source_of_directory,
    source_of_entry,
    workspace_distributions,
)
from gym_cli.venvs import Venv, VenvManager, find_uv
from gym_cli.venvs.keys import digest, package_fingerprint

__all__ = [
    "Target",
    "Outcome",
    "TEST_REQUIREMENTS",
    "find_targets",
    "requirements_for_tests",
    "pytest_arguments",
    "run_plugin_tests",
    "check_docs",
    "summary_table",
]

# Installed into a plugin's venv before its tests run, with its own `test` dependency group.
TEST_REQUIREMENTS = ("pytest>=8", "pytest-asyncio>=0.24", "pytest-timeout>=2.3")
# Written into a venv once its test requirements are installed there: later runs skip uv.
TEST_MARKER = ".gym-test-requirements"
# How a workspace plugin's requirement is written in the list: installed editable from its folder.
LOCAL_PREFIX = "-e "
# gym's pytest settings, applied where the plugin's own configuration does not set them.
DEFAULT_INI = {"asyncio_mode": "auto", "asyncio_default_fixture_loop_scope": "function", "timeout": "300"}
TAIL_LINES = 40


@dataclass
class Target:
    """A plugin to test: its name, package directory and the catalog that may hold its venv's source."""

    name: str
    directory: Path | None
    catalog: Catalog
    note: str = ""


@dataclass
class Outcome:
    name: str
    result: str  # "passed", "failed", "no tests" or "error"
    passed: int = 0
    failed: int = 0
    skipped: int = 0
    seconds: float = 0.0
    detail: str = ""
    docs: list[str] | None = None  # what its README or example data lacks (None: not checked)
    docs_notes: list[str] | None = None  # what could not be checked

    @property
    def ok(self) -> bool:
        return self.result in ("passed", "no tests")


# --- what to test --------------------------------------------------------------------------------


def find_targets(names: tuple[str, ...], catalog: Catalog) -> list[Target]:
    """The plugins to test: each of ``names`` (a catalog name or a package directory), or, when none
    is given, every plugin of the catalog."""
    if not names:
        if not catalog.entries:
            raise GymError("the catalog (workspace.toml) lists no plugins: name a plugin package directory to test")
        names = tuple(catalog.entries)
    targets = []
    for name in names:
        entry = catalog.entries.get(name)
        if entry is not None:
            note = "" if entry.path is not None else f"installed from {entry.requirement}: its tests are not here"
            targets.append(Target(name, entry.path, catalog, note))
        elif looks_like_path(name):
            source, _ = source_of_directory(Path(name))
            targets.append(Target(source.name, source.path, catalog))
        else:
            known = sorted(catalog.entries)
            raise GymError(
                f"unknown plugin {name!r}{did_you_mean(name, known)}; the catalog has: {', '.join(known) or 'nothing'}"
                " (or give a plugin package directory)"
            )
    return targets


# --- venvs -------------------------------------------------------------------------------------------


def requirements_for_tests(directory: Path, catalog: Catalog | None = None) -> list[str]:
    """pytest and the plugins gym's tests use, plus the package's own ``test`` dependency group.

    A requirement naming another plugin of the catalog (``gym-scripted``, say) is installed from
    its workspace directory, editable and with the extras it asks for (``-e DIR[extra]``):
    workspace plugins are not on PyPI.
    """
    try:
        groups = read_pyproject(directory).get("dependency-groups") or {}
    except (OSError, ValueError):
        groups = {}
    own = [r for r in groups.get("test") or [] if isinstance(r, str)]  # {include-group = ...} aside
    local = workspace_distributions(catalog) if catalog is not None else {}
    resolved = []
    for requirement in own:
        name = requirement_name(requirement)
        path = local.get(normalize_name(name)) if name else None
        if path is None:
            resolved.append(requirement)
            continue
        try:
            extras = sorted(Requirement(requirement).extras)
        except InvalidRequirement:
            extras = []
        resolved.append(f"{LOCAL_PREFIX}{path}" + (f"[{','.join(extras)}]" if extras else ""))
    return list(dict.fromkeys([*TEST_REQUIREMENTS, *resolved]))


def _local_directory(requirement: str) -> Path | None:
    """The package directory of a workspace plugin's requirement (``-e DIR[extra]``), else None."""
    if not requirement.startswith(LOCAL_PREFIX):
        return None
    return Path(requirement[len(LOCAL_PREFIX) :].split("[", 1)[0])


def _install_state(requirements: list[str]) -> str:
    """What the marker of a venv's test requirements records: the requirements and, for each workspace
    plugin among them, what of its pyproject.toml decides what gets installed (the venv key's
    fingerprint): a sibling that gains a dependency or an entry point is installed again. Its code
    needs no fingerprint: it is installed editable, so the tests import the sibling's source as it is
    now. Isolation stays what it was: the venv still holds only what the requirements pull in; editable
    just means the sibling's modules are read from its folder rather than from a copy taken once."""
    lines = list(requirements)
    for requirement in requirements:
        directory = _local_directory(requirement)
        if directory is not None:
            try:
                lines.append(f"# {directory}: {digest(package_fingerprint(directory))}")
            except (OSError, ValueError):
                lines.append(f"# {directory}: unreadable")
    return "\n".join(lines)


def _install_test_requirements(
    venv: Venv,
    requirements: list[str],
    console: Console,
    manager: VenvManager,
    root: Path,
    source: PluginSource,
) -> None:
    """Install ``requirements`` into ``venv`` unless an earlier run installed the same ones."""
    marker = venv.path / TEST_MARKER
    wanted = _install_state(requirements)
    if marker.is_file() and marker.read_text() == wanted:
        return
    uv = find_uv()
    if uv is None:
        raise GymError("uv is not installed; gym needs it to add pytest to the plugin's venv: pip install uv")
    console.print(f"[dim]installing {escape(', '.join(requirements))} into the venv of {venv.name}…[/]")
    environ = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "UV_PROJECT_ENVIRONMENT")}
    # From the workspace root, with the wheels gym keeps (each in its own subfolder of the wheelhouse,
    # found as the venv manager finds them): compiled packages (llama-cpp-python) get the root's
    # build variables and are not compiled again.
    args = manager.wheel_find_links(source, uv)
    config = venv.path / "gym-uv.toml"  # build variables of a plugin outside any workspace
    if config.is_file():
        args += ["--config-file", str(config)]
    args += source.index_args()  # where the plugin came from: its test group may name its siblings
    for requirement in requirements:
        directory = _local_directory(requirement)
        args += [requirement] if directory is None else ["-e", requirement[len(LOCAL_PREFIX) :]]
    proc = subprocess.run(
        [uv, "pip", "install", "--python", str(venv.python), *args],
        capture_output=True,
        text=True,
        env=environ,
        cwd=root,
    )
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
        raise GymError(f"cannot install pytest into the venv of {venv.name}: " + " | ".join(tail))
    marker.write_text(wanted)


def _python_for(target: Target, isolation: str, console: Console) -> tuple[str, dict[str, str]]:
    """The interpreter running the tests and the environment variables to give it."""
    environ = dict(os.environ)
    environ["PYTHONUNBUFFERED"] = "1"
    if isolation == "none":
        # A package not installed here (just generated, say) still imports from its source tree.
        src = target.directory / "src" if target.directory is not None else None
        if src is not None and src.is_dir():
            environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(src), environ.get("PYTHONPATH")) if p)
        return sys.executable, environ
    entry = target.catalog.entries.get(target.name)
    source = source_of_entry(entry) if entry is not None else PluginSource(name=target.name, path=target.directory)
    manager = VenvManager(
        core_path=target.catalog.core_path, console=lambda line: console.print(f"[dim]{escape(line)}[/]")
    )
    venv = manager.ensure(source)
    assert target.directory is not None  # only packages with tests/ get here
    _install_test_requirements(
        venv,
        requirements_for_tests(target.directory, target.catalog),
        console,
        manager,
        target.catalog.root,
        source,
    )
    for var in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME"):
        environ.pop(var, None)
    return str(venv.python), environ


def _published_directory(entry: CatalogEntry, catalog: Catalog, console: Console) -> Path:
    """The unpacked sdist of a plugin installed from a requirement, the version its venv has."""
    from gym_cli.distributions import published_sources

    source = source_of_entry(entry)
    manager = VenvManager(core_path=catalog.core_path, console=lambda line: console.print(f"[dim]{escape(line)}[/]"))
    return published_sources(source, manager.ensure(source).path, manager.home)


# --- running pytest ------------------------------------------------------------------------------


def pytest_arguments(directory: Path, junit: Path) -> list[str]:
    """pytest's arguments for the tests of the package in ``directory``: its own settings, gym's for the rest."""
    try:
        tool = read_pyproject(directory).get("tool", {})
    except (OSError, ValueError):
        tool = {}
    table = tool.get("pytest") or {}
    # pytest 9 reads [tool.pytest] itself; older ones [tool.pytest.ini_options].
    own = {**{k: v for k, v in table.items() if k != "ini_options"}, **(table.get("ini_options") or {})}
    args = [
        "tests",
        "-c",
        str(directory / "pyproject.toml"),
        "--rootdir",
        str(directory),
        "-p",
        "no:cacheprovider",
        f"--junitxml={junit}",
        "-q",
        "-rfEs",
    ]
    if "import-mode" not in str(own.get("addopts", "")):
        args.append("--import-mode=importlib")
    for key, value in DEFAULT_INI.items():
        if key not in own:
            args += ["-o", f"{key}={value}"]
    return args


def _counts(junit: Path) -> tuple[int, int, int] | None:
    """(passed, failed, skipped) from pytest's JUnit XML report, None when there is none."""
    try:
        root = ElementTree.parse(junit).getroot()
    except (OSError, ElementTree.ParseError):
        return None
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    total = failed = skipped = 0
    for suite in suites:
        total += int(suite.get("tests", 0))
        failed += int(suite.get("failures", 0)) + int(suite.get("errors", 0))
        skipped += int(suite.get("skipped", 0))
    return total - failed - skipped, failed, skipped


def run_plugin_tests(target: Target, isolation: str, console: Console, stream: bool) -> Outcome:
    """Run the tests of one plugin; its output streams prefixed by its name (or, quiet, only a failure's tail)."""
    started = time.monotonic()
    entry = target.catalog.entries.get(target.name)
    if target.directory is None and entry is not None and entry.requirement and isolation == "venv":
        try:
            target.directory = _published_directory(entry, target.catalog, console)
        except GymError as exc:
            return Outcome(target.name, "error", seconds=time.monotonic() - started, detail=str(exc))
    directory = target.directory
    tests = directory / "tests" if directory is not None else None
    if directory is None or tests is None or not tests.is_dir():
        return Outcome(target.name, "no tests", detail=target.note or "no tests/ directory")
    if not any(tests.rglob("test_*.py")) and not any(tests.rglob("*_test.py")):
        return Outcome(target.name, "no tests", detail="tests/ holds no test files")
    try:
        python, environ = _python_for(target, isolation, console)
    except GymError as exc:
        return Outcome(target.name, "error", seconds=time.monotonic() - started, detail=str(exc))
    tail: deque[str] = deque(maxlen=TAIL_LINES)
    with tempfile.TemporaryDirectory(prefix="gym-test-") as tmp:
        junit = Path(tmp) / "junit.xml"
        command = [python, "-m", "pytest", *pytest_arguments(directory, junit)]
        proc = subprocess.Popen(
            command,
            cwd=directory,
            env=environ,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
        )
        assert proc.stdout is not None
        for line in proc.stdout:
            line = line.rstrip("\n")
            tail.append(line)
            if stream:
                console.print(Text.assemble((f"{target.name} | ", "dim"), line))
        code = proc.wait()
        counts = _counts(junit)
    seconds = time.monotonic() - started
    passed, failed, skipped = counts or (0, 0, 0)
    if code == 5:  # pytest: no tests collected
        return Outcome(target.name, "no tests", seconds=seconds, detail="tests/ holds no tests")
    if code == 0:
        return Outcome(target.name, "passed", passed, failed, skipped, seconds)
    if not stream:
        for line in tail:
            console.print(Text.assemble((f"{target.name} | ", "dim"), line))
    detail = "" if counts and failed else f"pytest exited with code {code}"
    return Outcome(target.name, "failed" if counts and failed else "error", passed, failed, skipped, seconds, detail)


def check_docs(targets: list[Target], outcomes: list[Outcome]) -> None:
    """Check the README and example data of each target that is a package directory here (not one
    unpacked from a published sdist), as ``gym plugin docs --check`` does; the problems go to its
    outcome. The plugin modules are loaded from source by the Python running gym, all at once."""
    from gym_cli.plugin_docs import check_package, describe_packages, shown_path

    local = [
        (t.directory, o)
        for t, o in zip(targets, outcomes)
        if t.directory is not None and not _published(t) and (t.directory / "pyproject.toml").is_file()
    ]
    packages = describe_packages([directory for directory, _ in local])
    for (directory, outcome), package in zip(local, packages):
        outcome.docs, outcome.docs_notes = check_package(package, shown=shown_path(directory, Path.cwd()))


def _published(target: Target) -> bool:
    entry = target.catalog.entries.get(target.name)
    return entry is not None and entry.path is None


def summary_table(outcomes: list[Outcome]) -> Table:
    """One row per tested plugin: its result, its counts of tests, and whether its README and
    example data are complete (``docs``: "-" when not checked)."""
    table = Table(title="gym test")
    for column, justify in (
        ("plugin", "left"),
        ("result", "left"),
        ("passed", "right"),
        ("failed", "right"),
        ("skipped", "right"),
        ("seconds", "right"),
        ("docs", "left"),
    ):
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    styles = {"passed": "green", "failed": "red", "error": "red", "no tests": "yellow"}
    for o in outcomes:
        note = o.detail if o.result != "error" else (o.detail.splitlines() or [""])[0][:60]  # in full below
        result = f"[{styles[o.result]}]{o.result}[/]" + (f" [dim]({escape(note)})[/]" if note else "")
        if o.docs is None:
            docs = "[dim]-[/]"
        else:
            docs = f"[red]{len(o.docs)} to fix[/]" if o.docs else "[green]ok[/]"
        table.add_row(o.name, result, str(o.passed), str(o.failed), str(o.skipped), f"{o.seconds:.1f}", docs)
    return table
