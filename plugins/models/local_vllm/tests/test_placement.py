"""The engine plan (bundles, strategy, vLLM arguments) and the options' validation: pure, no Ray."""

from __future__ import annotations

import msgspec
import pytest

from gym_core.config import load_config
from gym_core.errors import ConfigError
from gym_core.testing import plugin_manager

import gym_local_vllm.plugin
from gym_local_vllm.config import LocalVllmModelConfig
from gym_local_vllm.placement import engine_argv, engine_plan, fill_placeholders, plan_for, vllm_cli_args

GPU = {"GPU": 1.0, "CPU": 1.0}


def test_one_gpu_one_engine():
    plan = engine_plan(1, 1, 1)
    assert plan.engines == 1
    assert plan.bundles == (GPU,)
    assert plan.strategy == "STRICT_PACK"
    assert plan.gpus_per_engine == 1
    assert plan.args == ("--tensor-parallel-size", "1", "--pipeline-parallel-size", "1")


def test_tensor_parallel_two_is_one_engine_of_two_bundles_and_data_parallel_two_is_two_engines():
    tp2 = engine_plan(tensor_parallel_size=2)
    assert (tp2.engines, tp2.bundles, tp2.gpus_per_engine) == (1, (GPU, GPU), 2)
    assert tp2.args[:2] == ("--tensor-parallel-size", "2")
    dp2 = engine_plan(data_parallel_size=2)
    assert (dp2.engines, dp2.bundles, dp2.gpus_per_engine, dp2.total_bundles) == (2, (GPU,), 1, 2)
    # Data parallelism is gym's (one engine per group), never passed to vLLM.
    assert not any("data-parallel" in arg for arg in dp2.args)


def test_tensor_times_pipeline_bundles_per_engine_times_data_parallel_groups():
    plan = engine_plan(2, 3, 4)
    assert plan.engines == 4
    assert len(plan.bundles) == 6 and plan.total_bundles == 24
    assert plan.args[:4] == ("--tensor-parallel-size", "2", "--pipeline-parallel-size", "3")


def test_without_gpus_bundles_are_cpu_only():
    plan = engine_plan(2, 1, 1, gpus=False)
    assert plan.bundles == ({"CPU": 1.0}, {"CPU": 1.0})
    assert plan.gpus_per_engine == 0


@pytest.mark.parametrize("sizes", [(0, 1, 1), (1, -1, 1), (1, 1, 1.5), (True, 1, 1)])
def test_parallel_sizes_must_be_positive_whole_numbers(sizes):
    with pytest.raises(ValueError, match="must be a whole number >= 1"):
        engine_plan(*sizes)


def test_serve_kwargs_become_vllm_flags():
    args = vllm_cli_args({
        "gpu_memory_utilization": 0.8, "enable_prefix_caching": True, "enforce_eager": False,
        "hf_overrides": {"rope_scaling": {"type": "yarn"}}, "allowed_origins": ["a", "b"], "seed": None,
    })  # fmt: skip
    assert args == [
        "--gpu-memory-utilization", "0.8", "--enable-prefix-caching", "--no-enforce-eager",
        "--hf-overrides", '{"rope_scaling":{"type":"yarn"}}', "--allowed-origins", "a", "b",
    ]  # fmt: skip


def test_config_plan_reads_parallelism_from_vllm_serve_kwargs_and_passes_the_rest():
    config = msgspec.convert({"model": "m", "vllm_serve_kwargs": {
        "tensor_parallel_size": 2, "data_parallel_size": 3, "max_num_seqs": 16}}, LocalVllmModelConfig)  # fmt: skip
    plan = plan_for(config)
    assert (plan.engines, len(plan.bundles)) == (3, 2)
    argv = engine_argv(config, plan)
    assert argv == [
        "{python}", "-m", "vllm.entrypoints.cli.main", "serve", "{model}",
        "--served-model-name", "{served_model_name}", "--host", "{host}", "--port", "{port}",
        "--tensor-parallel-size", "2", "--pipeline-parallel-size", "1", "--max-num-seqs", "16",
    ]  # fmt: skip


def test_an_engine_that_is_not_vllm_gets_only_its_own_command():
    config = msgspec.convert({"model": "m", "pass_vllm_args": False, "vllm_serve_kwargs": {"max_num_seqs": 16},
                              "engine_command": ["{python}", "-m", "x", "--listen", "{host}:{port}"]},
                             LocalVllmModelConfig)  # fmt: skip
    assert engine_argv(config, plan_for(config)) == ["{python}", "-m", "x", "--listen", "{host}:{port}"]


def test_placeholders_are_filled_and_json_braces_left_alone():
    argv = ["{python}", "--model", "{model}", "--x", '{"a":{"b":1}}', "{host}:{port}", "{unknown}"]
    values = {"python": "/py", "model": "m", "served_model_name": "m", "host": "h", "port": "9"}
    assert fill_placeholders(argv, values) == ["/py", "--model", "m", "--x", '{"a":{"b":1}}', "h:9", "{unknown}"]


def _validate(options):
    return load_config(
        base={"policy": {"plugin": "local_vllm_model", **options}},
        env_file=None,
        server_types=plugin_manager(gym_local_vllm.plugin).servers(),
    )


def test_a_config_that_sets_what_gym_sets_is_refused_naming_the_keys():
    with pytest.raises(ConfigError) as info:
        _validate({"model": "m", "vllm_serve_kwargs": {"port": 8000, "data_parallel_size_local": 1}})
    message = str(info.value)
    assert "policy" in message and "data_parallel_size_local" in message and "port" in message


def test_a_bad_parallel_size_is_a_config_error():
    with pytest.raises(ConfigError, match="tensor_parallel_size must be a whole number"):
        _validate({"model": "m", "vllm_serve_kwargs": {"tensor_parallel_size": 0}})


def test_the_plugin_registers_a_model_server_that_needs_ray():
    server_type = plugin_manager(gym_local_vllm.plugin).servers()["local_vllm_model"]
    assert server_type.kind == "model"
    assert server_type.needs_ray
    assert server_type.config is LocalVllmModelConfig
