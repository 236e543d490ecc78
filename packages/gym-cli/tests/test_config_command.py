"""``gym config show`` and ``gym config validate``: the config `gym run` would start, without starting it."""

from __future__ import annotations

import yaml


def write(path, data):
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


CONFIG = {
    "counter": {"plugin": "counter", "max_sessions": 10},
    "policy": {"plugin": "openai_model", "base_url": "http://127.0.0.1:9/v1", "model": "m"},
    "agent": {"plugin": "simple_agent", "model_server": "policy", "resources_server": "counter"},
}


def test_validate_says_what_would_start(tmp_path, monkeypatch, gym):
    monkeypatch.setenv("GYM_ENV_FILE", str(tmp_path / "absent.yaml"))
    result = gym("config", "validate", str(write(tmp_path / "c.yaml", CONFIG)), "counter.max_sessions=5")
    assert result.exit_code == 0, result.output
    assert result.output.strip() == (
        "valid: 3 server instances: counter (counter), policy (openai_model), agent (simple_agent)"
    )


def test_validate_lists_every_problem_and_exits_2(tmp_path, monkeypatch, gym):
    monkeypatch.setenv("GYM_ENV_FILE", str(tmp_path / "absent.yaml"))
    broken = {
        **CONFIG,
        "agent": {**CONFIG["agent"], "model_server": "polcy"},
        "counter": {"plugin": "counter", "max_sesions": 1},
    }
    result = gym("config", "validate", str(write(tmp_path / "c.yaml", broken)))
    assert result.exit_code == 2
    assert (
        "counter.max_sesions: unknown option of server type 'counter' (did you mean 'max_sessions'?)" in result.output
    )
    assert "agent.model_server: no server instance named 'polcy' (did you mean 'policy'?)" in result.output


def test_show_merges_overrides_fills_defaults_and_redacts_secrets(tmp_path, monkeypatch, gym):
    env = write(tmp_path / "env.yaml", {"policy": {"api_key": "sk-very-secret"}})
    monkeypatch.setenv("GYM_ENV_FILE", str(env))
    result = gym("config", "show", str(write(tmp_path / "c.yaml", CONFIG)), "counter.max_sessions=7")
    assert result.exit_code == 0, result.output
    assert "sk-very-secret" not in result.output
    shown = yaml.safe_load(result.output)
    assert shown["policy"]["api_key"] == "<redacted>"
    assert shown["counter"]["max_sessions"] == 7  # the override
    assert shown["counter"]["port"] == 0  # nothing allocated: a free port is chosen at start
    assert shown["policy"]["timeout_s"] == 300.0 and shown["policy"]["model"] == "m"  # a default, a value
    assert list(shown["agent"])[0] == "plugin"
    bare = yaml.safe_load(gym("config", "show", "--no-defaults", str(tmp_path / "c.yaml")).output)
    assert bare["counter"] == {"plugin": "counter", "max_sessions": 10}


def test_every_problem_of_a_config_is_reported_at_once_each_with_its_path(tmp_path, monkeypatch, gym):
    """A bad port does not hide the rest; each option of a wrong type is its own line; an unset
    environment variable is named plainly (no OmegaConf report text)."""
    monkeypatch.setenv("GYM_ENV_FILE", str(tmp_path / "absent.yaml"))
    monkeypatch.delenv("GYM_TEST_NO_SUCH_KEY", raising=False)
    broken = {
        "counter": {"plugin": "counter", "port": "eighty", "max_sessions": "ten", "host": 5},
        "policy": {**CONFIG["policy"], "api_key": "${oc.env:GYM_TEST_NO_SUCH_KEY}", "max_retries": "x"},
        "agent": {**CONFIG["agent"], "resources_server": "countr"},
    }
    result = gym("config", "validate", str(write(tmp_path / "c.yaml", broken)))
    assert result.exit_code == 2
    problems = [line.strip()[2:] for line in result.stderr.splitlines() if line.strip().startswith("- ")]
    paths = [problem.partition(":")[0] for problem in problems]
    assert sorted(paths) == sorted(
        [
            "policy.api_key",
            "counter.port",
            "counter.max_sessions",
            "counter.host",
            "policy.max_retries",
            "agent.resources_server",
        ]
    ), result.stderr
    [env] = [p for p in problems if p.startswith("policy.api_key")]
    assert "environment variable GYM_TEST_NO_SUCH_KEY is not set" in env and "env.yaml" in env
    assert "full_key" not in result.stderr and "object_type" not in result.stderr
    assert "did you mean 'counter'" in result.stderr


def test_an_override_sets_any_valid_option_and_a_typo_is_met_with_the_fix(tmp_path, monkeypatch, gym):
    monkeypatch.setenv("GYM_ENV_FILE", str(tmp_path / "absent.yaml"))
    config = str(write(tmp_path / "c.yaml", CONFIG))
    # max_sessions is set by the file, port and ready_timeout_s are not: `key=value` sets either, `+` too.
    for override in ("counter.max_sessions=5", "counter.host=0.0.0.0", "+counter.max_sessions=6", "+counter.port=0"):
        result = gym("config", "show", config, override)
        assert result.exit_code == 0, (override, result.output)
        key, _, value = override.lstrip("+").partition("=")
        assert yaml.safe_load(result.stdout)["counter"][key.split(".")[1]] == yaml.safe_load(value)

    option = gym("config", "validate", config, "counter.max_sesions=5")
    assert option.exit_code == 2
    assert (
        "counter.max_sesions: unknown option of server type 'counter' (did you mean 'max_sessions'?)" in option.stderr
    )
    instance = gym("config", "validate", config, "countr.max_sessions=5")
    assert instance.exit_code == 2
    assert "no instance or setting named 'countr' (did you mean 'counter'?)" in instance.stderr
