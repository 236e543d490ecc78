"""Configuration: merging, overrides, validation against plugins, references and ports."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path
from typing import Annotated

import msgspec
import pytest
import yaml

from gym_core import hookimpl
from gym_core.config import (
    CONFIG_ENV,
    DEFAULT_HEAD_PORT,
    GlobalConfig,
    assign_ports,
    load_config,
    validate_instance_options,
)
from gym_core.errors import ConfigError
from gym_core.options import ModelRef, ResourcesRef, ServerConfig, ServerRef
from gym_core.plugins import PluginManager
from gym_core.registry import ServerType
from gym_core.servers import AgentServer, ModelServer, ResourcesServer


class CounterConfig(ServerConfig, kw_only=True):
    start: int = 0
    label: str = "c"


class ModelConfig(ServerConfig, kw_only=True):
    model_name: str  # required


class AgentConfig(ServerConfig, kw_only=True):
    model_server: ModelRef
    resources_server: ResourcesRef
    judge: ModelRef | None = None
    anything: ServerRef | None = None
    max_steps: int = 5


class TestPlugin:
    @hookimpl
    def gym_register_servers(self, register):
        register(name="counter", kind="resources", server=ResourcesServer, config=CounterConfig)
        register(name="model", kind="model", server=ModelServer, config=ModelConfig)
        register(name="agent", kind="agent", server=AgentServer, config=AgentConfig)


@pytest.fixture
def plugins() -> PluginManager:
    pm = PluginManager(load_entry_points=False)
    pm.register(TestPlugin(), name="test_plugin")
    return pm


def write(path: Path, data: object) -> Path:
    path.write_text(yaml.safe_dump(data) if not isinstance(data, str) else data)
    return path


def load(base: dict, overrides: tuple[str, ...] = (), plugins: PluginManager | None = None, **kwargs) -> GlobalConfig:
    kwargs.setdefault("env_file", None)
    kwargs.setdefault("allocate_ports", False)
    if plugins is not None:
        kwargs.update(server_types=plugins.servers(), load_errors=plugins.load_errors)
    return load_config(base=base, overrides=overrides, **kwargs)


def problems_of(exc: pytest.ExceptionInfo[ConfigError]) -> list[str]:
    return exc.value.problems


# --- merging -------------------------------------------------------------------------------------------


def test_files_then_env_yaml_then_overrides(tmp_path):
    first = write(
        tmp_path / "first.yaml", {"c": {"plugin": "counter", "start": 1, "label": "first"}, "_vars": {"a": 1}}
    )
    second = write(tmp_path / "second.yaml", {"c": {"start": 2}, "_vars": {"b": 2}})
    env = write(tmp_path / "env.yaml", {"c": {"start": 3, "label": "secret"}})
    config = load_config([first, second], ["c.start=4"], env_file=env, allocate_ports=False)
    assert config.data["c"]["start"] == 4  # override beats env.yaml beats files
    assert config.data["c"]["label"] == "secret"  # env.yaml beats files
    assert config.data["_vars"] == {"a": 1, "b": 2}  # mappings merge
    without_override = load_config([first, second], env_file=env, allocate_ports=False)
    assert without_override.data["c"]["start"] == 3
    files_only = load_config([first, second], env_file=tmp_path / "absent.yaml", allocate_ports=False)
    assert files_only.data["c"] == {"plugin": "counter", "start": 2, "label": "first"}
    later_file_first = load_config([second, first], env_file=None, allocate_ports=False)
    assert later_file_first.data["c"]["start"] == 1


def test_base_is_merged_first(tmp_path):
    file = write(tmp_path / "c.yaml", {"c": {"plugin": "counter", "start": 9}})
    config = load_config(
        [file], base={"c": {"plugin": "counter", "start": 1, "label": "base"}}, env_file=None, allocate_ports=False
    )
    assert config.data["c"] == {"plugin": "counter", "start": 9, "label": "base"}


def test_env_yaml_in_the_working_directory_is_read_by_default(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "env.yaml", {"_secrets": {"key": "s3cret"}})
    file = write(tmp_path / "c.yaml", {"c": {"plugin": "counter", "label": "${_secrets.key}"}})
    config = load_config([file], allocate_ports=False)
    assert config.data["c"]["label"] == "s3cret"


def test_interpolation_resolves_free_variables():
    config = load(
        {
            "model_name": "gpt",
            "_shared": {"n": 3},
            "m": {"plugin": "model", "model_name": "${model_name}"},
            "c": {"plugin": "counter", "start": "${_shared.n}"},
        }
    )
    assert config.data["m"]["model_name"] == "gpt"
    assert config.data["c"]["start"] == 3
    with pytest.raises(ConfigError, match=r"c\.label: .*nowhere\.key"):
        load({"c": {"plugin": "counter", "label": "${nowhere.key}"}})
    # An interpolation to a value nobody set yet is a ConfigError too, not an OmegaConf exception.
    with pytest.raises(ConfigError, match="_secrets.key"):
        load({"_secrets": {"key": "???"}, "c": {"plugin": "counter", "label": "${_secrets.key}"}})


# --- overrides -----------------------------------------------------------------------------------------

BASE = {"a": {"plugin": "counter", "b": 0, "e": 5, "nested": {"x": 1}}}


def test_hydra_override_grammar():
    config = load(BASE, ("a.b=1", "+a.c=2", "++a.d=3", "++a.b=7", "~a.e", "a.nested.x=[1,2]", "+_new.v=text"))
    assert config.data["a"] == {"plugin": "counter", "b": 7, "nested": {"x": [1, 2]}, "c": 2, "d": 3}
    assert config.data["_new"] == {"v": "text"}


def test_a_plain_override_sets_an_option_the_files_do_not_and_plus_changes_one_they_do():
    config = load(BASE, ("a.c=2", "+a.b=5", "head_server.port=0", "server_restarts=2"))
    assert config.data["a"]["c"] == 2 and config.data["a"]["b"] == 5 and config.data["server_restarts"] == 2


def test_an_override_of_a_misspelt_instance_names_the_instance_it_meant():
    with pytest.raises(ConfigError) as info:
        load(BASE, ("aa.b=1",))
    (problem,) = problems_of(info)
    assert "no instance or setting named 'aa'" in problem and "did you mean 'a'" in problem
    assert "+aa.b=" in problem  # how to add a new one on purpose
    assert load(BASE, ("+aa.plugin=counter",)).instances["aa"].plugin == "counter"


def test_bad_overrides_are_all_reported():
    with pytest.raises(ConfigError) as info:
        load(BASE, ("zz.a=1", "~a.nope", "a.b=1,2"))
    problems = problems_of(info)
    assert len(problems) == 3
    assert "'zz'" in problems[0]
    assert "cannot delete 'a.nope'" in problems[1]
    assert "sweep" in problems[2]


def test_unparsable_override_is_a_config_error():
    with pytest.raises(ConfigError, match="bad override"):
        load(BASE, ("a.b=[1,",))


def test_override_fills_a_missing_value():
    # The missing-value error tells the user to pass ``key=...``: that must work.
    config = load({"m": {"plugin": "model", "model_name": "???"}}, ("m.model_name=gpt",))
    assert config.data["m"]["model_name"] == "gpt"
    config = load({"m": {"plugin": "model", "model_name": None}}, ("m.model_name=gpt",))
    assert config.data["m"]["model_name"] == "gpt"
    config = load({"m": {"plugin": "model", "model_name": "???"}}, ("+m.model_name=gpt",))
    assert config.data["m"]["model_name"] == "gpt"


def test_every_missing_value_is_reported_in_one_error():
    with pytest.raises(ConfigError) as info:
        load(
            {
                "m": {"plugin": "model", "model_name": "???"},
                "_keys": {"api_key": "???"},
                "c": {"plugin": "counter", "label": "???"},
            }
        )
    problems = problems_of(info)
    assert len(problems) == 3
    text = str(info.value)
    for key in ("m.model_name", "_keys.api_key", "c.label"):
        assert key in text
    assert "missing required value" in problems[0]


# --- instances and plugins ------------------------------------------------------------------------------


def test_mapping_without_plugin_is_an_error_unless_underscored():
    config = load({"_vars": {"x": 1}, "scalar": 3, "c": {"plugin": "counter"}})
    assert list(config.instances) == ["c"]
    with pytest.raises(ConfigError) as info:
        load({"vars": {"x": 1}, "more": {"y": 2}, "c": {"plugin": "counter"}})
    problems = problems_of(info)
    assert len(problems) == 2
    assert problems[0].startswith("vars: a server instance needs a 'plugin' key")
    assert "'_'" in problems[0]
    assert problems[1].startswith("more:")


def test_a_top_level_key_that_yaml_reads_as_a_number_is_a_config_error(tmp_path):
    path = tmp_path / "numbered.yaml"
    path.write_text("1:\n  plugin: counter\nc:\n  plugin: counter\n")
    with pytest.raises(ConfigError) as info:
        load_config([path], env_file=None, allocate_ports=False)
    assert problems_of(info) == ["1: a top-level key names a server instance or a setting: it must be a string"]


def test_reserved_keys_are_not_instances():
    config = load(
        {"head_server": {"host": "0.0.0.0", "port": 12000}, "ray": {"num_cpus": 2}, "c": {"plugin": "counter"}}
    )
    assert list(config.instances) == ["c"]
    assert config.head_url == "http://0.0.0.0:12000"


def test_unknown_plugin_with_did_you_mean(plugins):
    with pytest.raises(ConfigError) as info:
        load({"c": {"plugin": "countr"}}, plugins=plugins)
    (problem,) = problems_of(info)
    assert problem.startswith("c.plugin: unknown server type 'countr'")
    assert "did you mean 'counter'" in problem
    assert "agent, counter, model" in problem


def test_unknown_plugin_of_the_real_entry_points(monkeypatch):
    monkeypatch.setenv("GYM_PLUGINS", "counter,scripted")
    monkeypatch.delenv("GYM_DISABLE_PLUGINS", raising=False)
    with pytest.raises(ConfigError, match="did you mean 'scripted'"):
        load({"p": {"plugin": "scriptd"}}, plugins=PluginManager())


def test_external_plugins_are_accepted_as_they_are(plugins):
    config = load(
        {"x": {"plugin": "isolated_thing", "whatever": 1}}, plugins=plugins, external_types=["isolated_thing"]
    )
    assert config.instances["x"].plugin == "isolated_thing"


def test_plugin_that_failed_to_import_is_reported(plugins):
    plugins.load_errors["heavy"] = "ImportError: no torch"
    with pytest.raises(ConfigError, match="plugin 'heavy' failed to import: ImportError: no torch"):
        load({"h": {"plugin": "heavy"}}, plugins=plugins)


def test_unknown_option_and_bad_type_name_the_instance_key(plugins):
    with pytest.raises(ConfigError) as info:
        load({"c": {"plugin": "counter", "strat": 1}}, plugins=plugins)
    (problem,) = problems_of(info)
    assert problem.startswith("c.strat: unknown option of server type 'counter'")
    assert "did you mean 'start'" in problem

    with pytest.raises(ConfigError) as info:
        load({"c": {"plugin": "counter", "start": "many"}}, plugins=plugins)
    (problem,) = problems_of(info)
    assert problem.startswith("c.start: ") and "int" in problem

    with pytest.raises(ConfigError) as info:
        load({"c": {"plugin": "counter", "client": {"timeout_s": "slow"}}}, plugins=plugins)
    assert problems_of(info)[0].startswith("c.client.timeout_s: ")


def test_missing_required_option(plugins):
    with pytest.raises(ConfigError) as info:
        load({"m": {"plugin": "model"}}, plugins=plugins)
    assert problems_of(info) == ["m.model_name: missing required option of server type 'model'"]


def test_validation_needs_only_a_mapping_of_server_types():
    """Config validation takes the registered server types, not a plugin manager."""
    types = {"counter": ServerType("counter", "resources", "gym_core.servers:ResourcesServer", CounterConfig)}
    config = load_config(
        base={"c": {"plugin": "counter", "start": 3}}, env_file=None, allocate_ports=False, server_types=types
    )
    assert validate_instance_options(config, "c", CounterConfig, types).start == 3
    with pytest.raises(ConfigError, match="c.strat: unknown option of server type 'counter'"):
        load_config(
            base={"c": {"plugin": "counter", "strat": 3}}, env_file=None, allocate_ports=False, server_types=types
        )


def test_problems_of_every_instance_are_reported_together(plugins):
    with pytest.raises(ConfigError) as info:
        load(
            {
                "c": {"plugin": "counter", "bogus": 1},
                "m": {"plugin": "modle"},
                "a": {"plugin": "agent", "model_server": "c", "resources_server": "nowhere"},
            },
            plugins=plugins,
        )
    problems = problems_of(info)
    assert len(problems) == 4
    assert any(p.startswith("c.bogus:") for p in problems)
    assert any(p.startswith("m.plugin:") for p in problems)
    assert any(p.startswith("a.model_server:") for p in problems)
    assert any(p.startswith("a.resources_server:") for p in problems)


def test_valid_config_validates_to_the_plugin_struct(plugins):
    config = load(
        {
            "counter": {"plugin": "counter", "start": 2},
            "policy": {"plugin": "model", "model_name": "gpt"},
            "agent": {
                "plugin": "agent",
                "model_server": "policy",
                "resources_server": "counter",
                "judge": "policy",
                "anything": "counter",
            },
        },
        plugins=plugins,
    )
    options = validate_instance_options(config, "agent", AgentConfig, plugins.servers())
    assert isinstance(options, AgentConfig)
    assert (options.model_server, options.resources_server, options.judge, options.max_steps) == (
        "policy",
        "counter",
        "policy",
        5,
    )
    assert validate_instance_options(config, "counter", CounterConfig).start == 2


# --- references -------------------------------------------------------------------------------------------


def test_reference_to_an_unknown_instance_has_did_you_mean(plugins):
    with pytest.raises(ConfigError) as info:
        load(
            {
                "counter": {"plugin": "counter"},
                "policy": {"plugin": "model", "model_name": "m"},
                "agent": {"plugin": "agent", "model_server": "polcy", "resources_server": "counter"},
            },
            plugins=plugins,
        )
    (problem,) = problems_of(info)
    assert problem.startswith("agent.model_server: no server instance named 'polcy'")
    assert "did you mean 'policy'" in problem


def test_reference_to_the_wrong_kind(plugins):
    with pytest.raises(ConfigError) as info:
        load(
            {
                "counter": {"plugin": "counter"},
                "policy": {"plugin": "model", "model_name": "m"},
                "agent": {
                    "plugin": "agent",
                    "model_server": "counter",
                    "resources_server": "policy",
                    "judge": "counter",
                },
            },
            plugins=plugins,
        )
    problems = problems_of(info)
    assert "agent.model_server: 'counter' is a resources server, expected a model server" in problems
    assert "agent.resources_server: 'policy' is a model server, expected a resources server" in problems
    assert "agent.judge: 'counter' is a resources server, expected a model server" in problems  # Optional[ModelRef]


def test_server_ref_accepts_any_kind_but_not_unknown_names(plugins):
    base = {
        "counter": {"plugin": "counter"},
        "policy": {"plugin": "model", "model_name": "m"},
        "agent": {"plugin": "agent", "model_server": "policy", "resources_server": "counter", "anything": "policy"},
    }
    load(base, plugins=plugins)
    with pytest.raises(ConfigError, match="agent.anything: no server instance named 'nothing'"):
        load({**base, "agent": {**base["agent"], "anything": "nothing"}}, plugins=plugins)


# --- hosts and ports ---------------------------------------------------------------------------------------


def test_host_defaults_to_loopback():
    config = load({"c": {"plugin": "counter"}, "d": {"plugin": "counter", "host": "0.0.0.0"}}, allocate_ports=True)
    assert config.instances["c"].host == "127.0.0.1" and config.data["c"]["host"] == "127.0.0.1"
    assert config.instances["d"].host == "0.0.0.0"
    assert config.head_host == "127.0.0.1"


def test_ports_are_assigned_distinct_and_avoid_explicit_ones():
    base = {f"s{i}": {"plugin": "counter"} for i in range(8)}
    base["fixed"] = {"plugin": "counter", "port": 23456}
    config = load(base, allocate_ports=True)
    ports = [i.port for i in config.instances.values()]
    assert all(ports) and len(set(ports)) == len(ports)
    assert config.instances["fixed"].port == 23456
    assert config.head_port == DEFAULT_HEAD_PORT and DEFAULT_HEAD_PORT not in ports[:-1]
    for name, instance in config.instances.items():
        assert config.data[name]["port"] == instance.port
        assert instance.url == f"http://127.0.0.1:{instance.port}"


def test_head_port_zero_gets_a_free_port():
    config = load({"head_server": {"port": 0}, "c": {"plugin": "counter", "port": 23457}}, allocate_ports=True)
    assert config.head_port not in (0, 23457)
    assert config.data["head_server"]["port"] == config.head_port
    assert config.head_url == f"http://127.0.0.1:{config.head_port}"


def test_duplicate_explicit_ports_are_rejected():
    with pytest.raises(ConfigError) as info:
        load(
            {"a": {"plugin": "counter", "port": 23458}, "b": {"plugin": "counter", "port": 23458}}, allocate_ports=True
        )
    assert "b.port: port 23458 is also used by a" in str(info.value)


def test_explicit_port_equal_to_the_head_port_is_rejected():
    with pytest.raises(ConfigError, match=f"port {DEFAULT_HEAD_PORT}"):
        load({"a": {"plugin": "counter", "port": DEFAULT_HEAD_PORT}}, allocate_ports=True)
    with pytest.raises(ConfigError, match="port 23460"):
        load({"head_server": {"port": 23460}, "a": {"plugin": "counter", "port": 23460}}, allocate_ports=True)


def test_ports_are_left_alone_without_allocation():
    config = load({"c": {"plugin": "counter"}})
    assert config.instances["c"].port == 0
    assign_ports(config)
    assert config.instances["c"].port != 0


# --- files ----------------------------------------------------------------------------------------------------


def test_missing_file_is_named(tmp_path):
    missing = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError) as info:
        load_config([missing], env_file=None)
    assert str(missing) in str(info.value) and "not found" in str(info.value)


def test_invalid_yaml_is_a_config_error(tmp_path):
    bad = write(tmp_path / "bad.yaml", "c: {plugin: counter\n  - oops: [")
    with pytest.raises(ConfigError) as info:
        load_config([bad], env_file=None)
    assert str(bad) in str(info.value) and "YAML" in str(info.value)


def test_top_level_must_be_a_mapping(tmp_path):
    listed = write(tmp_path / "list.yaml", "- a\n- b\n")
    with pytest.raises(ConfigError, match="mapping"):
        load_config([listed], env_file=None)


# --- GlobalConfig -----------------------------------------------------------------------------------------------


def test_global_config_serialisations_roundtrip(monkeypatch):
    config = load({"c": {"plugin": "counter", "start": 1}, "_v": {"x": [1, 2]}}, allocate_ports=True)
    for again in (GlobalConfig.from_yaml(config.to_yaml()), GlobalConfig.from_json(config.to_json())):
        assert again.data == config.data
        assert again.instances == config.instances
        assert again.head_url == config.head_url
    monkeypatch.setenv(CONFIG_ENV, config.to_json())
    assert GlobalConfig.from_env().instances == config.instances
    monkeypatch.delenv(CONFIG_ENV)
    with pytest.raises(ConfigError, match=CONFIG_ENV):
        GlobalConfig.from_env()
    assert json.loads(config.to_json())["c"]["start"] == 1


@pytest.mark.parametrize(
    ("given", "problem"),
    [("", "no config on"), ("{not json", "is not JSON"), ("[1, 2]", "is not a JSON object")],
)
def test_a_config_on_standard_input(monkeypatch, given, problem):
    # What `gym run` does: GYM_CONFIG=- and the JSON on the server's standard input, read to its end.
    config = load({"c": {"plugin": "counter", "start": 1}, "_v": "x" * 300_000}, allocate_ports=True)
    monkeypatch.setenv(CONFIG_ENV, "-")
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(config.to_json().encode())))
    assert GlobalConfig.from_env().data == config.data
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(given.encode())))
    with pytest.raises(
        ConfigError, match=rf"{problem}.*standard input \(\$GYM_CONFIG is -\)|standard input.*{problem}"
    ):
        GlobalConfig.from_env()


class _PatternConfig(ServerConfig, kw_only=True):
    url: Annotated[str, msgspec.Meta(pattern=r"^https?://")] | list[Annotated[str, msgspec.Meta(pattern=r"^https?://")]]
    name: str = "x"


def test_checking_options_one_by_one_leaves_a_pattern_option_usable():
    """Each option is checked alone to report every problem; done with the field's bare type, msgspec
    freed a Meta(pattern=...)'s regex and the next convert of the whole config failed ('code' object
    has no attribute 'search') or crashed the process."""
    import gc

    from gym_core.config import _option_type_problems

    options = {"url": ["http://a/v1", "https://b/v1"], "name": "n"}
    for _ in range(5):
        assert _option_type_problems("p", options, _PatternConfig) == []
        gc.collect()
        assert msgspec.convert(options, _PatternConfig).url == ["http://a/v1", "https://b/v1"]
    assert _option_type_problems("p", {"url": ["ftp://a"], "name": 3}, _PatternConfig) == [
        "p.url[0]: Expected `str` matching regex '^https?://'",
        "p.name: Expected `str`, got `int`",
    ]
