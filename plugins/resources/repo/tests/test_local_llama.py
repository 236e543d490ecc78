"""The repo environment with the real embedded model (local_llama, SmolLM2-135M, offline), through
simple_agent (the five tools) and bash_agent (one command per turn): every rollout runs end to end and
is scored. The model fixes nothing, so the rewards are what the hidden tests say (0 for the broken
repositories); the pipeline is the point. The `model` tier (conftest.py TIERS)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gym_core.testing import HTTPCaller, plugin_manager, read_rows, running_servers

import gym_repo.plugin
import gym_simple_agent.plugin

# The workspace has the local model; the plugin's own venv (`gym test repo`) need not build llama.cpp.
gym_local_llama_plugin = pytest.importorskip("gym_local_llama.plugin")

ROWS = read_rows(Path(__file__).resolve().parents[1] / "data" / "example.jsonl")


def test_local_llama_rollouts_through_both_agents_run_end_to_end_and_are_scored():
    config = {
        "repo": {"plugin": "repo", "command_timeout_s": 10},
        "policy": {"plugin": "local_llama", "n_threads": 1, "max_tokens": 48, "temperature": 0.7},
        "tools_agent": {"plugin": "simple_agent", "model_server": "policy", "resources_server": "repo", "max_steps": 2},
        "bash": {"plugin": "bash_agent", "model_server": "policy", "resources_server": "repo", "max_steps": 2},
    }
    plugins = plugin_manager(gym_repo.plugin, gym_local_llama_plugin, gym_simple_agent.plugin)
    with running_servers(config, plugins) as global_config:
        for agent in ("tools_agent", "bash"):
            caller = HTTPCaller(global_config.instances[agent].url, 600, auth_token=global_config.auth_token)
            for row in ROWS[:2]:
                reply = caller.post("/run", row)
                assert reply.status == 200, (agent, reply.json())
                result = reply.json()
                assert result["reward"] in (0.0, 1.0) and result["num_model_calls"] >= 1, result
                assert len(result["test_results"]) == len(row["tests_to_fix"]) + len(row["tests_to_keep"])
                if agent == "bash":
                    assert result["steps"] >= 1 and isinstance(result["submitted"], bool)
