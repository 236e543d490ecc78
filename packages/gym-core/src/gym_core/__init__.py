"""gym-core: the pieces every gym server, plugin and command is built from.

Top-level names load on first use (PEP 562): ``from gym_core import hookimpl``, the first line of
every plugin, imports pluggy and nothing else, so that listing plugins and ``gym --help`` never
load a server framework. Each name lives in the module listed in ``_EXPORTS``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# name -> the module that defines it
_EXPORTS = {
    "hookimpl": "gym_core.hookspecs",
    # errors (leaf)
    "GymError": "gym_core.errors",
    "ConfigError": "gym_core.errors",
    "PluginError": "gym_core.errors",
    "UnknownPluginError": "gym_core.errors",
    "ServerCallError": "gym_core.errors",
    "ServerHTTPError": "gym_core.errors",
    "ServerTimeoutError": "gym_core.errors",
    "ServerUnavailableError": "gym_core.errors",
    "ToolError": "gym_core.errors",
    "SessionError": "gym_core.errors",
    "InfrastructureError": "gym_core.errors",
    # options (leaf)
    "ServerConfig": "gym_core.options",
    "ClientConfig": "gym_core.options",
    "ServerRef": "gym_core.options",
    "ModelRef": "gym_core.options",
    "ResourcesRef": "gym_core.options",
    "AgentRef": "gym_core.options",
    # registry (leaf)
    "ServerType": "gym_core.registry",
    # plugin manager
    "PluginManager": "gym_core.plugins",
    "get_plugin_manager": "gym_core.plugins",
    # config
    "GlobalConfig": "gym_core.config",
    "load_config": "gym_core.config",
    # servers and what they use
    "GymServer": "gym_core.servers",
    "ResourcesServer": "gym_core.servers",
    "ModelServer": "gym_core.servers",
    "AgentServer": "gym_core.servers",
    "tool": "gym_core.servers",
    "ServerClient": "gym_core.client",
    "Session": "gym_core.sessions",
    "SessionStore": "gym_core.sessions",
    # hard limits for untrusted or pathological work
    "WorkerPool": "gym_core.workers",
    "WorkerError": "gym_core.workers",
    # judges: verdicts from another model
    "Judge": "gym_core.judge",
    "JudgeError": "gym_core.judge",
    "JudgeOptions": "gym_core.options",
    "UpstreamOptions": "gym_core.options",
    "first_label_verdict": "gym_core.judge",
    # untrusted programs
    "Sandbox": "gym_core.sandbox",
    "SandboxLimits": "gym_core.sandbox",
    "SandboxResult": "gym_core.sandbox",
    "SandboxError": "gym_core.sandbox",
    # Gymnasium-style environments (reset / step / close)
    "GymnasiumEnvironment": "gym_core.gymnasium_env",
}

# Derived from the table: the type checkers see the names in the TYPE_CHECKING imports below.
__all__ = sorted(_EXPORTS)  # pyright: ignore[reportUnsupportedDunderAll]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'gym_core' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})


if TYPE_CHECKING:  # what type checkers and IDEs see
    from gym_core.client import ServerClient
    from gym_core.config import GlobalConfig, load_config
    from gym_core.errors import (
        ConfigError,
        GymError,
        InfrastructureError,
        PluginError,
        ServerCallError,
        ServerHTTPError,
        ServerTimeoutError,
        ServerUnavailableError,
        SessionError,
        ToolError,
        UnknownPluginError,
    )
    from gym_core.gymnasium_env import GymnasiumEnvironment
    from gym_core.hookspecs import hookimpl
    from gym_core.judge import Judge, JudgeError, first_label_verdict
    from gym_core.options import (
        AgentRef,
        ClientConfig,
        JudgeOptions,
        ModelRef,
        ResourcesRef,
        ServerConfig,
        ServerRef,
        UpstreamOptions,
    )
    from gym_core.plugins import PluginManager, get_plugin_manager
    from gym_core.registry import ServerType
    from gym_core.sandbox import Sandbox, SandboxError, SandboxLimits, SandboxResult
    from gym_core.servers import AgentServer, GymServer, ModelServer, ResourcesServer, tool
    from gym_core.sessions import Session, SessionStore
    from gym_core.workers import WorkerError, WorkerPool
