"""gym-core: the pieces every gym server, plugin and command is built from."""

from gym_core.client import ClientConfig, ServerClient
from gym_core.config import AgentRef, GlobalConfig, ModelRef, ResourcesRef, ServerRef, load_config
from gym_core.errors import (
    ConfigError,
    GymError,
    PluginError,
    ServerCallError,
    ServerHTTPError,
    ServerTimeoutError,
    ServerUnavailableError,
    ToolError,
    UnknownPluginError,
)
from gym_core.hookspecs import hookimpl
from gym_core.plugins import PluginManager, ServerPlugin, get_plugin_manager
from gym_core.servers import AgentServer, GymServer, ModelServer, ResourcesServer, ServerConfig, tool
from gym_core.sessions import Session, SessionStore

__version__ = "0.1.0"

__all__ = [
    "AgentRef",
    "AgentServer",
    "ClientConfig",
    "ConfigError",
    "GlobalConfig",
    "GymError",
    "GymServer",
    "ModelRef",
    "ModelServer",
    "PluginError",
    "PluginManager",
    "ResourcesRef",
    "ResourcesServer",
    "ServerCallError",
    "ServerClient",
    "ServerConfig",
    "ServerHTTPError",
    "ServerPlugin",
    "ServerRef",
    "ServerTimeoutError",
    "ServerUnavailableError",
    "Session",
    "SessionStore",
    "ToolError",
    "UnknownPluginError",
    "get_plugin_manager",
    "hookimpl",
    "load_config",
    "tool",
]
