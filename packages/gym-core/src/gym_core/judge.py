"""Judges: a resources server asking another model (by instance name) for a verdict.

An LLM judge is an infrastructure dependency of the reward, not part of it: when the judge cannot be
asked (unreachable, timed out, an error status, a reply that is not a Responses object), the verdict
is unknown, and so is the reward. :class:`Judge` therefore raises :class:`JudgeError` after its own
bounded retries, and every server answers it the same way: ``502`` with error type ``judge_failed``,
final (``x-gym-final``: nobody retries it layer by layer). The agent ends the rollout with that
typed reason and ``gym collect`` writes it to the failures file (never a reward of 0) and runs it
again, in this run if its retries allow and on resume otherwise. A reply that *can* be read but
holds no verdict label is a legitimate "not equal", as the environments spec says (§2).

Public API:

- :class:`Judge` — ``await judge.ask(prompt, system=...)`` → :class:`JudgeReply`. One per judge
  instance and server; its own connection pool, concurrency cap, per-call timeout and attempts.
- :class:`~gym_core.options.JudgeOptions` (also importable from here) — the option fields every
  judged environment shares (``judge_model_server``, ``judge_responses_create_params``,
  ``judge_endpoint_max_concurrency``, ``judge_timeout_s``, ``judge_max_attempts``); subclass it
  instead of ``ServerConfig`` in a light ``config.py``, then ``Judge.from_options``.
- :func:`first_label_verdict` — the first-occurrence rule for ``[[A=B]]``/``[[A!=B]]``-style labels.
- :class:`JudgeError` — the typed failure (``judge_failed``).

Example::

    class MyConfig(JudgeOptions, kw_only=True):
        judge_prompt: str = "Is {a} the same as {b}? Answer [[A=B]] or [[A!=B]]."

    class MyServer(ResourcesServer):
        async def startup(self):
            self.judge = Judge.from_options(self, self.config)

        async def verify(self, session, body):
            reply = await self.judge.ask(self.config.judge_prompt.format(a=..., b=...))
            equal = first_label_verdict(reply.text)
"""

from __future__ import annotations

import asyncio
import copy
from typing import TYPE_CHECKING, Any

import msgspec

from gym_core.client import ServerClient
from gym_core.errors import InfrastructureError, ServerCallError
from gym_core.failures import INFRASTRUCTURE_STATUSES
from gym_core.failures import JUDGE_FAILED as _JUDGE_FAILED_ROW
from gym_core.options import JudgeOptions
from gym_core.schemas import Message, OutputText, Response, assistant_text, decode_response

if TYPE_CHECKING:
    from gym_core.servers import GymServer

__all__ = ["Judge", "JudgeError", "JudgeOptions", "JudgeReply", "first_label_verdict", "JUDGE_FAILED"]

JUDGE_FAILED = _JUDGE_FAILED_ROW.type  # the error type of a JudgeError, in answers and failure files


class JudgeError(InfrastructureError):
    """The judge could not be asked, or its reply was not a Responses object: the verdict is
    unknown. Answered ``502 judge_failed`` (final); the rollout fails with that reason."""

    status = _JUDGE_FAILED_ROW.status
    kind = JUDGE_FAILED

    def __init__(self, judge: str, message: str, *, attempts: int = 1):
        self.judge = judge
        self.attempts = attempts
        super().__init__(f"judge {judge!r} failed: {message}")


class JudgeReply(msgspec.Struct, kw_only=True):
    """One judge call: what was sent, what came back, and the reply's text in the two readings the
    environments use."""

    params: dict[str, Any]  # the request sent (responses_create_params)
    response: dict[str, Any]  # the judge's Responses object, as JSON
    text: str  # every assistant text part, joined by "\n" and stripped (text_to_sql's reading)
    last_text: str | None  # the last output item's last content part, if that item is a message (§17, §18)
    last_is_output_text: bool  # ...and that part is an output_text part (§18 requires it)

    def record(self, **extra: Any) -> dict[str, Any]:
        """The ``{responses_create_params, response, ...}`` entry of a verdict's ``judge_evaluations``."""
        return {"responses_create_params": self.params, "response": self.response, **extra}


def first_label_verdict(text: str | None, equal_label: str = "[[A=B]]", not_equal_label: str = "[[A!=B]]") -> bool:
    """Whether ``text`` says *equal*: the equal label occurs, and before the not-equal label if both
    do. No label at all is *not equal* (an unreadable verdict is a wrong answer, not an error)."""
    if not text:
        return False
    equal_at = text.find(equal_label)
    if equal_at < 0:
        return False
    not_equal_at = text.find(not_equal_label)
    return not_equal_at < 0 or equal_at < not_equal_at


def _last_part(response: Response) -> tuple[str | None, bool]:
    if not response.output:
        return None, False
    last = response.output[-1]
    if not isinstance(last, Message):
        return None, False
    if isinstance(last.content, str):
        return last.content, True
    if not last.content:
        return None, False
    part = last.content[-1]
    return getattr(part, "text", None), isinstance(part, OutputText)


class Judge:
    """Asks one judge model server for verdicts, on behalf of one server.

    Calls go through a client of their own (closed with the server): ``timeout_s`` per attempt,
    ``max_attempts`` tries of transient failures (connection errors, timeouts, 429 and 5xx, with
    backoff), never more than ``max_concurrency`` in flight; the caller's own deadline
    (``x-gym-timeout``) bounds them all. Anything else raises :class:`JudgeError`.
    """

    def __init__(
        self,
        server: GymServer,
        model_server: str,
        params: dict[str, Any] | None = None,
        *,
        max_concurrency: int | None = 64,
        timeout_s: float = 120.0,
        max_attempts: int = 3,
    ):
        self.server = server
        self.model_server = model_server
        self.params = dict(params or {})
        self.params.pop("input", None)
        self.timeout_s = timeout_s
        self.max_attempts = max_attempts
        self._slots = asyncio.Semaphore(max_concurrency) if max_concurrency else None
        base = server.config.client
        client_config = msgspec.structs.replace(
            base,
            timeout_s=timeout_s,
            max_attempts=max_attempts,
            retry_timeouts=True,
            deadline_s=min(base.deadline_s, max_attempts * (timeout_s + base.backoff_max_s)),
        )
        self.client: ServerClient = server.own_client(client_config)
        # Every infrastructure status of a judge is transient (a model server's 500 too), not only
        # the client's default 429/502/503/504; an answer marked final (x-gym-final) is still not retried.
        self.client.retry_statuses = INFRASTRUCTURE_STATUSES
        self.calls = 0  # judge calls made (each with its retries), for metrics
        self.failures = 0  # ...of which ended in JudgeError

    @classmethod
    def from_options(cls, server: GymServer, options: JudgeOptions) -> Judge:
        return cls(
            server,
            options.judge_model_server,
            options.judge_responses_create_params,
            max_concurrency=options.judge_endpoint_max_concurrency,
            timeout_s=options.judge_timeout_s,
            max_attempts=options.judge_max_attempts,
        )

    def request(self, prompt: str, system: str | None = None, **overrides: Any) -> dict[str, Any]:
        """The ``responses_create_params`` of a judge call: the base parameters (deep-copied),
        ``overrides`` (``metadata``...), and ``input`` = the optional system message then the prompt."""
        params = copy.deepcopy(self.params)
        params.update(overrides)
        messages = [{"role": "system", "content": system}] if system else []
        messages.append({"role": "user", "content": prompt})
        params["input"] = messages
        return params

    async def ask(self, prompt: str, *, system: str | None = None, **overrides: Any) -> JudgeReply:
        """Ask the judge once (with bounded retries); its reply, or :class:`JudgeError`."""
        return await self.send(self.request(prompt, system, **overrides))

    async def send(self, params: dict[str, Any]) -> JudgeReply:
        """Send prepared ``responses_create_params`` (e.g. with an ``input`` of several turns)."""
        self.calls += 1
        try:
            if self._slots is None:
                raw = await self.client.request("POST", self.model_server, "/v1/responses", body=params)
            else:
                async with self._slots:
                    raw = await self.client.request("POST", self.model_server, "/v1/responses", body=params)
            response = decode_response(raw)
        except ServerCallError as exc:
            self.failures += 1
            raise JudgeError(self.model_server, str(exc), attempts=exc.attempts) from None
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            self.failures += 1
            raise JudgeError(self.model_server, f"its reply is not a Responses object: {exc}") from None
        last_text, last_is_output_text = _last_part(response)
        return JudgeReply(
            params=params,
            response=msgspec.json.decode(raw),
            text=assistant_text(response),
            last_text=last_text,
            last_is_output_text=last_is_output_text,
        )
