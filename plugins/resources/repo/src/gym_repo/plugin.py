"""Registers the ``repo`` resources server through gym's hooks.

This module imports only gym_core and the config: `gym plugin list` loads it in every process that
lists plugins, so the server (and whatever heavy library it needs) is named by a string and imported
only by the process that runs it.
"""

from gym_core import hookimpl

from gym_repo.config import BashAgentConfig, RepoConfig


@hookimpl
def gym_register_servers(register):
    register(
        name="repo",
        kind="resources",
        server="gym_repo.server:RepoServer",
        config=RepoConfig,
        description="A repository and a terminal in the sandbox: fix a bug so that hidden tests pass",
    )
    register(
        name="bash_agent",
        kind="agent",
        server="gym_repo.bash_agent:BashAgent",
        config=BashAgentConfig,
        description="A bash-only agent: one shell command per model turn, until it submits",
    )


@hookimpl
def gym_register_commands(register):
    # The command module imports click only; the generator loads when the command runs.
    from gym_repo.command import repo_tasks

    register(repo_tasks)


@hookimpl
def gym_redteam_probes(register):
    # Code written into the workspace that fakes the hidden tests' verdict (gym_repo.redteam).
    from gym_repo.redteam import PROBES

    register(environment="repo", probes=PROBES)
