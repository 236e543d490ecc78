"""The docs stay true to the code: the CLI reference is every command's current --help, and every
code example the docs show is a file under docs/examples/ that these tests run (real servers on
loopback)."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from click.testing import CliRunner

from gym_core.plugins import PluginManager

from gym_cli.cli_reference import commands

REPO = Path(__file__).resolve().parents[3]
EXAMPLES = REPO / "docs" / "examples"
REGENERATE = "run `uv run python docs/generate.py` from the repository root"
# The pages whose Python blocks must be example files (a one-line block, a signature, may stay).
PAGES = ["README.md", "CONTRIBUTING.md", "docs/guide.md", "docs/plugin_hooks.md", "docs/architecture.md"]


def load(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def generate() -> ModuleType:
    return load(REPO / "docs" / "generate.py", "docs_generate")


def test_the_cli_reference_is_current():
    """Fix: a command's --help changed: run `uv run python docs/generate.py` to rewrite docs/cli.md."""
    page = (REPO / "docs" / "cli.md").read_text()
    # Rendered in a fresh process, as docs/generate.py renders it: click keeps a command's help option as
    # first built, and a test that invoked a plugin's command alone built it without the gym group's -h.
    code = "import sys; from gym_cli.cli_reference import render; sys.stdout.write(render())"
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert page == proc.stdout, f"docs/cli.md is not the commands' current --help: {REGENERATE}"


def test_the_cli_reference_has_every_command():
    page = (REPO / "docs" / "cli.md").read_text()
    paths = [path for path, _ in commands()]
    assert {"gym", "gym run", "gym collect", "gym plugin show", "gym plugin docs", "gym config validate"} <= set(paths)
    for path in paths:
        assert f"## `{path}`" in page
        assert f"Usage: {path} " in page


def test_the_examples_shown_are_the_files(generate):
    """Fix: a docs page's example block differs from its file under docs/examples/: edit the file,
    then run `uv run python docs/generate.py` (it copies the file into the block)."""
    stale = [
        str(path.relative_to(REPO))
        for path, text in generate.generated().items()
        if path.name != "cli.md" and path.read_text() != text
    ]
    assert not stale, f"example blocks not current in {', '.join(stale)}: {REGENERATE}"


def test_the_generate_script_checks_everything_it_writes():
    proc = subprocess.run(
        [sys.executable, "docs/generate.py", "--check"], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "current" in proc.stdout


@pytest.mark.parametrize("page", PAGES)
def test_every_python_block_of_a_page_is_an_example_file(page, generate):
    """Fix: put the code in a file under docs/examples/ that a test in this module runs, and put
    `<!-- example: docs/examples/FILE -->` right before the block (FILE#NAME for a region)."""
    path = REPO / page
    if not path.is_file():
        pytest.skip(f"{page} does not exist")
    text = path.read_text()
    marked = {m.start("fence") for m in generate.EXAMPLE.finditer(text)}
    for block in re.finditer(r"^(?P<fence>```+)python\n(?P<body>.*?)^(?P=fence)", text, re.MULTILINE | re.DOTALL):
        if block.start() in marked or block["body"].count("\n") <= 1:
            continue
        line = text[: block.start()].count("\n") + 1
        pytest.fail(f"{page}:{line}: a Python block that is no file of docs/examples/")
    for match in generate.EXAMPLE.finditer(text):
        assert (REPO / match["path"]).is_file(), f"{page} shows {match['path']}, which does not exist"


# --- running the examples ------------------------------------------------------------------------


def test_my_env_passes_the_conformance_kit(tmp_path):
    """docs/examples/my_env: the environment the docs build up, tested as a plugin's tests are."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(EXAMPLES / "my_env" / "src"), os.environ.get("PYTHONPATH")])),
    }
    ini = tmp_path / "pytest.ini"
    ini.write_text("[pytest]\nasyncio_mode = auto\n")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            str(EXAMPLES / "my_env" / "tests"),
            "-c",
            str(ini),
            "--rootdir",
            str(EXAMPLES / "my_env"),
            "-q",
            "-p",
            "no:cacheprovider",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert " passed" in proc.stdout and "failed" not in proc.stdout


def test_the_export_command_example(tmp_path):
    plugins = PluginManager(load_entry_points=False)
    plugins.register(load(EXAMPLES / "export_command.py", "export_command"), name="export_command")
    rollouts = tmp_path / "rollouts.jsonl"
    rollouts.write_text(
        '{"task_index": 0, "rollout_index": 0, "reward": 1.0}\n{"task_index": 1, "rollout_index": 0, "reward": 0.0}\n'
    )
    result = CliRunner().invoke(plugins.commands()["my-export"], [str(rollouts)])
    assert result.exit_code == 0, result.output
    assert [json.loads(line) for line in result.output.splitlines()] == [
        {"task": 0, "reward": 1.0},
        {"task": 1, "reward": 0.0},
    ]


def test_the_metrics_example():
    plugins = PluginManager(load_entry_points=False)
    plugins.register(load(EXAMPLES / "parse_rate_metrics.py", "parse_rate_metrics"), name="parse_rate_metrics")
    rows = [
        {
            "task_index": i,
            "rollout_index": 0,
            "reward": 1.0,
            "environment": "my_env",
            "extracted_answer": None if i == 0 else "x",
        }
        for i in range(4)
    ]
    assert plugins.aggregate_metrics(rows) == {"my_env/parse_rate": 0.75}


@pytest.fixture(scope="module")
def scripted_run(gym_run_process):
    # A scripted model that always answers "<action>stand</action>" (the gymnasium agent's example).
    with gym_run_process(
        REPO / "plugins" / "agents" / "gymnasium" / "configs" / "gymnasium.yaml", ready_timeout_s=120, stop_timeout_s=30
    ) as run:
        yield run


def test_the_openai_client_example_calls_a_running_model(scripted_run):
    """README, "the openai SDK": the run's token as the API key of the official client."""
    model_port = scripted_run.row("policy")["url"].rsplit(":", 1)[1]
    head_port = scripted_run.head.rsplit(":", 1)[1]
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / "openai_client.py"), str(model_port), head_port],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "<action>stand</action>"
