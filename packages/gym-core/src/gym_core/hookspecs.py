"""Every hook a gym plugin can implement.

A plugin is a module registered under the entry-point group ``gym``; it implements any of the
hooks below with the :data:`hookimpl` marker. gym's own servers and CLI commands are plugins
written exactly like third-party ones.

Hooks receive a ``register`` callback instead of returning values, so that names, kinds and
duplicates are checked in one place (:mod:`gym_core.registry`), whatever plugin calls it.
``docs/plugin_hooks.md`` is the reference page for every hook (a test keeps it complete).

Example (a plugin's ``plugin.py``; the server module is named, not imported, so that listing
plugins imports no server code)::

    from gym_core import hookimpl

    from my_env.config import MyEnvConfig

    @hookimpl
    def gym_register_servers(register):
        register(name="my_env", kind="resources", server="my_env.server:MyEnvServer",
                 config=MyEnvConfig, description="One line for gym plugin list")
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:  # the leaf module of what hooks receive; imported for annotations only
    from gym_core.redteam.declarations import RegisterRedteam
    from gym_core.registry import RegisterCommand, RegisterServer

__all__ = [
    "hookspec",
    "hookimpl",
    "gym_register_servers",
    "gym_register_commands",
    "gym_aggregate_metrics",
    "gym_redteam_probes",
]

hookspec = pluggy.HookspecMarker("gym")
hookimpl = pluggy.HookimplMarker("gym")


# --- servers ------------------------------------------------------------------------------------


@hookspec
def gym_register_servers(register: RegisterServer) -> None:
    """Register the server types this plugin provides.

    Called once per process when the plugin manager is first asked for server types: by the CLI
    to list plugins and validate configs, and by a server process to find the class it must run.

    :param register: :meth:`gym_core.registry.ServerRegistry.register`; call
        ``register(name=..., kind=..., server=..., config=..., description=..., needs_ray=False)``
        once per server type. ``kind`` is ``"model"``, ``"resources"`` or ``"agent"``; ``server``
        is the server class as a ``"package.module:Class"`` string, imported only by the process
        that runs it; ``config`` is the plugin's options struct, a subclass of
        :class:`gym_core.ServerConfig` kept in its light ``config.py``. A name registered twice,
        by this plugin or another, is an error naming both plugins.
    :returns: nothing; return values are ignored.

    Not firstresult: every implementation is called.
    """


# --- command line -------------------------------------------------------------------------------


@hookspec
def gym_register_commands(register: RegisterCommand) -> None:
    """Register subcommands of the ``gym`` command line.

    Called once when the ``gym`` command starts, before arguments are parsed.

    :param register: :meth:`gym_core.registry.CommandRegistry.register`; call
        ``register(command)`` with a ``click.Command`` (or group); its name becomes the
        subcommand (``gym <name>``). A name registered twice is an error.
    :returns: nothing; return values are ignored.

    Not firstresult: every implementation is called.
    """


# --- metrics ------------------------------------------------------------------------------------


@hookspec
def gym_aggregate_metrics(rollouts: list[dict[str, Any]]) -> dict[str, float] | None:
    """Contribute aggregate metrics computed over a set of verified rollouts.

    Called by ``gym profile`` (and at the end of ``gym collect``) after the built-in statistics,
    once per implementing plugin. A plugin that registers resources server types receives only
    the rows of its own environments (each row's ``environment`` field names the server type that
    verified it) and is not called when there are none; other plugins receive every row.

    :param rollouts: the rollout rows, each with ``task_index``, ``rollout_index``, ``reward``,
        ``environment``, the verify response's extra fields and the task's fields.
    :returns: a mapping of metric name to value (prefix names with your environment's name,
        ``math/boxed_answer_rate``), or ``None`` when the plugin has nothing to say. Names from
        different plugins must not collide; a collision is reported as an error.

    Not firstresult: the results of every implementation are merged.
    """


# --- red team -----------------------------------------------------------------------------------


@hookspec
def gym_redteam_probes(register: RegisterRedteam) -> None:
    """Declare an environment's own reward-hacking probes for ``gym redteam``.

    Called once by ``gym redteam`` (and by :mod:`gym_core.redteam` users) before probing. gym's own
    probes (:data:`gym_core.redteam.PROBES`) run on every environment whatever is declared here.

    :param register: :meth:`gym_core.redteam.RedteamRegistry.register`; call
        ``register(environment=..., probes=[...], judge_verdict=None, reference=None)`` once per
        resources server type. ``probes`` are :class:`gym_core.redteam.Probe` objects (the
        ``@gym_core.redteam.probe`` decorator makes one from a function of a
        :class:`~gym_core.redteam.Target` returning an :class:`~gym_core.redteam.Attack` or None);
        ``judge_verdict`` is the ruling the quoting judge ends its replies with (default
        :data:`gym_core.redteam.DEFAULT_RULING`); ``reference`` maps option names to values that are
        documented reference behaviour (a run with one is reported, not counted). An environment
        declared twice, or a probe name used twice, is an error.
    :returns: nothing; return values are ignored.

    Not firstresult: every implementation is called.
    """
