"""Launching part of a config (``launch(..., kinds=...)``, what ``gym reverify --serve`` uses): the
instances of those kinds and, transitively, the instances their reference options name; nothing else."""

from __future__ import annotations

import json
import urllib.request

import pytest
from rich.console import Console

from gym_core.config import load_config
from gym_core.errors import GymError
from gym_core.plugins import get_plugin_manager

from gym_cli.launch.launcher import launch, needed_instances

POLICY_AND_AGENT = {
    "policy": {"plugin": "scripted", "turns": [{"text": "42"}]},
    "agent": {"plugin": "simple_agent", "model_server": "policy", "resources_server": "math"},
}


def resolved(config: dict):
    plugins = get_plugin_manager()
    return load_config(base=config, env_file=None, server_types=plugins.servers(), load_errors=plugins.load_errors)


def test_the_closure_follows_reference_options_transitively_and_never_the_other_way():
    config = resolved(
        {
            "math": {"plugin": "math", "should_use_judge": True, "judge_model_server": "genrm"},
            "genrm": {"plugin": "genrm_model", "upstream_model_server": "base"},
            "base": {"plugin": "scripted", "turns": [{"text": "x"}]},
            **POLICY_AND_AGENT,  # the agent refers to math, but math does not refer to the agent
        }
    )
    needed = needed_instances(config, ["math"], get_plugin_manager().servers())
    assert needed == {"math": None, "genrm": "math.judge_model_server", "base": "genrm.upstream_model_server"}
    assert set(needed_instances(config, ["agent"], get_plugin_manager().servers())) == {
        "agent",
        "policy",
        "math",
        "genrm",
        "base",
    }


def test_a_server_type_not_loaded_here_needs_every_instance_its_options_name():
    """Its config struct is in another venv: any option naming an instance may be a reference."""
    config = resolved(
        {
            "base": {"plugin": "scripted", "turns": [{"text": "x"}]},
            "other": {"plugin": "scripted", "turns": [{"text": "y"}]},
        }
    )
    config.instances["ext"] = type(config.instances["base"])(
        "ext", "elsewhere", "127.0.0.1", 1, {"grader": "base", "note": "free text"}
    )
    assert needed_instances(config, ["ext"], get_plugin_manager().servers()) == {"ext": None, "base": "ext.grader"}


def head_instances(head_url: str, token: str) -> list[dict]:
    request = urllib.request.Request(f"{head_url}/server_instances", headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def test_resources_servers_start_with_the_judge_they_refer_to_and_without_policy_or_agent(tmp_path, monkeypatch):
    monkeypatch.setenv("GYM_HOME", str(tmp_path / "home"))
    config = tmp_path / "math_judge.yaml"
    config.write_text(
        json.dumps(
            {
                "math": {
                    "plugin": "math",
                    "grading_mode": "boxed",
                    "should_use_judge": True,
                    "judge_model_server": "judge",
                },
                "judge": {"plugin": "scripted", "turns": [{"text": "equivalent"}]},
                **POLICY_AND_AGENT,
            }
        )
    )
    console = Console(record=True, width=200)
    with launch(
        [str(config)],
        ["head_server.port=0"],
        isolation="none",
        console=console,
        env_file=None,
        kinds={"resources"},
        ready_timeout_s=120,
    ) as state:
        assert [row["name"] for row in state.rows] == ["math", "judge"]
        listed = head_instances(state.config.head_url, state.config.auth_token)
        assert {row["name"]: row["state"] for row in listed} == {"math": "running", "judge": "running"}
        assert set(state.config.instances) == {"math", "judge"} and "policy" not in state.config.data
    text = console.export_text()
    assert "starting judge (model): math.judge_model_server refers to it" in text
    assert "left out policy (model), agent (agent): only resources servers" in text


def test_a_config_without_an_instance_of_those_kinds_is_a_clear_error_before_anything_starts(tmp_path, monkeypatch):
    monkeypatch.setenv("GYM_HOME", str(tmp_path / "home"))
    config = tmp_path / "policy.yaml"
    config.write_text(json.dumps({"policy": POLICY_AND_AGENT["policy"]}))
    with pytest.raises(GymError, match=r"no resources server instance.*its instances: policy \(model\)"):
        with launch(
            [str(config)],
            ["head_server.port=0"],
            isolation="none",
            console=Console(quiet=True),
            env_file=None,
            kinds={"resources"},
        ):
            pytest.fail("nothing should start")
    assert not (tmp_path / "home" / "runs").exists() or list((tmp_path / "home" / "runs").iterdir()) == []
