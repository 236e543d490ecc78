"""A plugin module adding `gym my-export`: one line per rollout, in a trainer's format. (gym's own
`gym export` writes TRL's formats; a command name registered twice is an error.)"""

import json

import click

from gym_core import hookimpl


@click.command("my-export")
@click.argument("rollouts", type=click.Path(exists=True))
def my_export(rollouts):
    """Export rollouts to my trainer's format."""
    with open(rollouts) as lines:
        for line in lines:
            row = json.loads(line)
            click.echo(json.dumps({"task": row["task_index"], "reward": row["reward"]}))


@hookimpl
def gym_register_commands(register):
    register(my_export)
