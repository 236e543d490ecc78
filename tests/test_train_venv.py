"""gym-train's tests, run in the training venv: how they run in `uv run pytest` (and so in CI).

gym-train needs torch, which must never enter the root venv (it says ``[tool.gym] root-install =
false``), so the root pytest run ignores ``packages/gym-train/tests`` and this test runs them instead:

1. build the training venv once, under ``$GYM_HOME/venvs/gym-train-<key>`` (else gym's user cache
   directory), the key a hash of what goes in (gym-train's and gym-core's pyproject.toml, the local
   wheels, the Python version), reused while it holds the completion marker: ``uv venv``, then
   ``uv pip install`` of gym-core and gym-train editable plus gym-train's ``test`` group (workspace
   members in it editable too). Where ``/opt/wheels`` holds a CPU build of torch, that exact wheel is
   required, so that uv never takes PyPI's CUDA build of several GB;
2. run ``python -m pytest tests -q`` in ``packages/gym-train`` with that venv's interpreter, as the
   package's README tells developers to.

Both steps are bounded; a failure prints uv's or pytest's last lines.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gym_cli.sources import normalize_name, requirement_name
from gym_cli.venvs.find_links import harvest, wheel_find_links
from gym_cli.venvs.layout import MARKER, default_home, site_packages, venv_python
from gym_cli.venvs.lock import FileLock
from gym_cli.venvs.uv import find_uv
from gym_cli.workspace import find_members

REPO = Path(__file__).resolve().parents[1]
GYM_TRAIN = REPO / "packages" / "gym-train"
GYM_CORE = REPO / "packages" / "gym-core"
LOCAL_WHEELS = Path("/opt/wheels")
BUILD_TIMEOUT_S = 900  # cold: torch unpacked from the local wheel, transformers & co. downloaded
TESTS_TIMEOUT_S = 1800  # the closed loop of gym train (test_train_loop.py) is a few minutes of it


def _environ() -> dict[str, str]:
    """This environment without what points uv or Python at the root venv."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("VIRTUAL_ENV", "UV_PROJECT_ENVIRONMENT", "PYTHONPATH", "PYTHONHOME")
    }
    env.update(NO_COLOR="1", UV_NO_PROGRESS="1")
    return env


def _torch_wheel() -> Path | None:
    wheels = sorted(LOCAL_WHEELS.glob("torch-*.whl")) if LOCAL_WHEELS.is_dir() else []
    return wheels[-1] if wheels else None


def _requirements() -> list[str]:
    """What goes into the venv, for ``uv pip install``: editable workspace members, then the rest."""
    members = {normalize_name(m.distribution): m for m in find_members(REPO)}
    train = members["gym-train"]
    editable = [GYM_CORE, GYM_TRAIN]
    others = []
    for requirement in train.test_requirements:
        member = members.get(normalize_name(requirement_name(requirement) or ""))
        if member is not None:
            editable.append(REPO / member.directory)
        else:
            others.append(requirement)
    wheel = _torch_wheel()
    if wheel is not None:
        # The wheel's exact version (``2.13.0+cpu``): a bare ``torch>=2.4`` would take PyPI's newest CUDA build.
        others.append(f"torch=={wheel.name.split('-')[1]}")
    args = []
    for directory in dict.fromkeys(editable):
        args += ["-e", str(directory)]
    return args + others


def _venv_key(requirements: list[str], key_files: tuple[Path, ...] = ()) -> str:
    material = hashlib.sha256()
    for path in (GYM_TRAIN / "pyproject.toml", GYM_CORE / "pyproject.toml", *key_files):
        material.update(path.read_bytes())
    material.update("\n".join(requirements).encode())
    material.update(f"{sys.version_info.major}.{sys.version_info.minor}".encode())
    if LOCAL_WHEELS.is_dir():
        material.update("\n".join(sorted(p.name for p in LOCAL_WHEELS.iterdir())).encode())
    return material.hexdigest()[:16]


def _run(args: list[str], cwd: Path, timeout_s: float, what: str) -> subprocess.CompletedProcess[str]:
    try:
        proc = subprocess.run(
            args,
            cwd=cwd,
            env=_environ(),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout_s,
        )
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or b"")[-4000:]
        raise AssertionError(f"{what} did not finish within {timeout_s} s: {' '.join(args)}\n{out!r}") from None
    assert proc.returncode == 0, (
        f"{what} failed ({proc.returncode}): {' '.join(args)}\n{(proc.stdout + proc.stderr)[-6000:]}"
    )
    return proc


def training_venv() -> Path:
    """The training venv, built on first use (serialised by a lock file; complete once it has the marker)."""
    return build_venv("gym-train", [_requirements()])


def build_venv(prefix: str, installs: list[list[str]], key_files: tuple[Path, ...] = ()) -> Path:
    """A venv under ``$GYM_HOME/venvs/<prefix>-<key>``: ``uv venv``, then one ``uv pip install`` per
    entry of ``installs`` (each a list of arguments, in order), each bounded; reused while it holds
    the completion marker. The key hashes the installs, ``key_files``, gym-train's and gym-core's
    pyproject.toml, the local wheels and the Python version."""
    uv = find_uv()
    assert uv is not None, "uv is needed to build the training venv: pip install uv"
    # One install keys as its arguments did before (the training venv's key stays); later ones after a "|".
    material = [arg for number, args in enumerate(installs) for arg in (["|"] if number else []) + args]
    name = f"{prefix}-{_venv_key(material, key_files)}"
    venv = default_home() / "venvs" / name
    if (venv / MARKER).is_file():
        return venv
    with FileLock(default_home() / "venvs" / ".locks" / f"{name}.lock"):
        if (venv / MARKER).is_file():
            return venv
        _run([uv, "venv", "--clear", "--python", sys.executable, str(venv)], REPO, 120, f"creating the {prefix} venv")
        find_links = _find_links()
        # From the workspace root: uv then applies its [tool.uv.extra-build-variables] to anything it compiles.
        for args in installs:
            _run(
                [uv, "pip", "install", "--python", str(venv_python(venv)), *find_links, *args],
                REPO,
                BUILD_TIMEOUT_S,
                f"installing into the {prefix} venv",
            )
        for site in site_packages(venv):  # what uv compiled here (no wheel kept yet): the next venv reuses it
            harvest(site, REPO)
        (venv / MARKER).write_text("")
    return venv


def _find_links() -> list[str]:
    """The local CPU torch wheel, and llama-cpp-python (gym-local-llama, in the test group) compiled with
    the workspace's portable build variables: the wheel kept under ``$GYM_HOME/wheels/`` (by the root
    `uv sync`, gym's plugin venvs or an earlier training venv). Without it uv compiles llama.cpp for
    more than 15 minutes."""
    return (["--find-links", str(LOCAL_WHEELS)] if LOCAL_WHEELS.is_dir() else []) + wheel_find_links(REPO)


def _test_functions() -> int:
    return sum(len(re.findall(r"^\s*def test_", p.read_text(), re.M)) for p in (GYM_TRAIN / "tests").glob("test_*.py"))


@pytest.mark.timeout(BUILD_TIMEOUT_S + TESTS_TIMEOUT_S + 120)  # above the root's 300 s: both steps have their own bound
def test_gym_train_tests_pass_in_the_training_venv():
    venv = training_venv()
    proc = subprocess.run(
        [str(venv_python(venv)), "-m", "pytest", "tests", "-q", "-p", "no:cacheprovider"],
        cwd=GYM_TRAIN,
        env=_environ(),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        errors="replace",
        timeout=TESTS_TIMEOUT_S,
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"gym-train's tests failed in {venv}:\n{output[-8000:]}"
    summary = proc.stdout.strip().splitlines()[-1]
    passed = re.search(r"(\d+) passed", summary)
    assert passed and not re.search(r"skipped|failed|error|deselected", summary), f"unexpected summary: {summary}"
    # Every test function there ran (parametrised ones count at least once): none left uncollected.
    assert int(passed.group(1)) >= _test_functions() > 0, output[-4000:]


def test_the_root_venv_has_no_torch():
    """The root venv (this one) never gets torch: gym-core and gym-cli must not need it."""
    proc = subprocess.run(
        [sys.executable, "-c", "import importlib.util as u; print(u.find_spec('torch') is None)"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.stdout.strip() == "True", proc.stdout + proc.stderr


# --- the veRL and OpenRLHF adapters (gym_train.verl, gym_train.openrlhf), each in a venv of its own ---
#
# Neither trainer can be a gym-train extra: veRL's transformers range and OpenRLHF's exact pins (CUDA-only
# flash-attn, deepspeed, ray, transformers) would enter the workspace lock. Their adapter tests live in
# packages/gym-train/tests/adapters (ignored where the trainer is not installed) and run here.
ADAPTER_TESTS = GYM_TRAIN / "tests" / "adapters"
# What the adapter tests import from the workspace: the adapters, and the served config's plugins.
ADAPTER_MEMBERS = (
    "packages/gym-core",
    "packages/gym-cli",
    "packages/gym-train",
    "plugins/models/local_llama",
    "plugins/agents/token_preserving",
    "plugins/resources/counter",
)
# veRL 0.9.1 with transformers in its range; cachetools and fastapi: verl.experimental.agent_loop imports
# them (through verl.workers.rollout) without verl declaring them.
VERL_REQUIREMENTS = ("verl==0.9.1", "transformers>=5.5.3,<5.11", "cachetools", "fastapi")
# OpenRLHF 0.11.2 without its dependencies (flash-attn is CUDA-only): openrlhf.utils.agent imports aiohttp,
# and openrlhf.utils' __init__ torch, transformers (its pin), sympy and pylatexenc.
OPENRLHF_PACKAGE = "openrlhf==0.11.2"
OPENRLHF_REQUIREMENTS = ("transformers==5.15.0", "aiohttp", "sympy", "pylatexenc")


def _adapter_base() -> list[str]:
    args = []
    for member in ADAPTER_MEMBERS:
        args += ["-e", str(REPO / member)]
    args += ["pytest>=8", "pytest-timeout>=2.3"]
    wheel = _torch_wheel()
    if wheel is not None:
        args.append(f"torch=={wheel.name.split('-')[1]}")  # the local CPU wheel, never PyPI's CUDA build
    return args


def verl_venv() -> Path:
    """gym-train, the served plugins and veRL 0.9.1 (see VERL_REQUIREMENTS)."""
    return build_venv("gym-verl", [_adapter_base() + list(VERL_REQUIREMENTS)])


def openrlhf_venv() -> Path:
    """gym-train, the served plugins, OpenRLHF 0.11.2 installed without its dependencies and the few
    its agent module imports (see OPENRLHF_REQUIREMENTS)."""
    return build_venv("gym-openrlhf", [_adapter_base() + list(OPENRLHF_REQUIREMENTS), ["--no-deps", OPENRLHF_PACKAGE]])


def _run_adapter_tests(venv: Path, test_file: Path) -> None:
    proc = subprocess.run(
        [str(venv_python(venv)), "-m", "pytest", str(test_file.relative_to(GYM_TRAIN)), "-q", "-p", "no:cacheprovider"],
        cwd=GYM_TRAIN,
        env=_environ(),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        errors="replace",
        timeout=TESTS_TIMEOUT_S,
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"{test_file.name} failed in {venv}:\n{output[-8000:]}"
    summary = proc.stdout.strip().splitlines()[-1]
    passed = re.search(r"(\d+) passed", summary)
    assert passed and not re.search(r"skipped|failed|error|deselected", summary), f"unexpected summary: {summary}"
    expected = len(re.findall(r"^\s*def test_", test_file.read_text(), re.M))
    assert int(passed.group(1)) >= expected > 0, output[-4000:]


@pytest.mark.timeout(BUILD_TIMEOUT_S + TESTS_TIMEOUT_S + 120)
def test_verl_agent_loop_in_the_verl_venv():
    _run_adapter_tests(verl_venv(), ADAPTER_TESTS / "test_verl.py")


@pytest.mark.timeout(2 * BUILD_TIMEOUT_S + TESTS_TIMEOUT_S + 120)
def test_openrlhf_agent_executor_in_the_openrlhf_venv():
    _run_adapter_tests(openrlhf_venv(), ADAPTER_TESTS / "test_openrlhf.py")
