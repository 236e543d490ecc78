"""Placeholder: `gym plugin` is being written."""

import click


@click.group() if "plugin" == "plugin" else click.command()
def plugin():
    """(not yet available)"""
