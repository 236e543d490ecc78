"""The collector and ``gym reverify`` decide by gym-core's failure table (gym_core.failures)."""

from __future__ import annotations

import pytest

from gym_core import failures
from gym_core.errors import ServerCallError, ServerHTTPError, ServerTimeoutError, ServerUnavailableError

from gym_cli import reverify, rollouts
from gym_cli.rollouts import is_infrastructure_failure


def test_the_collectors_reasons_are_the_tables():
    assert rollouts.INFRASTRUCTURE_REASONS is failures.INFRASTRUCTURE_TYPES
    assert reverify.ends_rollout is failures.ends_rollout  # a replayed tool call, as the agents judge it


@pytest.mark.parametrize(
    ("exc", "again"),
    [
        (ServerUnavailableError("agent", "/run", "refused"), True),
        (ServerTimeoutError("agent", "/run", "no answer"), True),
        (ServerCallError("agent", "/run", "an answer that is not JSON"), False),
        (ServerHTTPError("agent", "/run", "lost", status=424, error_type="session_expired"), True),
        (ServerHTTPError("agent", "/run", "forged", status=424, error_type="invalid_session"), True),
        (ServerHTTPError("agent", "/run", "no token", status=401, error_type="unauthorized"), False),
        (ServerHTTPError("agent", "/run", "refused", status=424, error_type="upstream_refused"), False),
        (ServerHTTPError("agent", "/run", "bad row", status=422, error_type="validation_error"), False),
        (ServerHTTPError("agent", "/run", "judge", status=502, error_type="judge_failed"), True),
        (ServerHTTPError("agent", "/run", "busy", status=429), True),
        (ServerHTTPError("agent", "/run", "a plugin's", status=503, error_type="cohorts_full"), True),
        (KeyError("reward"), False),
    ],
)
def test_a_failed_rollout_is_run_again_as_the_table_says(exc, again):
    assert is_infrastructure_failure(exc) == again
    if isinstance(exc, ServerHTTPError):
        assert again == failures.retried_by_collector(exc.status, exc.reason)
