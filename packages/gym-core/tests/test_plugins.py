"""The plugin manager: registration through hooks, checks, entry points and the environment."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import click
import msgspec
import pytest

from gym_core import hookimpl
from gym_core.errors import PluginError, UnknownPluginError
from gym_core.options import ServerConfig
from gym_core.plugins import PluginManager
from gym_core.registry import ServerType
from gym_core.servers import AgentServer, ModelServer, ResourcesServer


class EchoConfig(ServerConfig, kw_only=True):
    greeting: str = "hi"


class EchoServer(ResourcesServer):
    pass


class ServersPlugin:
    """A plugin object registering the servers given to it."""

    def __init__(self, *registrations: dict):
        self.registrations = registrations

    @hookimpl
    def gym_register_servers(self, register):
        for registration in self.registrations:
            register(**registration)


def manager(*plugins: tuple[str, object]) -> PluginManager:
    pm = PluginManager(load_entry_points=False)
    for name, plugin in plugins:
        pm.register(plugin, name=name)
    return pm


# --- registration ---------------------------------------------------------------------------------


def test_registered_server_is_listed_with_its_details_and_provider():
    pm = manager(
        (
            "echo_pkg",
            ServersPlugin(
                dict(
                    name="echo",
                    kind="resources",
                    server=EchoServer,
                    config=EchoConfig,
                    description="echoes",
                    needs_ray=True,
                ),
                dict(name="plain", kind="agent", server="gym_core.servers:AgentServer"),
            ),
        )
    )
    servers = pm.servers()
    assert sorted(servers) == ["echo", "plain"]
    echo = pm.server("echo")
    assert echo == ServerType("echo", "resources", EchoServer, EchoConfig, "echoes", True, "echo_pkg")
    # Without a config, the base ServerConfig validates the options.
    assert servers["plain"].config is ServerConfig
    assert servers["plain"].provider == "echo_pkg"
    assert pm.plugin_names == ["echo_pkg"]


def test_servers_cache_is_invalidated_by_a_later_registration():
    pm = manager(("a", ServersPlugin(dict(name="one", kind="model", server=ModelServer))))
    assert list(pm.servers()) == ["one"]
    pm.register(ServersPlugin(dict(name="two", kind="model", server=ModelServer)), name="b")
    assert sorted(pm.servers()) == ["one", "two"]


def test_duplicate_server_names_name_both_providers():
    pm = manager(
        ("alpha_pkg", ServersPlugin(dict(name="dup", kind="model", server=ModelServer))),
        ("beta_pkg", ServersPlugin(dict(name="dup", kind="model", server=ModelServer))),
    )
    with pytest.raises(PluginError) as info:
        pm.servers()
    message = str(info.value)
    assert "'dup'" in message
    assert "alpha_pkg" in message and "beta_pkg" in message


def test_duplicate_name_within_one_plugin_is_an_error():
    pm = manager(
        (
            "solo",
            ServersPlugin(
                dict(name="x", kind="model", server=ModelServer), dict(name="x", kind="agent", server=ModelServer)
            ),
        )
    )
    with pytest.raises(PluginError, match="registered twice"):
        pm.servers()


def test_bad_kind_is_an_error_naming_the_kinds():
    pm = manager(("p", ServersPlugin(dict(name="weird", kind="environment", server=ModelServer))))
    with pytest.raises(PluginError) as info:
        pm.servers()
    message = str(info.value)
    assert "'weird'" in message and "'environment'" in message
    for kind in ("model", "resources", "agent"):
        assert kind in message


def test_config_that_is_not_a_server_config_is_an_error():
    class NotAConfig(msgspec.Struct):
        x: int = 0

    pm = manager(("p", ServersPlugin(dict(name="bad", kind="model", server=ModelServer, config=NotAConfig))))
    with pytest.raises(PluginError, match="ServerConfig"):
        pm.servers()


def test_plugin_name_registered_twice_is_an_error():
    pm = manager(("same", ServersPlugin()))
    with pytest.raises(PluginError, match="already registered"):
        pm.register(ServersPlugin(), name="same")


@pytest.mark.parametrize("marked", [True, False])
def test_misspelled_hook_is_an_error_with_did_you_mean(marked):
    def gym_register_server(register):
        pass

    plugin = SimpleNamespace(gym_register_server=hookimpl(gym_register_server) if marked else gym_register_server)
    pm = PluginManager(load_entry_points=False)
    with pytest.raises(PluginError) as info:
        pm.register(plugin, name="typo_pkg")
    message = str(info.value)
    assert "gym_register_server" in message
    assert "did you mean 'gym_register_servers'" in message
    assert "typo_pkg" in message
    assert pm.plugin_names == []  # nothing half-registered


def test_hook_with_a_wrong_argument_name_is_rejected_and_unregistered():
    class WrongArgs:
        @hookimpl
        def gym_register_servers(self, registrar):
            pass

    pm = PluginManager(load_entry_points=False)
    with pytest.raises(PluginError) as info:
        pm.register(WrongArgs(), name="wrong_args")
    assert "registrar" in str(info.value)
    assert "gym_register_servers" in str(info.value)
    assert pm.plugin_names == []
    assert pm.servers() == {}


def test_hookimpl_matching_no_hook_is_rejected_and_unregistered():
    class Unprefixed:
        @hookimpl
        def register_servers(self, register):
            pass

    pm = PluginManager(load_entry_points=False)
    with pytest.raises(PluginError, match="register_servers"):
        pm.register(Unprefixed(), name="unprefixed")
    assert pm.plugin_names == []
    # The failed plugin does not block a correct one registered later.
    pm.register(ServersPlugin(dict(name="ok", kind="model", server=ModelServer)), name="good")
    assert list(pm.servers()) == ["ok"]


def test_unknown_server_has_did_you_mean():
    pm = manager(("c", ServersPlugin(dict(name="counter", kind="resources", server=EchoServer))))
    with pytest.raises(UnknownPluginError) as info:
        pm.server("countr")
    assert "did you mean 'counter'" in str(info.value)
    assert info.value.name == "countr"


def test_unknown_server_that_failed_to_import_reports_the_import_error():
    pm = PluginManager(load_entry_points=False)
    pm.load_errors["broken"] = "ImportError: no module named torch"
    with pytest.raises(PluginError, match="failed to import: ImportError: no module named torch"):
        pm.server("broken")


# --- load_server_class ----------------------------------------------------------------------------


def test_load_server_class_imports_a_module_class_string_only_when_asked():
    pm = manager(
        (
            "lazy",
            ServersPlugin(
                dict(name="real", kind="model", server="gym_core.servers:ModelServer"),
                dict(name="missing_module", kind="model", server="gym_no_such_module_xyz:Server"),
                dict(name="missing_attr", kind="model", server="gym_core.servers:NoSuchServer"),
            ),
        )
    )
    servers = pm.servers()  # listing does not import anything
    assert servers["real"].load_server_class() is ModelServer
    with pytest.raises(PluginError, match="gym_no_such_module_xyz:Server"):
        servers["missing_module"].load_server_class()
    with pytest.raises(PluginError, match="NoSuchServer"):
        servers["missing_attr"].load_server_class()


def test_load_server_class_returns_a_class_as_is():
    server_type = ServerType("echo", "resources", EchoServer, EchoConfig)
    assert server_type.load_server_class() is EchoServer


def test_load_server_class_refuses_a_class_of_another_kind():
    server_type = ServerType("echo", "model", "gym_core.servers:ResourcesServer", ServerConfig)
    with pytest.raises(PluginError, match="is a resources server, registered as model"):
        server_type.load_server_class()


@pytest.mark.parametrize(
    "registration, message",
    [
        (dict(name="Bad-Name", kind="model", server=ModelServer), "lowercase"),
        (dict(name="x", kind="model", server="not a path"), "'package.module:Class'"),
        (dict(name="x", kind="model", server="module_without_class"), "'package.module:Class'"),
        (dict(name="x", kind="model", server=42), "'package.module:Class'"),
    ],
)
def test_register_checks_every_field_and_names_the_plugin(registration, message):
    pm = manager(("the_pkg", ServersPlugin(registration)))
    with pytest.raises(PluginError, match=message) as info:
        pm.servers()
    assert "the_pkg" in str(info.value)


# --- entry points and the environment -------------------------------------------------------------

FIRST_PARTY = {"counter", "scripted", "simple_agent"}


def test_entry_points_of_the_workspace_register_first_party_servers(monkeypatch):
    monkeypatch.delenv("GYM_PLUGINS", raising=False)
    monkeypatch.delenv("GYM_DISABLE_PLUGINS", raising=False)
    pm = PluginManager()
    assert FIRST_PARTY <= set(pm.plugin_names)
    servers = pm.servers()
    assert servers["counter"].kind == "resources" and servers["counter"].provider == "counter"
    assert servers["scripted"].kind == "model"
    assert servers["simple_agent"].kind == "agent"


def test_gym_plugins_is_an_allow_list(monkeypatch):
    monkeypatch.setenv("GYM_PLUGINS", " counter , scripted ")
    monkeypatch.delenv("GYM_DISABLE_PLUGINS", raising=False)
    pm = PluginManager()
    assert pm.plugin_names == ["counter", "scripted"]
    assert sorted(pm.servers()) == ["counter", "scripted"]
    with pytest.raises(UnknownPluginError):
        pm.server("simple_agent")


def test_gym_disable_plugins_is_a_block_list(monkeypatch):
    monkeypatch.delenv("GYM_PLUGINS", raising=False)
    monkeypatch.setenv("GYM_DISABLE_PLUGINS", "counter,simple_agent")
    pm = PluginManager()
    assert "counter" not in pm.plugin_names and "simple_agent" not in pm.plugin_names
    assert "scripted" in pm.plugin_names
    assert "counter" not in pm.servers() and "scripted" in pm.servers()


def test_block_list_wins_over_allow_list(monkeypatch):
    monkeypatch.setenv("GYM_PLUGINS", "counter,scripted")
    monkeypatch.setenv("GYM_DISABLE_PLUGINS", "scripted")
    assert PluginManager().plugin_names == ["counter"]


def test_loading_entry_points_twice_registers_each_once(monkeypatch):
    monkeypatch.setenv("GYM_PLUGINS", "counter")
    monkeypatch.delenv("GYM_DISABLE_PLUGINS", raising=False)
    pm = PluginManager()
    pm.load_entry_points()
    assert pm.plugin_names == ["counter"]
    assert list(pm.servers()) == ["counter"]


# --- commands and metrics -------------------------------------------------------------------------


class CommandsPlugin:
    def __init__(self, *names: str):
        self.names = names

    @hookimpl
    def gym_register_commands(self, register):
        for name in self.names:
            register(click.Command(name))


def test_commands_are_collected_and_duplicates_rejected():
    pm = manager(("a", CommandsPlugin("run", "status")), ("b", CommandsPlugin("collect")))
    assert sorted(pm.commands()) == ["collect", "run", "status"]
    pm.register(CommandsPlugin("run"), name="c")
    with pytest.raises(PluginError, match="'run' is registered twice"):
        pm.commands()


def test_a_command_that_is_not_a_click_command_is_refused():
    class Bad:
        @hookimpl
        def gym_register_commands(self, register):
            register(SimpleNamespace(name="x"))

    pm = manager(("bad_pkg", Bad()))
    with pytest.raises(PluginError, match="bad_pkg.*click command"):
        pm.commands()


class MetricsPlugin:
    def __init__(self, result):
        self.result = result
        self.seen = None

    @hookimpl
    def gym_aggregate_metrics(self, rollouts):
        self.seen = rollouts
        return self.result


def test_aggregate_metrics_merges_every_plugin_and_skips_none():
    rows = [{"task_index": 0, "rollout_index": 0, "reward": 1.0}]
    first, second, silent = (
        MetricsPlugin({"a/mean": 1.0}),
        MetricsPlugin({"b/count": 2.0, "b/x": 0.5}),
        MetricsPlugin(None),
    )
    pm = manager(("first", first), ("second", second), ("silent", silent))
    assert pm.aggregate_metrics(rows) == {"a/mean": 1.0, "b/count": 2.0, "b/x": 0.5}
    assert first.seen is rows and silent.seen is rows


def test_aggregate_metrics_rejects_collisions():
    pm = manager(("first", MetricsPlugin({"accuracy": 1.0})), ("second", MetricsPlugin({"accuracy": 0.0})))
    with pytest.raises(PluginError, match="'accuracy'"):
        pm.aggregate_metrics([])


class EnvironmentMetricsPlugin(MetricsPlugin):
    """A plugin that registers an environment (resources server type) and metrics for it."""

    def __init__(self, environment: str, result):
        super().__init__(result)
        self.environment = environment

    @hookimpl
    def gym_register_servers(self, register):
        register(name=self.environment, kind="resources", server=EchoServer)


def test_an_environment_plugin_receives_only_its_own_rows():
    rows = [
        {"task_index": 0, "reward": 1.0, "environment": "alpha"},
        {"task_index": 1, "reward": 0.0, "environment": "beta"},
        {"task_index": 2, "reward": 0.5},  # no environment recorded
    ]
    alpha = EnvironmentMetricsPlugin("alpha", {"alpha/x": 1.0})
    beta = EnvironmentMetricsPlugin("beta", {"beta/x": 2.0})
    idle = EnvironmentMetricsPlugin("gamma", {"gamma/x": 3.0})
    generic = MetricsPlugin({"all/count": 3.0})
    pm = manager(("alpha_pkg", alpha), ("beta_pkg", beta), ("gamma_pkg", idle), ("generic", generic))
    assert pm.aggregate_metrics(rows) == {"alpha/x": 1.0, "beta/x": 2.0, "all/count": 3.0}
    assert alpha.seen == [rows[0]]
    assert beta.seen == [rows[1]]
    assert idle.seen is None  # none of its rows: not called
    assert generic.seen == rows


# --- tracing and wrappers -------------------------------------------------------------------------


def test_gym_trace_hooks_traces_server_registration(monkeypatch, caplog):
    monkeypatch.setenv("GYM_TRACE_HOOKS", "1")
    pm = manager(
        ("echo_pkg", ServersPlugin(dict(name="echo", kind="resources", server=EchoServer))),
        ("metrics", MetricsPlugin({"m": 1.0})),
    )
    with caplog.at_level(logging.INFO, logger="gym.plugins"):
        pm.servers()
        pm.aggregate_metrics([{"reward": 1.0, "environment": "echo"}])
    traced = "\n".join(r.getMessage() for r in caplog.records)
    assert "gym_register_servers" in traced
    assert "gym_aggregate_metrics" in traced


def test_hook_wrappers_run_around_server_registration():
    calls = []

    class Wrapper:
        @hookimpl(wrapper=True)
        def gym_register_servers(self, register):
            calls.append("before")
            register(name="added_by_wrapper", kind="agent", server=AgentServer)
            result = yield
            calls.append("after")
            return result

    pm = manager(
        ("echo_pkg", ServersPlugin(dict(name="echo", kind="resources", server=EchoServer))), ("wrap", Wrapper())
    )
    servers = pm.servers()
    assert calls == ["before", "after"]
    assert servers["added_by_wrapper"].provider == "wrap"
    assert servers["echo"].provider == "echo_pkg"


def test_aggregate_metrics_with_no_plugins_is_empty():
    assert PluginManager(load_entry_points=False).aggregate_metrics([{"reward": 1.0}]) == {}
