"""Every plugin's ``configs/<type>_bench.yaml`` (the servers `python -m benchmarks` starts to measure
an environment that needs others, such as a scripted judge) loads, and holds exactly one instance
of its type: a stale one would break the benchmark, not the plugin's own tests."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gym_core.config import load_config

ROOT = Path(__file__).resolve().parents[1]
BENCH_CONFIGS = sorted(ROOT.glob("plugins/*/*/configs/*_bench.yaml"))


def test_the_judged_environments_have_bench_configs():
    names = {path.name.removesuffix("_bench.yaml") for path in BENCH_CONFIGS}
    assert {"equivalence_llm_judge", "safety_quality", "text_to_sql"} <= names


@pytest.mark.parametrize("path", BENCH_CONFIGS, ids=lambda p: p.name)
def test_a_bench_config_loads_with_one_instance_under_test(path):
    # The rule of benchmarks/verify_throughput.py's bench_config: one instance of the type, the one measured.
    server_type = path.name.removesuffix("_bench.yaml")
    loaded = load_config([path], env_file=None)
    assert [name for name, i in loaded.instances.items() if i.plugin == server_type] == [
        name for name, value in yaml.safe_load(path.read_text()).items() if value.get("plugin") == server_type
    ]
    assert sum(i.plugin == server_type for i in loaded.instances.values()) == 1
    assert (path.parent.parent / "data" / "example.jsonl").is_file()
