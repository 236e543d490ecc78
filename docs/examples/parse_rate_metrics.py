"""A plugin module adding a metric to `gym profile`: the share of answers the verifier could read."""

from gym_core import hookimpl


@hookimpl
def gym_aggregate_metrics(rollouts):
    parsed = sum(1 for row in rollouts if row.get("extracted_answer") is not None)
    return {"my_env/parse_rate": parsed / len(rollouts)}
