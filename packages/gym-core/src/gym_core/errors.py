"""Exceptions gym raises. Every message says what is wrong, where, and when possible the fix."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

from gym_core import failures

__all__ = [
    "GymError",
    "PluginError",
    "UnknownPluginError",
    "ConfigError",
    "ServerCallError",
    "ServerUnavailableError",
    "ServerTimeoutError",
    "ServerHTTPError",
    "ToolError",
    "InfrastructureError",
    "SessionError",
    "did_you_mean",
]


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` when a close match exists, else an empty string."""
    matches = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {matches[0]!r}?)" if matches else ""


class GymError(Exception):
    """Base of gym's errors: the message is meant for the user, as is."""


class PluginError(GymError):
    """A plugin is broken: it failed to import, registered badly, or misspelled a hook."""


class UnknownPluginError(PluginError):
    def __init__(self, name: str, known: Iterable[str], what: str = "plugin"):
        known = sorted(known)
        self.name = name
        super().__init__(f"unknown {what} {name!r}{did_you_mean(name, known)}; known: {', '.join(known) or 'none'}")


class ConfigError(GymError):
    """The configuration is invalid. ``problems`` lists every problem found, each with its path."""

    def __init__(self, problems: list[str] | str):
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        if len(self.problems) == 1:
            super().__init__(f"invalid config: {self.problems[0]}")
        else:
            super().__init__("invalid config:\n" + "\n".join(f"  - {p}" for p in self.problems))


class ServerCallError(GymError):
    """A call to another gym server failed for good (after the retries it was allowed)."""

    def __init__(self, server: str, path: str, message: str, *, status: int | None = None, attempts: int = 1):
        self.server = server
        self.path = path
        self.status = status
        self.attempts = attempts
        self.detail = message
        status_text = f" status {status}" if status is not None else ""
        super().__init__(f"{server} {path}:{status_text} {message} (after {attempts} attempt{'s' * (attempts != 1)})")

    @property
    def reason(self) -> str:
        """A short, stable name of the failure kind, for failure files and metrics."""
        return type(self).__name__


class ServerUnavailableError(ServerCallError):
    """The server could not be reached (connection refused or reset)."""


class ServerTimeoutError(ServerCallError):
    """The server did not answer within the per-request timeout or the overall deadline."""


class ServerHTTPError(ServerCallError):
    """The server answered with an error status; ``error_type`` is the ``type`` of its JSON error, if any."""

    def __init__(
        self,
        server: str,
        path: str,
        message: str,
        *,
        status: int | None = None,
        attempts: int = 1,
        error_type: str | None = None,
    ):
        self.error_type = error_type
        super().__init__(server, path, message, status=status, attempts=attempts)

    @property
    def reason(self) -> str:
        return self.error_type or type(self).__name__


class InfrastructureError(GymError):
    """Something this server depends on failed (a judge model, the sandbox), so the verdict is
    unknown: never a reward. Servers answer it ``status`` (502: retryable by a later attempt of the
    rollout, final for the layers in between) with error type ``kind``; the rollout fails with that
    reason and ``gym collect`` runs it again."""

    status = failures.INFRASTRUCTURE_ERROR.status
    kind = failures.INFRASTRUCTURE_ERROR.type


class ToolError(GymError):
    """Raised by a tool to tell the model its call failed; the message is what the model sees."""

    def __init__(self, message: str, status: int = failures.TOOL_ERROR.status):
        self.status = status
        super().__init__(message)


class SessionError(GymError):
    """A request needs this server's existing session state and the caller's session cannot give it.

    ``kind`` is ``"invalid_session"`` (the cookie's signature does not check out: tampered, or
    signed by another run) or ``"session_expired"`` (closed, evicted, or lost in a restart). Agents
    end the rollout with this as its failure reason: it is never the model's fault, nor a reward.
    """

    def __init__(self, message: str, kind: str = failures.SESSION_EXPIRED.type):
        self.kind = kind
        row = failures.INVALID_SESSION if kind == failures.INVALID_SESSION.type else failures.SESSION_EXPIRED
        self.status = row.status
        super().__init__(message)
