"""A plugin module adding `gym export`: one line per rollout, in a trainer's format."""

import json

import click

from gym_core import hookimpl


@click.command()
@click.argument("rollouts", type=click.Path(exists=True))
def export(rollouts):
    """Export rollouts to my trainer's format."""
    with open(rollouts) as lines:
        for line in lines:
            row = json.loads(line)
            click.echo(json.dumps({"task": row["task_index"], "reward": row["reward"]}))


@hookimpl
def gym_register_commands(register):
    register(export)
