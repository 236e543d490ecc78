"""The rollout row: one shape, built in one place, with its precedence stated once.

A rollout crosses two boundaries as a JSON object, and each is built here:

1. :func:`rollout_result`: what an agent's ``POST /run`` answers. Its fields, from the lowest
   precedence to the highest (a later source wins where two share a name):

   - the environment stamp (``environment``: the resources server's type, ``resources_server``:
     its instance), which ``AgentServer`` adds for an agent playing exactly one environment;
   - the rollout record (:class:`gym_core.schemas.RolloutRecord`: ``agent``, ``model_server``,
     ``model``, ``num_model_calls``, ``num_tool_calls``, ``usage``, ``usage_per_turn``);
   - the agent's own facts (``turns``, ``token_drift``, ``total_turns``...);
   - the verdict: what the environment's ``/verify`` answered (at least ``reward``), so that an
     environment reporting its own counts is believed over the agent's;
   - ``response``: the trajectory, always last.

2. :func:`rollout_row`: one line of a ``gym collect`` (or ``gym reverify``) output file. From the
   highest precedence to the lowest:

   - the collector's own fields (:data:`COLLECTOR_FIELDS`: ``task_index``, ``rollout_index``,
     ``agent``, ``reward``, ``latency_s``), which nothing else may overwrite;
   - the agent's result, as above (``response`` aside);
   - the task row as sent (sampling overrides included), so that a verifier can be run again;
   - ``response``, always last.

3. :func:`reverified_row`: a row of ``gym reverify``'s output, the rollout scored again. From the
   highest precedence to the lowest:

   - ``reward``: the new verdict's, with the row's former reward as ``previous_reward`` right after it;
   - the fields that say who produced and scored the rollout (:data:`KEPT_ON_REVERIFY`: the collector's
     fields, the environment stamp, ``previous_reward`` and ``response``), as the row has them;
   - the new verdict's other fields;
   - the rest of the row, in its order.

``gym profile``, ``gym report``, ``gym reverify`` and the trainer adapters read rows of this shape;
each environment's ``data/example_rollouts.jsonl`` holds a few (``gym examples rollouts`` writes them).
The functions take and return plain dicts: this module imports nothing from gym.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = [
    "COLLECTOR_FIELDS",
    "ENVIRONMENT_FIELDS",
    "KEPT_ON_REVERIFY",
    "LATENCY_FIELD",
    "QUEUE_FIELD",
    "PREVIOUS_REWARD_FIELD",
    "REWARD_FIELD",
    "reverified_row",
    "rollout_result",
    "rollout_row",
    "with_environment",
]

REWARD_FIELD = "reward"
# The rollout's wall time in seconds, from the first attempt to the written row (retries included).
LATENCY_FIELD = "latency_s"
# The reward a row had before ``gym reverify`` scored it again.
PREVIOUS_REWARD_FIELD = "previous_reward"
# How long a rollout waited for its turn before its first request was sent (a collector with more
# rollouts in flight than connections): right after the latency, in the rows of rollouts that waited.
QUEUE_FIELD = "queue_s"
# The fields a collector writes itself, first in every row.
COLLECTOR_FIELDS = ("task_index", "rollout_index", "agent", REWARD_FIELD, LATENCY_FIELD)
# The environment stamp: the resources server's type and its instance.
ENVIRONMENT_FIELDS = ("environment", "resources_server")
# The fields of a row a new verdict never replaces (``reward`` aside, which it always does).
KEPT_ON_REVERIFY = (*COLLECTOR_FIELDS, *ENVIRONMENT_FIELDS, PREVIOUS_REWARD_FIELD, "response")


def rollout_result(
    *,
    record: Mapping[str, Any],
    verdict: Mapping[str, Any],
    response: Any,
    facts: Mapping[str, Any] | None = None,
    environment: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The answer of ``POST /run``: ``environment`` < ``record`` < ``facts`` < ``verdict``, then ``response``."""
    return {**(environment or {}), **record, **(facts or {}), **verdict, "response": response}


def with_environment(result: dict[str, Any], environment: Mapping[str, Any]) -> dict[str, Any]:
    """``result`` with the environment stamp added where the agent did not set those fields (the
    stamp's precedence in :func:`rollout_result`: the lowest)."""
    for key, value in environment.items():
        result.setdefault(key, value)
    return result


def rollout_row(
    result: Mapping[str, Any],
    task: Mapping[str, Any],
    *,
    task_index: int,
    rollout_index: int,
    agent: str,
    reward: float,
    latency_s: float,
    queue_s: float | None = None,
) -> dict[str, Any]:
    """One output line: the collector's fields (``queue_s`` after them when given), then the agent's
    result, then the task row, then ``response`` (each source adds only the names not taken by an
    earlier one)."""
    row: dict[str, Any] = {
        "task_index": task_index,
        "rollout_index": rollout_index,
        "agent": agent,
        REWARD_FIELD: reward,
        LATENCY_FIELD: latency_s,
    }
    if queue_s is not None:
        row[QUEUE_FIELD] = queue_s
    for source in (result, task):
        for key, value in source.items():
            if key not in row and key != "response":
                row[key] = value
    row["response"] = result.get("response")
    return row


def reverified_row(row: Mapping[str, Any], verdict: Mapping[str, Any]) -> dict[str, Any]:
    """``row`` scored again by ``verdict``: its ``reward`` and ``previous_reward`` (the row's former
    reward, right after it), then the row's fields in their order, each replaced by the verdict's
    unless it is one of :data:`KEPT_ON_REVERIFY`, then the verdict's new fields."""
    new: dict[str, Any] = {}
    for key, value in row.items():
        if key == PREVIOUS_REWARD_FIELD:
            continue
        if key == REWARD_FIELD:
            new[REWARD_FIELD] = float(verdict[REWARD_FIELD])
            new[PREVIOUS_REWARD_FIELD] = value
        else:
            new[key] = value
    new.update((k, v) for k, v in verdict.items() if k not in KEPT_ON_REVERIFY and k != REWARD_FIELD)
    return new
