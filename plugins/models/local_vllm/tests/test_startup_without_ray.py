"""A server process with no Ray to launch on exits at start-up with an error that says what to set."""

from __future__ import annotations

import os
import subprocess
import sys

from gym_core.config import CONFIG_ENV, INSTANCE_ENV, load_config
from gym_core.testing import plugin_manager

import gym_local_vllm.plugin


def test_no_ray_address_and_no_start_ray_is_a_clear_start_up_error():
    config = load_config(base={"policy": {"plugin": "local_vllm_model", "model": "m"}}, env_file=None,
                         server_types=plugin_manager(gym_local_vllm.plugin).servers())  # fmt: skip
    env = {key: value for key, value in os.environ.items() if key != "RAY_ADDRESS"}
    env.update({CONFIG_ENV: config.to_json(), INSTANCE_ENV: "policy"})
    # The process gym run starts for the instance, with nothing to join.
    done = subprocess.run(
        [sys.executable, "-m", "gym_core.serve"], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode != 0
    assert "no Ray cluster to launch vLLM on: RAY_ADDRESS is not set" in done.stderr
    assert "`policy.start_ray: true`" in done.stderr
    assert "Traceback" not in done.stderr
