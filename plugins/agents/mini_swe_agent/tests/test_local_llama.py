"""mini-swe-agent with the real embedded model (local_llama, SmolLM2-135M, offline) in the repo
environment: one task, two steps, end to end and scored, every call's token ids captured as the
model server returned them. The `model` tier (conftest.py TIERS)."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from gym_core.testing import HTTPCaller, plugin_manager, read_rows, running_servers

import gym_mini_swe_agent.plugin
import gym_repo.plugin

gym_local_llama_plugin = pytest.importorskip("gym_local_llama.plugin")


def shipped(module: ModuleType, kind: str, name: str) -> Path:
    """A plugin's example file ``kind/name`` (``data``, ``configs``): in its source tree (the
    workspace's editable install) or in its installed wheel's ``examples/`` (a plugin's own venv)."""
    package = Path(module.__file__ or "").resolve().parent
    candidates = [package.parents[1] / kind / name, package / "examples" / kind / name]
    found = next((path for path in candidates if path.is_file()), None)
    assert found is not None, f"{module.__name__} ships no {kind}/{name}: looked at {', '.join(map(str, candidates))}"
    return found


ROWS = read_rows(shipped(gym_repo.plugin, "data", "example.jsonl"))


def test_mini_swe_agent_with_local_llama_runs_end_to_end_with_its_token_ids_captured():
    config = {
        "repo": {"plugin": "repo", "command_timeout_s": 10, "output_bytes": 1024},
        "policy": {"plugin": "local_llama", "n_threads": 1, "max_tokens": 64, "temperature": 0.7},
        "agent": {"plugin": "mini_swe_agent", "model_server": "policy", "resources_server": "repo", "step_limit": 2},
    }
    plugins = plugin_manager(gym_repo.plugin, gym_local_llama_plugin, gym_mini_swe_agent.plugin)
    with running_servers(config, plugins) as global_config:
        caller = HTTPCaller(global_config.instances["agent"].url, 600, auth_token=global_config.auth_token)
        row = ROWS[0]
        reply = caller.post("/run", row)
        assert reply.status == 200, reply.text
        result = reply.json()
        assert result["reward"] in (0.0, 1.0) and 1 <= result["num_model_calls"] <= 2
        assert len(result["test_results"]) == len(row["tests_to_fix"]) + len(row["tests_to_keep"])
        calls = result["calls"]
        assert len(calls) == result["num_model_calls"]
        carriers = [m for m in result["response"]["output"] if m.get("generation_token_ids") is not None]
        assert len(carriers) == len(calls)
        for call, item in zip(calls, carriers):
            assert call == {k: item[k] for k in call}
            assert call["prompt_token_ids"] and len(call["generation_log_probs"]) == len(call["generation_token_ids"])
        trajectory = result["trajectory"]
        assert sum(trajectory["loss_mask"]) == sum(
            len(c["generation_token_ids"]) for c in calls[len(calls) - _last_segment(result) :]
        )


def _last_segment(result: dict) -> int:
    """How many calls the last segment of the chained trajectory holds."""
    count = 0
    for turn in reversed(result["turns"]):
        count += 1
        if turn["drifted_tokens"]:
            break
    return count
