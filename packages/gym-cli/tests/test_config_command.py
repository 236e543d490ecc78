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
