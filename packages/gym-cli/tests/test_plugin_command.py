"""`gym plugin show` and `gym plugin list --verbose`: server types with their options, read from the
config structs' ``msgspec.Meta`` descriptions, without importing any server module."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def test_show_json_has_kind_plugin_and_described_options(gym):
    result = gym("plugin", "show", "math", "--json")
    assert result.exit_code == 0, result.output
    info = json.loads(result.stdout)
    assert (info["name"], info["kind"], info["distribution"]) == ("math", "resources", "gym-math")
    assert info["version"] and info["description"] and info["server"] == "gym_math.server:MathServer"
    options = {option["name"]: option for option in info["options"]}
    timeout = options["verify_timeout_s"]
    assert (timeout["type"], timeout["default"], timeout["required"], timeout["inherited"]) == (
        "float | None",
        None,
        False,
        False,
    )
    assert "killed" in timeout["description"]
    assert options["port"]["inherited"] and options["port"]["description"]


def test_show_text_names_required_options_and_references(gym):
    result = gym("plugin", "show", "simple_agent", env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert result.output.startswith("simple_agent (agent server type)\n  plugin:      gym-simple-agent ")
    line = next(line for line in result.output.splitlines() if line.startswith("model_server"))
    assert "model server name" in line and "required" in line


def test_show_unknown_name_is_a_usage_error(gym):
    result = gym("plugin", "show", "mth")
    assert result.exit_code == 2
    assert "unknown server type 'mth' (did you mean 'math'?)" in result.output


def test_list_verbose_shows_each_server_types_own_options(gym):
    result = gym("plugin", "list", "--verbose", env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "math (resources): its own options" in result.output
    assert "counter (resources): no options of its own" in result.output
    line = next(line for line in result.output.splitlines() if line.startswith("verify_timeout_s"))
    assert "float" in line and "5.0" in line
    listed = {p["name"]: p for p in json.loads(gym("plugin", "list", "--verbose", "--json").stdout)}
    assert "verify_timeout_s" in {o["name"] for o in listed["math"]["options"]}
    assert "options" not in json.loads(gym("plugin", "list", "--json").stdout)[0]


SCRIPT = """
import json, sys
from click.testing import CliRunner
from gym_cli.main import cli
codes = [CliRunner().invoke(cli(), args).exit_code
         for args in (["plugin", "show", "math"], ["plugin", "show", "local_llama", "--json"], ["plugin", "list", "-v"])]
loaded = [m for m in sys.modules if m.endswith(".server") or m.split(".")[0] in ("litestar", "aiohttp", "uvicorn", "llama_cpp")]
print(json.dumps({"codes": codes, "loaded": loaded}))
"""


def test_show_and_list_import_no_server_module(tmp_path):
    env = {**os.environ, "GYM_HOME": str(tmp_path)}
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=REPO, env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report == {"codes": [0, 0, 0], "loaded": []}
