"""The failure table: what each typed failure means to the client, the agent and the collector.

A failure reaches a caller as an HTTP status and a JSON error whose ``type`` names it
(``{"error": {"message", "type", "status"}}``), or as no usable answer at all. Four layers decide
what to do with it, and each reads this module rather than a list of its own:

- **the client** (:class:`~gym_core.client.ServerClient`) retries it within its deadline, by status
  (:data:`CLIENT_RETRY_STATUSES`), unless the answer carries :data:`FINAL_HEADER`;
- **a server whose own call failed** for good answers its caller with the failure's ``type``, a
  status from :func:`relayed_status`, and :data:`FINAL_HEADER`: its client already spent the
  retries, so the layers between do not multiply them;
- **an agent whose tool call gets it** ends the rollout (:func:`ends_rollout`), or shows it to the
  model as the tool's output (an error the environment meant);
- **the collector** (``gym collect``, ``gym reverify``) runs the rollout again later
  (:func:`retried_by_collector`: an infrastructure failure, never scored), or records it as the
  task's failure.

:data:`TABLE` has one :class:`Failure` row per type gym-core answers or raises; plugins add their own
types (an :class:`~gym_core.errors.InfrastructureError` ``kind``, a remote agent's reasons), which
the status rules classify. :func:`render_markdown` renders the table and the rules for
docs/reliability.md: ``python -m gym_core.failures docs/reliability.md`` rewrites its section there,
and a test fails when the page and this module disagree.

A leaf module (the standard library only): errors, the client and the collector all import it.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "Failure",
    "TABLE",
    "FAILURES",
    "FINAL_HEADER",
    "CLIENT_RETRY_STATUSES",
    "BUSY_STATUSES",
    "INFRASTRUCTURE_STATUSES",
    "ROLLOUT_ENDING_TYPES",
    "INFRASTRUCTURE_TYPES",
    "FINAL_TYPES",
    "ends_rollout",
    "retried_by_collector",
    "relayed_status",
    "render_markdown",
    "update_page",
    "BEGIN_MARKER",
    "END_MARKER",
    "RELAYED_TIMEOUT",
    "RELAYED_INFRASTRUCTURE",
    "RELAYED_REFUSAL",
    # the rows, by type
    "UNAUTHORIZED", "INVALID_SESSION", "SESSION_EXPIRED", "VALIDATION_ERROR", "DECODE_ERROR", "TOOL_ERROR",
    "UNKNOWN_TOOL", "BODY_TIMEOUT", "HEADER_TIMEOUT", "NOT_READY", "TOO_MANY_CONNECTIONS", "INTERNAL_ERROR",
    "DEADLINE_EXCEEDED", "INFRASTRUCTURE_ERROR",
    "JUDGE_FAILED", "SANDBOX_FAILED", "UPSTREAM_TIMEOUT", "UPSTREAM_UNAVAILABLE", "UPSTREAM_ERROR", "UPSTREAM_REFUSED",
    "MODEL_OVERLOADED", "SERVER_UNAVAILABLE", "SERVER_TIMEOUT",
]  # fmt: skip

# On an error answer: the server already spent its own bounded retries on what failed (a model
# server on its upstream), so retrying here would multiply them; the caller's caller decides.
FINAL_HEADER = "x-gym-final"

# Answers a client tries again (within its attempts and deadline) unless marked final: busy (429,
# 503) or a gateway's trouble (502, 504). Not 500: the request may have done its work.
CLIENT_RETRY_STATUSES = frozenset({429, 502, 503, 504})
# What a model server retries of its engine's answers by default: "busy, try later", nothing
# generated. A 5xx may have been generated, and billed, before it failed.
BUSY_STATUSES = frozenset({429, 503})
# Answers that say the serving side failed, whatever their type: a tool call that gets one ends the
# rollout, the collector runs the rollout again, a judge's client retries them.
INFRASTRUCTURE_STATUSES = frozenset({429, *range(500, 600)})

# What a server answers when a call of its own failed for good (see relayed_status).
RELAYED_TIMEOUT = 504
RELAYED_INFRASTRUCTURE = 502
RELAYED_REFUSAL = 424


@dataclass(frozen=True)
class Failure:
    """One typed failure and what each layer does with it.

    - ``type``: the error's ``type`` in answers, failure files and metrics.
    - ``status``: the HTTP status it is answered with. A ``client_side`` failure has no answer of
      its own; ``status`` is what a gym server answers when it relays one (:func:`relayed_status`).
    - ``answered_by``: who raises or answers it.
    - ``final``: answered with :data:`FINAL_HEADER` (the server already spent the retries), so no
      client retries it again.
    - ``client_retries``: the client that gets it tries the request again, within its attempts and
      deadline (by status for an answer: :data:`CLIENT_RETRY_STATUSES`, never when final).
    - ``ends_rollout``: an agent whose tool call gets it ends the rollout with this reason; if not,
      it is the tool's output, shown to the model (an error the environment meant).
    - ``collector_retries``: an infrastructure failure: the collector runs the rollout again (in the
      same run within ``--retries``, else on resume), never scoring it; if not, the rollout is
      recorded as failed for the task's own reason.
    - ``client_side``: raised by a client that got no usable answer (the type is the error's class).
    - ``meaning``: what happened, for the docs.
    """

    type: str
    status: int
    answered_by: str
    final: bool
    client_retries: bool
    ends_rollout: bool
    collector_retries: bool
    meaning: str
    client_side: bool = False


def _row(type_: str, status: int, answered_by: str, flags: str, meaning: str, *, client_side: bool = False) -> Failure:
    """A row from its policy flags, one letter each or ``-``: ``f`` final, ``c`` retried by the
    client, ``e`` ends the rollout, ``r`` retried by the collector."""
    if len(flags) != 4 or any(flag not in ("-", letter) for flag, letter in zip(flags, "fcer")):
        raise ValueError(f"{type_}: flags {flags!r} are not four of f, c, e, r (in that order) or -")
    final, client, ends, collector = (flag != "-" for flag in flags)
    return Failure(type_, status, answered_by, final, client, ends, collector, meaning, client_side)


# --- the table ------------------------------------------------------------------------------------
# Requests gym refuses, sessions, and the server itself.
UNAUTHORIZED = _row(
    "unauthorized",
    401,
    "any gym server",
    "--e-",
    "the request lacks the run's token; another attempt would lack it too",
)
INVALID_SESSION = _row(
    "invalid_session",
    403,
    "a resources server",
    "--er",
    "the session cookie fails its signature (forged, or signed before a restart)",
)
SESSION_EXPIRED = _row(
    "session_expired",
    409,
    "a resources server",
    "--er",
    "the session's state is gone: closed, evicted, or lost in a restart",
)
VALIDATION_ERROR = _row(
    "validation_error",
    422,
    "any gym server",
    "----",
    "the body does not match the route's schema (the message names the field)",
)
DECODE_ERROR = _row(
    "decode_error", 400, "any gym server", "----", "the body is not JSON, not UTF-8, or nested too deeply"
)
TOOL_ERROR = _row(
    "tool_error",
    400,
    "a resources server's tool",
    "----",
    "the tool refused the call (`ToolError`; 400 unless it gives its own status)",
)
UNKNOWN_TOOL = _row(
    "unknown_tool", 404, "a resources server", "----", "`POST /tools/<name>` names no tool of the server"
)
BODY_TIMEOUT = _row(
    "body_timeout", 408, "any gym server", "----", "the request body did not arrive within `body_timeout_s`"
)
HEADER_TIMEOUT = _row(
    "header_timeout",
    408,
    "any gym server",
    "----",
    "the request line and headers did not arrive within `header_timeout_s` (the connection is closed)",
)
NOT_READY = _row("not_ready", 503, "any gym server", "-cer", "the server is still starting (`GET /ready`)")
TOO_MANY_CONNECTIONS = _row(
    "too_many_connections",
    503,
    "any gym server",
    "-cer",
    "the server holds `max_connections` connections already (`retry-after: 1`; the connection is closed)",
)
INTERNAL_ERROR = _row(
    "internal_error",
    500,
    "any gym server",
    "--er",
    "an unhandled exception: the answer has its error id, the server's log the traceback",
)
DEADLINE_EXCEEDED = _row(
    "deadline_exceeded", 504, "any gym server", "f-er", "no answer within the caller's `x-gym-timeout`"
)
# Dependencies of a server (InfrastructureError): final, their own retries are spent.
INFRASTRUCTURE_ERROR = _row(
    "infrastructure_error",
    502,
    "a server's dependency",
    "f-er",
    "a dependency failed (`InfrastructureError`; plugins name their own kinds)",
)
JUDGE_FAILED = _row(
    "judge_failed",
    502,
    "a judged resources server",
    "f-er",
    "the judge could not be asked, or its reply is not a Responses object",
)
SANDBOX_FAILED = _row(
    "sandbox_failed",
    502,
    "a resources server running programs",
    "f-er",
    "the sandbox failed to run the program (not the program failing)",
)
UPSTREAM_TIMEOUT = _row(
    "upstream_timeout",
    504,
    "a model server",
    "f-er",
    "the engine gave no answer within `timeout_s` or before a deadline",
)
UPSTREAM_UNAVAILABLE = _row(
    "upstream_unavailable",
    502,
    "a model server",
    "f-er",
    "the engine was unreachable, or busy (`BUSY_STATUSES`) at every attempt",
)
UPSTREAM_ERROR = _row(
    "upstream_error",
    502,
    "a model server",
    "f-er",
    "the engine answered a 5xx, or something that is not what was asked",
)
UPSTREAM_REFUSED = _row(
    "upstream_refused",
    424,
    "a model server",
    "f---",
    "the engine refused the request (a 4xx): the same request would be refused again",
)
MODEL_OVERLOADED = _row(
    "model_overloaded", 503, "a model server", "f-er", "no upstream slot free within `queue_timeout_s`"
)
# A client that got no usable answer; a server relays these final.
SERVER_UNAVAILABLE = _row(
    "ServerUnavailableError",
    RELAYED_INFRASTRUCTURE,
    "a client",
    "fcer",
    "no connection: refused, reset, or not opened within `connect_timeout_s`",
    client_side=True,
)
SERVER_TIMEOUT = _row(
    "ServerTimeoutError",
    RELAYED_TIMEOUT,
    "a client",
    "f-er",
    "no answer within `timeout_s` or the deadline (tried again only where `retry_timeouts` is on: a judge's client)",
    client_side=True,
)

TABLE: tuple[Failure, ...] = (
    UNAUTHORIZED, INVALID_SESSION, SESSION_EXPIRED, VALIDATION_ERROR, DECODE_ERROR, TOOL_ERROR, UNKNOWN_TOOL,
    BODY_TIMEOUT, HEADER_TIMEOUT, NOT_READY, TOO_MANY_CONNECTIONS, INTERNAL_ERROR, DEADLINE_EXCEEDED,
    INFRASTRUCTURE_ERROR, JUDGE_FAILED, SANDBOX_FAILED,
    UPSTREAM_TIMEOUT, UPSTREAM_UNAVAILABLE, UPSTREAM_ERROR, UPSTREAM_REFUSED, MODEL_OVERLOADED,
    SERVER_UNAVAILABLE, SERVER_TIMEOUT,
)  # fmt: skip
FAILURES: Mapping[str, Failure] = {row.type: row for row in TABLE}

# Derived: the types each layer looks up (a status in INFRASTRUCTURE_STATUSES counts whatever its type).
ROLLOUT_ENDING_TYPES = frozenset(row.type for row in TABLE if row.ends_rollout)
INFRASTRUCTURE_TYPES = frozenset(row.type for row in TABLE if row.collector_retries)
FINAL_TYPES = frozenset(row.type for row in TABLE if row.final)


def ends_rollout(status: int | None, type_: str | None) -> bool:
    """Whether a tool call's failure ends the rollout (raised, the rollout fails with ``type_``)
    rather than being the tool's output: no answer, an infrastructure status, or a type whose row
    says so. Anything else is an error the environment meant, shown to the model."""
    return status is None or status in INFRASTRUCTURE_STATUSES or type_ in ROLLOUT_ENDING_TYPES


def retried_by_collector(status: int | None, type_: str | None) -> bool:
    """Whether a failed rollout (``/run`` answered ``status`` with ``type_``, or no answer with the
    client's error class as ``type_``) is an infrastructure failure, worth running again; if not,
    it is recorded as the task's failure. An agent relays a lost session as a 424, so the type
    counts as well as the status."""
    return status in INFRASTRUCTURE_STATUSES or type_ in INFRASTRUCTURE_TYPES


def relayed_status(status: int | None, *, timed_out: bool = False, unreachable: bool = False) -> int:
    """The status a gym server answers (final, with the failure's type) when a call of its own
    failed for good, its client's retries spent: 504 if it timed out, 502 if the other server was
    unreachable or answered an infrastructure status (the rollout may succeed later), else 424
    (the other server refused: retrying would not help)."""
    if timed_out:
        return RELAYED_TIMEOUT
    if unreachable or status in INFRASTRUCTURE_STATUSES:
        return RELAYED_INFRASTRUCTURE
    return RELAYED_REFUSAL


# --- the rendered table ---------------------------------------------------------------------------

BEGIN_MARKER = (
    "<!-- failure table: generated by `python -m gym_core.failures docs/reliability.md`; edit gym_core/failures.py -->"
)
END_MARKER = "<!-- end of the failure table -->"


def _statuses(statuses: Iterable[int]) -> str:
    found = sorted(statuses)
    fives = set(range(500, 600))
    if fives <= set(found):
        return ", ".join([*(str(s) for s in found if s not in fives), "every 5xx"])
    return ", ".join(str(s) for s in found)


def render_markdown() -> str:
    """The failure table and its status rules as markdown, the section between the markers."""
    yes = {True: "yes", False: "no"}
    lines = [
        "| type | status | answered by | final | client retries | a tool call that gets it | the collector"
        " | what happened |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in TABLE:
        status = f"none (relayed {row.status})" if row.client_side else str(row.status)
        final = f"{yes[row.final]}, when relayed" if row.client_side else yes[row.final]
        lines.append(
            f"| `{row.type}` | {status} | {row.answered_by} | {final} | {yes[row.client_retries]} | "
            f"{'ends the rollout' if row.ends_rollout else 'is shown to the model'} | "
            f"{'runs it again' if row.collector_retries else 'records it as failed'} | {row.meaning} |"
        )
    lines += [
        "",
        "The rules by status, for every type, a plugin's own included:",
        "",
        f"- **The client** retries answers {_statuses(CLIENT_RETRY_STATUSES)} that are not final "
        f"(`{FINAL_HEADER}`), and connections that fail, within its attempts and deadline; a judge's "
        f"client retries {_statuses(INFRASTRUCTURE_STATUSES)}.",
        f"- **A model server** retries its engine's {_statuses(BUSY_STATUSES)} (busy: nothing generated), "
        "and no other status unless its engine bills nothing.",
        f"- **An infrastructure status** ({_statuses(INFRASTRUCTURE_STATUSES)}) ends the rollout when a tool "
        "call gets it, and the collector runs the rollout again, whatever the type. A tool call with no usable "
        "answer ends the rollout too.",
        f"- **A server whose own call failed** for good answers its caller the failure's type, final: "
        f"{RELAYED_TIMEOUT} if it timed out, {RELAYED_INFRASTRUCTURE} if the other server was unreachable "
        f"or answered an infrastructure status, else {RELAYED_REFUSAL}.",
        "- **Any other type** (Litestar's `NotFoundException`, a `GymError`'s class name, a plugin's "
        "own 4xx) is shown to the model when a tool call gets it, and the collector records the rollout as failed.",
    ]
    return "\n".join(lines) + "\n"


def update_page(text: str) -> str:
    """``text`` (a markdown page holding the markers) with the section between them re-rendered."""
    begin, end = text.find(BEGIN_MARKER), text.find(END_MARKER)
    if begin < 0 or end < begin:
        raise ValueError(f"the page has no failure table section: add the lines {BEGIN_MARKER!r} and {END_MARKER!r}")
    start = begin + len(BEGIN_MARKER)
    return f"{text[:start]}\n{render_markdown()}{text[end:]}"


def main(argv: list[str]) -> int:
    """``python -m gym_core.failures [PAGE]``: rewrite PAGE's failure table section, or print it."""
    if not argv:
        sys.stdout.write(render_markdown())
        return 0
    page = Path(argv[0])
    page.write_text(update_page(page.read_text()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
