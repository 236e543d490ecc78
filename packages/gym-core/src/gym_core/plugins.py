"""A small typed facade over pluggy: loads plugins, checks them, and answers what they registered.

Plugins are found through the entry-point group ``gym``. Environment variables control it:

- ``GYM_PLUGINS``: a comma-separated allow-list of entry-point names; when set, only those load.
- ``GYM_DISABLE_PLUGINS``: a comma-separated block-list of entry-point names.
- ``GYM_TRACE_HOOKS=1``: log every hook call, its arguments and its result (debugging plugins).

Every hook is called through pluggy's hook callers, so tracing applies to all of them. The hooks
whose results belong to a plugin (``gym_register_servers``, ``gym_register_commands``,
``gym_aggregate_metrics``) run one plugin at a time (:meth:`PluginManager._each_plugin`; a plugin's
hook wrapper runs around its own implementation), so the manager knows which plugin registered what.
Tests skip entry points (``PluginManager(load_entry_points=False)``) and register plugins explicitly.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Mapping
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any

import pluggy

from gym_core import hookspecs
from gym_core.errors import PluginError, did_you_mean
from gym_core.registry import SERVER_KINDS, CommandRegistry, ServerKind, ServerRegistry, ServerType

if TYPE_CHECKING:
    from gym_core.redteam.declarations import RedteamRegistry

__all__ = [
    "ENTRY_POINT_GROUP",
    "SERVER_KINDS",
    "ServerKind",
    "ServerType",
    "PluginManager",
    "get_plugin_manager",
    "hook_names",
]

log = logging.getLogger("gym.plugins")

ENTRY_POINT_GROUP = "gym"


class PluginManager:
    """gym's plugin manager: one instance per process (see :func:`get_plugin_manager`)."""

    def __init__(self, *, load_entry_points: bool = True):
        self._pm = pluggy.PluginManager("gym")
        self._pm.add_hookspecs(hookspecs)
        self._servers: ServerRegistry | None = None
        self.load_errors: dict[str, str] = {}
        if os.environ.get("GYM_TRACE_HOOKS"):
            self._pm.trace.root.setwriter(lambda msg: log.info("hook: %s", msg.rstrip()))
            self._pm.enable_tracing()
        if load_entry_points:
            self.load_entry_points()

    # --- loading ---

    def load_entry_points(self) -> None:
        """Register every plugin of the ``gym`` entry-point group allowed by the environment."""
        allow = _name_set(os.environ.get("GYM_PLUGINS"))
        block = _name_set(os.environ.get("GYM_DISABLE_PLUGINS")) or set()
        for ep in entry_points(group=ENTRY_POINT_GROUP):
            if (allow is not None and ep.name not in allow) or ep.name in block:
                continue
            if self._pm.has_plugin(ep.name):
                continue
            try:
                module = ep.load()
            except Exception as exc:  # a broken plugin must not take the others down
                self.load_errors[ep.name] = f"{type(exc).__name__}: {exc}"
                log.warning("gym plugin %r (%s) failed to import: %s", ep.name, ep.value, exc)
                continue
            self.register(module, name=ep.name)

    def register(self, plugin: object, name: str | None = None) -> None:
        """Register a plugin object (a module or an instance with hook implementations)."""
        if name is not None and self._pm.has_plugin(name):
            raise PluginError(f"a gym plugin named {name!r} is already registered")
        known = set(hook_names())
        for attr in dir(plugin):
            if attr.startswith("gym_") and attr not in known and callable(getattr(plugin, attr)):
                raise PluginError(
                    f"gym plugin {name or plugin!r} defines {attr}, which is not a gym hook{did_you_mean(attr, known)}"
                )
        try:
            self._pm.register(plugin, name=name)  # checks hooks that have a spec (argument names...)
            self._pm.check_pending()  # and @hookimpl functions that match no spec
        except pluggy.PluginValidationError as exc:
            if self._pm.is_registered(plugin):
                self._pm.unregister(plugin)
            raise PluginError(f"gym plugin {name or plugin!r}: {exc} (hooks are: {', '.join(hook_names())})") from exc
        self._servers = None

    @property
    def plugin_names(self) -> list[str]:
        return sorted(name for name, _ in self._pm.list_name_plugin() if name)

    # --- hooks, one method each ---

    def servers(self) -> Mapping[str, ServerType]:
        """Every registered server type by name (the hook runs once; the result is cached)."""
        if self._servers is not None:
            return self._servers
        registry = ServerRegistry()
        for plugin_name, call in self._each_plugin("gym_register_servers"):
            registry.provider = plugin_name
            call(register=registry.register)
        registry.provider = ""
        self._servers = registry
        return registry

    def server(self, name: str) -> ServerType:
        """The server type called ``name``; an error with a did-you-mean when there is none."""
        servers = self.servers()
        assert isinstance(servers, ServerRegistry)
        return servers.get_type(name, self.load_errors)

    def commands(self) -> dict[str, Any]:
        """Every registered CLI command by name."""
        registry = CommandRegistry()
        for plugin_name, call in self._each_plugin("gym_register_commands"):
            registry.provider = plugin_name
            call(register=registry.register)
        registry.provider = ""
        return dict(registry)

    def aggregate_metrics(self, rollouts: list[dict[str, Any]]) -> dict[str, float]:
        """Metrics every plugin contributes for these rollouts, merged; collisions are errors.

        A plugin that registers resources server types (environments) receives only the rows of its
        own environments (a row's ``environment`` field, stamped by the agent that produced it), and
        is not called when there are none; any other plugin receives every row.
        """
        own: dict[str, set[str]] = {}
        for server_type in self.servers().values():
            if server_type.kind == "resources":
                own.setdefault(server_type.provider, set()).add(server_type.name)
        merged: dict[str, float] = {}
        for plugin_name, call in self._each_plugin("gym_aggregate_metrics"):
            environments = own.get(plugin_name)
            rows = rollouts if environments is None else [r for r in rollouts if r.get("environment") in environments]
            if environments is not None and not rows:
                continue
            for result in call(rollouts=rows):
                for key, value in (result or {}).items():
                    if key in merged:
                        raise PluginError(
                            f"two plugins contribute the aggregate metric {key!r} (the second: {plugin_name!r})"
                        )
                    merged[key] = value
        return merged

    def redteam_declarations(self) -> RedteamRegistry:
        """Every environment's declared red-team probes (``gym_redteam_probes``), by environment."""
        from gym_core.redteam.declarations import RedteamRegistry

        registry = RedteamRegistry()
        for plugin_name, call in self._each_plugin("gym_redteam_probes"):
            registry.provider = plugin_name
            call(register=registry.register)
        registry.provider = ""
        return registry

    def _each_plugin(self, hook_name: str) -> Iterator[tuple[str, Any]]:
        """Each plugin that implements hook ``hook_name``, in the order a call of the hook runs them
        (the last registered first), by name, with a caller of the hook that runs that plugin's
        implementation alone (and its wrapper, if it has one).

        The callers are pluggy's (``subset_hook_caller``), so tracing applies; and since each runs
        one plugin, whatever its implementation passes to a ``register`` callback is known to be
        that plugin's.
        """
        plugins: list[object] = []
        for impl in reversed(getattr(self._pm.hook, hook_name).get_hookimpls()):
            if all(impl.plugin is not seen for seen in plugins):
                plugins.append(impl.plugin)
        for plugin in plugins:
            others = [other for other in self._pm.get_plugins() if other is not plugin]
            yield self._pm.get_name(plugin) or "", self._pm.subset_hook_caller(hook_name, others)


def hook_names() -> list[str]:
    """The names of every gym hook."""
    return sorted(name for name in dir(hookspecs) if name.startswith("gym_"))


def _name_set(value: str | None) -> set[str] | None:
    if value is None:
        return None
    return {part.strip() for part in value.split(",") if part.strip()}


_manager: PluginManager | None = None


def get_plugin_manager() -> PluginManager:
    """The process-wide plugin manager, loading entry points on first use."""
    global _manager
    if _manager is None:
        _manager = PluginManager()
    return _manager
