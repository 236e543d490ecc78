"""Reward hacking found before training finds it: probes that try the answers that score without solving.

A :class:`Probe` turns one example task (a :class:`Target`) into an :class:`Attack`: the turns a
hostile policy says, or a session trick. ``gym redteam`` plays each probe through an environment's
real agent and endpoints and compares its reward with an honest failure's on the same task. gym's
own probes are :data:`PROBES`, in the families of :data:`FAMILIES`; an environment adds its own, and
names the ruling a quoting judge gives it, through the ``gym_redteam_probes`` hook::

    from gym_core import hookimpl
    from gym_core.redteam import Attack, probe

    @probe("magic_word", "format", "the word the grader is known to accept")
    def magic_word(target):
        return Attack(({"text": "xyzzy"},))

    @hookimpl
    def gym_redteam_probes(register):
        register(environment="my_env", probes=[magic_word])

The quoting judge model server (:mod:`gym_core.redteam.judge`) is imported on its own: it needs the
server stack, this package does not.
"""

from gym_core.redteam.declarations import (
    DEFAULT_RULING,
    REFERENCE_OPTIONS,
    RedteamDeclaration,
    RedteamRegistry,
    RegisterRedteam,
)
from gym_core.redteam.probes import (
    FAMILIES,
    GRADER_NOTE,
    HONEST_FAILURE,
    MARKER_KEY,
    PROBES,
    UNOFFERED_TOOL,
    Attack,
    Probe,
    Target,
    decoys,
    probe,
    target_of,
)

__all__ = [
    "DEFAULT_RULING",
    "FAMILIES",
    "GRADER_NOTE",
    "HONEST_FAILURE",
    "MARKER_KEY",
    "PROBES",
    "REFERENCE_OPTIONS",
    "UNOFFERED_TOOL",
    "Attack",
    "Probe",
    "RedteamDeclaration",
    "RedteamRegistry",
    "RegisterRedteam",
    "Target",
    "decoys",
    "probe",
    "target_of",
]
