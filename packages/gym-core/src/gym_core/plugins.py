"""A small typed facade over pluggy: loads plugins, checks them, and answers what they registered.

Plugins are found through the entry-point group ``gym``. Two environment variables control it:

- ``GYM_PLUGINS``: a comma-separated allow-list of entry-point names; when set, only those load.
- ``GYM_DISABLE_PLUGINS``: a comma-separated block-list of entry-point names.
- ``GYM_TRACE_HOOKS=1``: log every hook call and its result (debugging plugins).

Tests skip entry points (``PluginManager(load_entry_points=False)``) and register plugins explicitly.
"""

from __future__ import annotations

import importlib
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any, Literal, Protocol

import msgspec
import pluggy

from gym_core import hookspecs
from gym_core.errors import PluginError, UnknownPluginError, did_you_mean

__all__ = [
    "ServerKind",
    "SERVER_KINDS",
    "ServerPlugin",
    "RegisterServer",
    "RegisterCommand",
    "PluginManager",
    "get_plugin_manager",
]

log = logging.getLogger("gym.plugins")

ServerKind = Literal["model", "resources", "agent"]
SERVER_KINDS: tuple[str, ...] = ("model", "resources", "agent")
ENTRY_POINT_GROUP = "gym"


@dataclass(frozen=True)
class ServerPlugin:
    """What a plugin registered for one server: enough to list it, validate its config and run it."""

    name: str
    kind: ServerKind
    server: type | str
    config: type[msgspec.Struct]
    description: str = ""
    needs_ray: bool = False
    provider: str = ""  # the registering plugin's name (its entry point)

    def load_server_class(self) -> type:
        """The server class, importing it now when it was registered as ``"module:Class"``."""
        if not isinstance(self.server, str):
            return self.server
        module_name, _, attr = self.server.partition(":")
        try:
            return getattr(importlib.import_module(module_name), attr)
        except (ImportError, AttributeError) as exc:
            raise PluginError(f"server plugin {self.name!r}: cannot import {self.server!r}: {exc}") from exc


class RegisterServer(Protocol):
    def __call__(
        self,
        *,
        name: str,
        kind: ServerKind,
        server: type | str,
        config: type[msgspec.Struct] | None = None,
        description: str = "",
        needs_ray: bool = False,
    ) -> None: ...


RegisterCommand = Callable[[Any], None]


class PluginManager:
    """gym's plugin manager: one instance per process (see :func:`get_plugin_manager`)."""

    def __init__(self, *, load_entry_points: bool = True):
        self._pm = pluggy.PluginManager("gym")
        self._pm.add_hookspecs(hookspecs)
        self._servers: dict[str, ServerPlugin] | None = None
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
                    f"gym plugin {name or plugin!r} defines {attr}, which is not a gym hook"
                    f"{did_you_mean(attr, known)}"
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

    def servers(self) -> dict[str, ServerPlugin]:
        """Every registered server plugin by name (the hook runs once; the result is cached)."""
        if self._servers is not None:
            return self._servers
        from gym_core.servers import ServerConfig  # servers imports this module

        found: dict[str, ServerPlugin] = {}
        provider = ""

        def register(
            *,
            name: str,
            kind: str,
            server: type | str,
            config: type[msgspec.Struct] | None = None,
            description: str = "",
            needs_ray: bool = False,
        ) -> None:
            if kind not in SERVER_KINDS:
                raise PluginError(f"server plugin {name!r}: kind must be one of {SERVER_KINDS}, not {kind!r}")
            if name in found:
                raise PluginError(
                    f"server plugin name {name!r} is registered twice (by {found[name].provider!r} and {provider!r})"
                )
            config = config or ServerConfig
            if not (isinstance(config, type) and issubclass(config, ServerConfig)):
                raise PluginError(f"server plugin {name!r}: config must subclass gym_core.ServerConfig")
            found[name] = ServerPlugin(name, kind, server, config, description, needs_ray, provider)  # type: ignore[arg-type]

        for impl in reversed(self._pm.hook.gym_register_servers.get_hookimpls()):
            provider = impl.plugin_name
            impl.function(register=register)
        self._servers = found
        return found

    def server(self, name: str) -> ServerPlugin:
        """The server plugin called ``name``; an error with a did-you-mean when there is none."""
        servers = self.servers()
        if name in servers:
            return servers[name]
        if name in self.load_errors:
            raise PluginError(f"gym plugin {name!r} failed to import: {self.load_errors[name]}")
        raise UnknownPluginError(name, servers, what="server plugin")

    def commands(self) -> dict[str, Any]:
        """Every registered CLI command by name."""
        found: dict[str, Any] = {}

        def register(command: Any) -> None:
            if command.name in found:
                raise PluginError(f"gym command {command.name!r} is registered twice")
            found[command.name] = command

        self._pm.hook.gym_register_commands(register=register)
        return found

    def aggregate_metrics(self, rollouts: list[dict[str, Any]]) -> dict[str, float]:
        """Metrics every plugin contributes for these rollouts, merged; collisions are errors."""
        merged: dict[str, float] = {}
        for result in self._pm.hook.gym_aggregate_metrics(rollouts=rollouts):
            for key, value in (result or {}).items():
                if key in merged:
                    raise PluginError(f"two plugins contribute the aggregate metric {key!r}")
                merged[key] = value
        return merged


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
