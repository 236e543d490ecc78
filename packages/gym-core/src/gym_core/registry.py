"""What a plugin registers, and the one ``register`` callback that checks it: a leaf module.

``gym_register_servers(register)`` receives :meth:`ServerRegistry.register`; every check of a
registration (kind, name, duplicates, the config struct, the ``"module:Class"`` path) lives there,
whichever plugin calls it. The result is a mapping of server-type name to :class:`ServerType`.

Words: a *plugin* is the installable package (its entry point in group ``gym``); what it registers
is a *server type* (``math``, ``simple_agent``); a config's ``name: {plugin: math}`` is a server
*instance* of that type.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from gym_core.errors import PluginError, UnknownPluginError
from gym_core.options import ServerConfig

__all__ = [
    "ServerKind",
    "SERVER_KINDS",
    "ServerType",
    "ServerRegistry",
    "RegisterServer",
    "CommandRegistry",
    "RegisterCommand",
]

ServerKind = Literal["model", "resources", "agent"]
SERVER_KINDS: tuple[str, ...] = ("model", "resources", "agent")

_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
_SERVER_PATH = re.compile(r"^[^\s:]+:[A-Za-z_]\w*$")


@dataclass(frozen=True)
class ServerType:
    """A registered server type: enough to list it, validate an instance's options and run it,
    without importing its server module (``server`` is a ``"module:Class"`` path)."""

    name: str
    kind: ServerKind
    server: str | type
    config: type[ServerConfig]
    description: str = ""
    needs_ray: bool = False
    provider: str = ""  # the registering plugin's name (its entry point)

    def load_server_class(self) -> type:
        """The server class, imported now."""
        if isinstance(self.server, type):
            cls = self.server
        else:
            module_name, _, attr = self.server.partition(":")
            try:
                cls = getattr(importlib.import_module(module_name), attr)
            except (ImportError, AttributeError) as exc:
                raise PluginError(f"server type {self.name!r}: cannot import {self.server!r}: {exc}") from exc
        kind = getattr(cls, "kind", None)
        if kind != self.kind:
            raise PluginError(
                f"server type {self.name!r}: {self.server} is a {kind or 'non-gym'} server, registered as {self.kind}"
            )
        return cls


class ServerRegistry(Mapping[str, ServerType]):
    """The server types registered so far, by name. Its :meth:`register` is the hook's callback."""

    def __init__(self) -> None:
        self._types: dict[str, ServerType] = {}
        self.provider = ""  # set by the plugin manager before it calls each plugin's hook

    def register(
        self,
        *,
        name: str,
        kind: ServerKind,
        server: str | type,
        config: type[ServerConfig] = ServerConfig,
        description: str = "",
        needs_ray: bool = False,
    ) -> None:
        """Register a server type.

        :param name: the server type's name, used as ``plugin:`` in configs: lowercase letters,
            digits and ``_``, unique among all installed plugins.
        :param kind: ``"model"``, ``"resources"`` or ``"agent"``.
        :param server: the server class as ``"package.module:Class"``, imported only by the process
            that runs it (listing plugins never imports a server module or its dependencies). A
            class object is accepted for plugins defined in code (tests, notebooks); packaged
            plugins use the string.
        :param config: the options struct, a subclass of :class:`gym_core.ServerConfig`, best kept
            in the plugin's light ``config.py``.
        :param description: one line for ``gym plugin list``.
        :param needs_ray: the server needs a Ray cluster (``gym run`` starts or joins one).
        """
        where = f"server type {name!r}" + (f" (plugin {self.provider!r})" if self.provider else "")
        if not isinstance(name, str) or not _NAME.match(name):
            raise PluginError(f"{where}: the name must be lowercase letters, digits and '_', starting with a letter")
        if kind not in SERVER_KINDS:
            raise PluginError(f"{where}: kind must be one of {', '.join(SERVER_KINDS)}, not {kind!r}")
        if not isinstance(server, type) and not (isinstance(server, str) and _SERVER_PATH.match(server)):
            raise PluginError(
                f"{where}: server must be a 'package.module:Class' string (so that listing plugins imports"
                f" no server code), not {server!r}"
            )
        if not (isinstance(config, type) and issubclass(config, ServerConfig)):
            raise PluginError(f"{where}: config must be a subclass of gym_core.ServerConfig, not {config!r}")
        if name in self._types:
            raise PluginError(
                f"server type {name!r} is registered twice (by plugins {self._types[name].provider!r} and {self.provider!r})"
            )
        self._types[name] = ServerType(name, kind, server, config, description, bool(needs_ray), self.provider)

    def get_type(self, name: str, load_errors: Mapping[str, str] | None = None) -> ServerType:
        """The server type called ``name``; an error with a did-you-mean when there is none."""
        if name in self._types:
            return self._types[name]
        if load_errors and name in load_errors:
            raise PluginError(f"gym plugin {name!r} failed to import: {load_errors[name]}")
        raise UnknownPluginError(name, self._types, what="server type")

    def __getitem__(self, name: str) -> ServerType:
        return self._types[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._types)

    def __len__(self) -> int:
        return len(self._types)


RegisterServer = Callable[..., None]
"""The type of ``gym_register_servers``'s ``register``: :meth:`ServerRegistry.register`."""


class CommandRegistry(Mapping[str, Any]):
    """The ``gym`` subcommands registered so far, by name. Its :meth:`register` is the hook's callback."""

    def __init__(self) -> None:
        self._commands: dict[str, Any] = {}
        self.provider = ""

    def register(self, command: Any) -> None:
        """Register a ``click.Command``; its name becomes ``gym <name>``."""
        name = getattr(command, "name", None)
        if not isinstance(name, str) or not callable(getattr(command, "main", None)):
            raise PluginError(f"plugin {self.provider!r}: register() takes a click command, not {command!r}")
        if name in self._commands:
            raise PluginError(f"gym command {name!r} is registered twice (the second by plugin {self.provider!r})")
        self._commands[name] = command

    def __getitem__(self, name: str) -> Any:
        return self._commands[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._commands)

    def __len__(self) -> int:
        return len(self._commands)


RegisterCommand = Callable[[Any], None]
"""The type of ``gym_register_commands``'s ``register``: :meth:`CommandRegistry.register`."""
