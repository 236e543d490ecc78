"""Launching a config's servers: :mod:`~gym_cli.launch.launcher` (the head server and one process per
instance, in its plugin's venv) and :mod:`~gym_cli.launch.supervisor` (those processes: ready checks,
output, crash reports, shutdown)."""

from gym_cli.launch.launcher import ISOLATION_MODES, Launch, default_env_file, launch
from gym_cli.launch.supervisor import ChildExit, ChildExitedError, ChildSpec, ReadyTimeoutError, Supervisor

__all__ = [
    "ISOLATION_MODES",
    "Launch",
    "launch",
    "default_env_file",
    "ChildSpec",
    "ChildExit",
    "ChildExitedError",
    "ReadyTimeoutError",
    "Supervisor",
]
