"""Registers the ``counter`` resources server type through gym's hooks.

The server is named by its ``"module:Class"`` path, so listing plugins imports no server code.
"""

from gym_core import hookimpl

from gym_counter.config import CounterConfig


@hookimpl
def gym_register_servers(register):
    register(
        name="counter",
        kind="resources",
        server="gym_counter.server:CounterServer",
        config=CounterConfig,
        description="A stateful counter: seed a count, increment it with tools, verify the final value",
    )
