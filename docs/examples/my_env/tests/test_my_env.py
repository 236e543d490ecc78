from pathlib import Path

import my_env.plugin

from gym_core.testing import ResourcesServerTests


class TestMyEnv(ResourcesServerTests):
    server_type = "my_env"
    plugins = [my_env.plugin]  # registered here, so the tests need no installed package
    example_data = Path(__file__).parents[1] / "data" / "example.jsonl"
