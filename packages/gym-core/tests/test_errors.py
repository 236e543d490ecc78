"""Error messages: what is wrong, where, and the fix when there is one."""

from __future__ import annotations

import pytest

from gym_core.errors import (
    ConfigError,
    GymError,
    PluginError,
    ServerCallError,
    ServerHTTPError,
    ServerTimeoutError,
    ServerUnavailableError,
    ToolError,
    UnknownPluginError,
    did_you_mean,
)


def test_did_you_mean():
    assert did_you_mean("countr", ["counter", "math"]) == " (did you mean 'counter'?)"
    assert did_you_mean("zzz", ["counter", "math"]) == ""
    assert did_you_mean("x", []) == ""


def test_unknown_plugin_lists_known_ones_sorted():
    error = UnknownPluginError("mth", ["scripted", "math"], what="server plugin")
    assert str(error) == "unknown server plugin 'mth' (did you mean 'math'?); known: math, scripted"
    assert error.name == "mth"
    assert "known: none" in str(UnknownPluginError("x", []))
    assert isinstance(error, PluginError) and isinstance(error, GymError)


def test_config_error_with_one_and_several_problems():
    one = ConfigError("a.b: bad")
    assert str(one) == "invalid config: a.b: bad" and one.problems == ["a.b: bad"]
    several = ConfigError(["a: x", "b: y"])
    assert several.problems == ["a: x", "b: y"]
    assert str(several) == "invalid config:\n  - a: x\n  - b: y"


def test_server_call_error_message_names_server_path_status_attempts():
    error = ServerHTTPError("math", "/verify", "boom", status=500, attempts=3)
    assert str(error) == "math /verify: status 500 boom (after 3 attempts)"
    assert (error.server, error.path, error.status, error.attempts, error.detail) == ("math", "/verify", 500, 3, "boom")
    assert str(ServerTimeoutError("m", "/p", "slow")) == "m /p: slow (after 1 attempt)"


@pytest.mark.parametrize("cls", [ServerCallError, ServerUnavailableError, ServerTimeoutError, ServerHTTPError])
def test_reason_is_the_class_name(cls):
    error = cls("s", "/p", "m")
    assert error.reason == cls.__name__
    assert isinstance(error, ServerCallError)


def test_tool_error_status_defaults_to_400():
    assert ToolError("nope").status == 400
    assert ToolError("gone", status=410).status == 410
    assert str(ToolError("nope")) == "nope"
