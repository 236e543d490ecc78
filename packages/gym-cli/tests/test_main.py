"""The `gym` command's exit-status policy: 0 success, 1 some work failed, 2 bad usage/config/input,
130 interrupted (the 1, 2 and 130 of real runs are also checked by the tests of each command)."""

from __future__ import annotations

from pathlib import Path

import click
import pytest

from gym_core.errors import ConfigError, GymError, ServerUnavailableError

from gym_cli.exits import CommandFailed, ExitCode
from gym_cli.launch.supervisor import ChildExitedError
from gym_cli.main import exit_code
from gym_cli.rollouts import InputError


@pytest.mark.parametrize(
    ("exc", "code"),
    [
        (CommandFailed(), 1),
        (ChildExitedError("policy", 3, ["boom"]), 1),
        (ServerUnavailableError("head", "/global_config_dict_yaml", "connection refused"), 1),
        (GymError("bad"), 2),
        (ConfigError(["x: unknown option"]), 2),
        (InputError("tasks.jsonl:3: not valid JSON"), 2),
        (click.UsageError("missing option"), 2),
        (KeyboardInterrupt(), 130),
        (click.exceptions.Abort(), 130),
        (click.exceptions.Exit(0), 0),
    ],
)
def test_each_exception_has_its_exit_code(exc, code):
    assert exit_code(exc) == code


def test_a_bug_is_not_hidden_behind_an_exit_code():
    with pytest.raises(ZeroDivisionError):
        exit_code(ZeroDivisionError("a bug"))


def test_help_documents_the_exit_codes(gym):
    result = gym("--help")
    assert result.exit_code == ExitCode.OK
    assert "Exit status:" in result.output
    for code in ("0", "1", "2", "130"):
        assert f"  {code} " in result.output


def test_usage_errors_exit_2(gym):
    missing = gym.run("collect", "--output", "rollouts.jsonl")
    assert missing.returncode == 2 and "Missing option '--input'" in missing.stderr
    unknown = gym.run("nosuchcommand")
    assert unknown.returncode == 2 and "No such command" in unknown.stderr


def test_bad_input_exits_2_with_one_error_line(tmp_path: Path, gym):
    proc = gym.run("profile", str(tmp_path / "missing.jsonl"))
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"error: rollouts file not found: {tmp_path / 'missing.jsonl'}"


def test_a_failed_check_exits_1(tmp_path: Path, gym):
    proc = gym.run("status", "--head", "http://127.0.0.1:9")
    assert proc.returncode == 1
    assert "no gym servers are running at http://127.0.0.1:9" in proc.stderr
