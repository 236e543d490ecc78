"""Placeholder: `gym test` is being written."""

import click


@click.group() if "test" == "plugin" else click.command()
def test():
    """(not yet available)"""
