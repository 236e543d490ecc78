"""The failure table (gym_core.failures): the page renders it, its rows agree with its rules, and
the client, the servers, the agents' tool calls and the collector read it."""

from __future__ import annotations

import re
import socket
from pathlib import Path
from typing import Any

import pytest

import gym_core
from gym_core import client, failures, upstream
from gym_core.client import ServerClient
from gym_core.errors import (
    InfrastructureError,
    ServerHTTPError,
    ServerTimeoutError,
    ServerUnavailableError,
    SessionError,
    ToolError,
)
from gym_core.failures import (
    FAILURES,
    INFRASTRUCTURE_STATUSES,
    TABLE,
    ends_rollout,
    relayed_status,
    retried_by_collector,
)
from gym_core.judge import Judge, JudgeError
from gym_core.options import ClientConfig, ServerConfig
from gym_core.sandbox import SandboxError
from gym_core.schemas import FunctionCall
from gym_core.servers import AgentServer, GymServer, ResourcesServer, tool
from gym_core.sessions import Session

ROOT = Path(__file__).resolve().parents[3]
PAGE = ROOT / "docs" / "reliability.md"


# --- the page --------------------------------------------------------------------------------------


def test_the_reliability_page_renders_the_table():
    """Fix: ``uv run python -m gym_core.failures docs/reliability.md`` (edit the table in
    gym_core/failures.py, never the page's generated section)."""
    text = PAGE.read_text()
    assert failures.update_page(text) == text, "docs/reliability.md's failure table is not the table's rendering"


def test_the_page_check_catches_either_side_changing_alone(monkeypatch):
    text = PAGE.read_text()
    edited = text.replace("| `session_expired` | 409 |", "| `session_expired` | 410 |")
    assert edited != text and failures.update_page(edited) == text  # the page edited alone
    changed = [
        failures.Failure(**{**vars(row), "collector_retries": False}) if row.type == "session_expired" else row
        for row in TABLE
    ]
    monkeypatch.setattr(failures, "TABLE", tuple(changed))
    assert failures.update_page(text) != text  # the table changed alone
    with pytest.raises(ValueError, match="no failure table section"):
        failures.update_page("# a page without the markers\n")


# --- the rows agree with the rules -----------------------------------------------------------------


def test_types_are_unique_and_flags_spelt_right():
    assert len(FAILURES) == len(TABLE)
    with pytest.raises(ValueError, match="flags"):
        failures._row("x", 400, "a test", "fe--", "wrong order")


@pytest.mark.parametrize("row", TABLE, ids=lambda row: row.type)
def test_each_row_agrees_with_the_status_rules(row):
    """A row the rules could not honour is a contradiction: fix the row (or the rule)."""
    if row.client_side:
        assert row.final  # relayed by a server whose client spent the retries
    else:
        # The client sees only the status and the final header.
        assert row.client_retries == (row.status in failures.CLIENT_RETRY_STATUSES and not row.final)
    assert ends_rollout(row.status, row.type) == row.ends_rollout
    assert retried_by_collector(row.status, row.type) == row.collector_retries
    # Run again later, but shown to the model now, would make the model see the infrastructure.
    assert row.ends_rollout or not row.collector_retries
    if row.final and not row.client_side:
        # What a server relays for it after its own call got it keeps the same meaning.
        assert (relayed_status(row.status) in INFRASTRUCTURE_STATUSES) == (row.status in INFRASTRUCTURE_STATUSES)


def test_client_side_rows_are_what_a_server_relays():
    assert relayed_status(None, timed_out=True) == failures.SERVER_TIMEOUT.status
    assert relayed_status(None, unreachable=True) == failures.SERVER_UNAVAILABLE.status
    assert ClientConfig().retry_timeouts == failures.SERVER_TIMEOUT.client_retries


@pytest.mark.parametrize(
    ("status", "type_", "ends", "collector"),
    [
        (None, None, True, False),  # no usable answer
        (409, "session_expired", True, True),
        (424, "session_expired", True, True),  # an agent relays a lost session as a 424
        (424, "invalid_session", True, True),
        (401, "unauthorized", True, False),  # the run's token is wrong: another attempt fails alike
        (424, "unauthorized", True, False),
        (400, "tool_error", False, False),
        (422, "validation_error", False, False),
        (404, "NotFoundException", False, False),  # not a row: any other 4xx
        (424, "upstream_refused", False, False),
        (424, "ServerCallError", False, False),
        (500, "internal_error", True, True),
        (502, "whatever_a_plugin_names", True, True),  # any 5xx, whatever its type
        (429, "tool_error", True, True),  # busy: not the model's doing
        (429, None, True, True),
    ],
)
def test_what_a_tool_call_and_the_collector_do(status, type_, ends, collector):
    assert ends_rollout(status, type_) == ends
    assert retried_by_collector(status, type_) == collector


@pytest.mark.parametrize(
    ("status", "timed_out", "unreachable", "relayed"),
    [(None, True, False, 504), (None, False, True, 502), (None, False, False, 424), (429, False, False, 502),
     (500, False, False, 502), (503, False, False, 502), (599, False, False, 502), (404, False, False, 424),
     (409, False, False, 424)],
)  # fmt: skip
def test_what_a_server_relays(status, timed_out, unreachable, relayed):
    assert relayed_status(status, timed_out=timed_out, unreachable=unreachable) == relayed


# --- the places that answer or decide read the table ------------------------------------------------


def test_the_old_names_are_the_tables():
    assert client.RETRY_STATUSES is failures.CLIENT_RETRY_STATUSES
    assert client.FINAL_HEADER is failures.FINAL_HEADER
    assert ServerClient().retry_statuses == failures.CLIENT_RETRY_STATUSES
    assert upstream.BUSY_STATUSES is failures.BUSY_STATUSES


def test_a_judges_client_retries_every_infrastructure_status():
    judge = Judge(GymServer(name="env"), "judge")
    assert judge.client.retry_statuses == INFRASTRUCTURE_STATUSES


def test_the_typed_errors_carry_the_tables_statuses():
    for kind in ("invalid_session", "session_expired"):
        error = SessionError("x", kind)
        assert (error.status, error.kind) == (FAILURES[kind].status, kind)
    assert (SessionError("x").status, SessionError("x").kind) == (409, "session_expired")
    assert ToolError("x").status == failures.TOOL_ERROR.status
    for error, row in [
        (InfrastructureError("x"), failures.INFRASTRUCTURE_ERROR),
        (JudgeError("j", "x"), failures.JUDGE_FAILED),
        (SandboxError("x"), failures.SANDBOX_FAILED),
    ]:
        assert (error.status, error.kind) == (row.status, row.type)


@pytest.mark.parametrize(
    ("exc", "row"),
    [
        (ServerTimeoutError("e", "/p", "slow"), failures.UPSTREAM_TIMEOUT),
        (ServerUnavailableError("e", "/p", "refused"), failures.UPSTREAM_UNAVAILABLE),
        (ServerHTTPError("e", "/p", "busy", status=429), failures.UPSTREAM_UNAVAILABLE),
        (ServerHTTPError("e", "/p", "bad", status=400), failures.UPSTREAM_REFUSED),
        (ServerHTTPError("e", "/p", "boom", status=500), failures.UPSTREAM_ERROR),
    ],
)
def test_a_model_server_answers_its_engines_failures_as_rows(exc, row):
    failure = upstream.upstream_failure(exc)
    assert (failure.status, failure.kind) == (row.status, row.type) and row.final


_ERROR_LITERAL = re.compile(r'"error":\s*\{[^}]*?"type":\s*"(?P<type>\w+)"(?:,\s*"status":\s*(?P<status>\d+))?')
_ERROR_RESPONSE = re.compile(r'error_response\((?:[^()]|\([^()]*\))*?,\s*(?P<status>\d{3}),\s*"(?P<type>\w+)"\)')


def test_error_types_written_as_literals_are_rows_with_their_status():
    """The answers that spell their type in place (a raw ASGI layer, a route of its own) must say
    what the table says. Fix: add the row to gym_core/failures.py, or read it from there."""
    sources = Path(gym_core.__file__).parent.rglob("*.py")
    found: dict[str, set[int | None]] = {}
    for source in sources:
        text = source.read_text()
        for match in [*_ERROR_LITERAL.finditer(text), *_ERROR_RESPONSE.finditer(text)]:
            status = match["status"]
            found.setdefault(match["type"], set()).add(int(status) if status else None)
    assert {"unauthorized", "body_timeout", "deadline_exceeded", "not_ready", "unknown_tool"} <= set(found)
    for type_, statuses in found.items():
        assert type_ in FAILURES, f"{type_!r} is answered but not a row of the failure table"
        table_says = FAILURES[type_].status
        assert statuses <= {table_says, None}, f"{type_!r} is answered {statuses}, the table says {table_says}"


# --- the client's retries ----------------------------------------------------------------------------


async def test_the_client_retries_a_refused_connection_as_its_row_says():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again before the call: nothing listens there
    caller = ServerClient(urls={"gone": f"http://127.0.0.1:{port}"},
                          config=ClientConfig(max_attempts=3, backoff_s=0.01, backoff_max_s=0.02))  # fmt: skip
    try:
        with pytest.raises(ServerUnavailableError) as caught:
            await caller.request("GET", "gone", "/health")
    finally:
        await caller.close()
    assert caught.value.attempts == (3 if failures.SERVER_UNAVAILABLE.client_retries else 1)


# --- an agent's tool call ------------------------------------------------------------------------------


class Moody(ResourcesServer):
    """Tools that fail the way their names say."""

    @tool
    async def busy(self, session: Session) -> dict:
        """Busy: try later."""
        raise ToolError("rate limited, try later", 429)

    @tool
    async def refuse(self, session: Session) -> dict:
        """Refuses its arguments."""
        raise ToolError("amount must be >= 0")

    @tool
    async def gone(self, session: Session) -> dict:
        """Lost the session."""
        raise SessionError("no such session")


class ToolCallingAgent(AgentServer):
    async def run(self, body: Any, task: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError


@pytest.fixture(scope="module")
def moody_url(serve):
    with serve(Moody(name="moody")) as url:
        yield url


@pytest.mark.parametrize(("name", "ends"), [("busy", True), ("refuse", False), ("gone", True)])
async def test_a_tool_call_ends_the_rollout_as_the_table_says(moody_url, name, ends):
    """A tool answering 429 (after the client's retries) is busy, not the model's doing: the
    rollout ends and is run again, as the collector already judged a 429 (it used to be shown to
    the model as the tool's output)."""
    agent = ToolCallingAgent(
        ServerConfig(client=ClientConfig(max_attempts=2, backoff_s=0.01, backoff_max_s=0.02)), name="agent"
    )
    call = FunctionCall(call_id="c1", name=name, arguments="{}")
    try:
        if ends:
            with pytest.raises(ServerHTTPError) as caught:
                await agent.call_tool(moody_url, call, {name}, {})
            assert retried_by_collector(caught.value.status, caught.value.reason)
        else:
            output = await agent.call_tool(moody_url, call, {name}, {})
            assert "amount must be >= 0" in output.output
    finally:
        await agent.client.close()


def test_every_row_is_a_public_name():
    public = {id(getattr(failures, name)) for name in failures.__all__}
    assert [row.type for row in TABLE if id(row) not in public] == []
