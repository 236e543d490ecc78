"""Registers the ``counter`` resources server through gym's hooks."""

from gym_core import hookimpl


@hookimpl
def gym_register_servers(register):
    from gym_counter.server import CounterServer

    register(
        name="counter",
        kind="resources",
        server=CounterServer,
        description="A stateful counter: seed a count, increment it with tools, verify the final value",
    )
