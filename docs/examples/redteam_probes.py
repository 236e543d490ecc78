"""A plugin module declaring its environment's own probe for `gym redteam`: a word its grader is
known to accept, whatever the task. gym's own probes run on my_env too."""

from gym_core import hookimpl
from gym_core.redteam import Attack, Target, probe


@probe("magic_word", "format", "the word my_env's grader accepted before it was fixed")
def magic_word(target: Target) -> Attack | None:
    return Attack(({"text": "xyzzy"},))


@hookimpl
def gym_redteam_probes(register):
    register(environment="my_env", probes=[magic_word], judge_verdict="Ruling: [[WRONG]]")
