"""Every hook a gym plugin can implement.

A plugin is a module registered under the entry-point group ``gym``; it implements any of the
hooks below with the :data:`hookimpl` marker. gym's own servers and CLI commands are plugins
written exactly like third-party ones.

Hooks receive a ``register`` callback instead of returning values, so that names, kinds and
duplicates are checked in one place (:mod:`gym_core.plugins`), whatever plugin calls it.

Example::

    from gym_core import hookimpl

    @hookimpl
    def gym_register_servers(register):
        register(name="counter", kind="resources", server="my_pkg.server:CounterServer",
                 config=CounterConfig, description="A stateful counter")
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    from gym_core.plugins import RegisterCommand, RegisterServer

__all__ = ["hookspec", "hookimpl", "gym_register_servers", "gym_register_commands", "gym_aggregate_metrics"]

hookspec = pluggy.HookspecMarker("gym")
hookimpl = pluggy.HookimplMarker("gym")


# --- servers ------------------------------------------------------------------------------------


@hookspec
def gym_register_servers(register: RegisterServer) -> None:
    """Register the server plugins this package provides.

    Called once per process when the plugin registry is first asked for servers: by the CLI to
    list and validate plugins, and by a server process to find the class it must run.

    :param register: call ``register(name=..., kind=..., server=..., config=..., description=...,
        needs_ray=False)`` once per server plugin. ``kind`` is ``"model"``, ``"resources"`` or
        ``"agent"``; ``server`` is the server class or a ``"module:Class"`` string (a string keeps
        heavy imports, such as an inference engine, out of processes that only list plugins);
        ``config`` is the ``msgspec.Struct`` subclass of :class:`gym_core.servers.ServerConfig`
        that validates the instance's options. A name registered twice is an error.
    :returns: nothing; return values are ignored.

    Not firstresult: every implementation is called.
    """


# --- command line -------------------------------------------------------------------------------


@hookspec
def gym_register_commands(register: RegisterCommand) -> None:
    """Register subcommands of the ``gym`` command line.

    Called once when the ``gym`` command starts, before arguments are parsed.

    :param register: call ``register(command)`` with a ``click.Command``; its name becomes the
        subcommand (``gym <name>``). A name registered twice is an error.
    :returns: nothing; return values are ignored.

    Not firstresult: every implementation is called.
    """


# --- metrics ------------------------------------------------------------------------------------


@hookspec
def gym_aggregate_metrics(rollouts: list[dict[str, Any]]) -> dict[str, float] | None:
    """Contribute aggregate metrics computed over a set of verified rollouts.

    Called by ``gym profile`` (and at the end of ``gym collect``) after the built-in statistics.

    :param rollouts: the rollout rows, each with ``task_index``, ``rollout_index``, ``reward``, the
        verify response's extra fields and the task's fields.
    :returns: a mapping of metric name to value, or ``None`` when the plugin has nothing to say
        about these rollouts (e.g. they come from another environment). Names from different
        plugins must not collide; a collision is reported as an error.

    Not firstresult: the results of every implementation are merged.
    """
