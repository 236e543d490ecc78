"""The llama-cpp-python wheel gym keeps under $GYM_HOME/wheels/ is offered to venvs made by hand: the
training venv (tests/test_train_venv.py and the command docs/training.md shows) installs it instead
of compiling llama.cpp again (more than 15 minutes here). A stand-in wheel: nothing is installed."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

from gym_cli.venvs.find_links import wheel_find_links
from gym_cli.venvs.keys import build_variables
from gym_cli.venvs.wheels import Wheelhouse

ROOT = Path(__file__).resolve().parents[3]


def _kept_wheel(home: Path) -> Path:
    """A stand-in of the kept wheel, where gym keeps the one compiled with the workspace's variables."""
    variables = build_variables(None, ROOT)[0]  # pyright: ignore[reportArgumentType]
    kept = Wheelhouse(home / "wheels").path_for("llama-cpp-python", variables["llama-cpp-python"])
    kept.mkdir(parents=True)
    lock = tomllib.loads((ROOT / "uv.lock").read_text())
    version = next(p["version"] for p in lock["package"] if p["name"] == "llama-cpp-python")
    # The installed version's name: gym then takes no copy of the root venv's wheel into this home.
    (kept / f"llama_cpp_python-{version}-py3-none-linux_x86_64.whl").write_bytes(b"stand-in")
    return kept


def test_the_kept_llama_cpp_wheel_is_offered_to_venvs_made_by_hand(tmp_path):
    kept = _kept_wheel(tmp_path)
    assert wheel_find_links(ROOT, tmp_path) == ["--find-links", str(kept)]
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    printed = subprocess.run(
        [sys.executable, "-m", "gym_cli.venvs.find_links"],
        cwd=ROOT / "packages" / "gym-train",  # anywhere in the workspace
        env={**env, "GYM_HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert printed.returncode == 0 and printed.stdout.split() == ["--find-links", str(kept)], printed.stderr


def test_the_documented_training_venv_command_offers_the_kept_wheel():
    for doc in (ROOT / "docs" / "training.md", ROOT / "packages" / "gym-train" / "README.md"):
        command = re.search(r"uv pip install --python /tmp/gym-train-venv/bin/python[^\n]*", doc.read_text())
        assert command and "$(uv run python -m gym_cli.venvs.find_links)" in command.group(0), doc


def test_the_training_venv_builder_offers_the_kept_wheel(tmp_path, monkeypatch):
    """tests/test_train_venv.py's install arguments (what `uv pip install` of the training venv gets)."""
    monkeypatch.setenv("GYM_HOME", str(tmp_path))
    kept = _kept_wheel(tmp_path)
    spec = importlib.util.spec_from_file_location("train_venv_builder", ROOT / "tests" / "test_train_venv.py")
    assert spec is not None and spec.loader is not None
    builder = importlib.util.module_from_spec(spec)  # the builder the root test uses
    spec.loader.exec_module(builder)

    args = builder._find_links()
    assert args[-2:] == ["--find-links", str(kept)]
