"""The option types every server and plugin shares: a leaf module (msgspec and :mod:`gym_core.errors` only).

- :class:`ServerConfig`: the options every server instance accepts; a server type's config struct
  subclasses it with its own options.
- :class:`ClientConfig`: the limits of a server's calls to other servers (its ``client:`` option).
- :data:`ServerRef`, :data:`ModelRef`, :data:`ResourcesRef`, :data:`AgentRef`: option types naming
  another server instance of the same config; :func:`gym_core.config.load_config` checks that the
  instance exists and is of the right kind.

Describe each option with ``msgspec.Meta(description=...)``: ``gym plugin show NAME`` prints it, with
the option's type and default (:func:`describe_options`).
"""

from __future__ import annotations

import types
import typing
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

__all__ = [
    "DEFAULT_HOST",
    "DEFAULT_HEAD_PORT",
    "ServerConfig",
    "ClientConfig",
    "Ref",
    "ServerRef",
    "ModelRef",
    "JudgeOptions",
    "UpstreamOptions",
    "ResourcesRef",
    "AgentRef",
    "ref_of",
    "OptionInfo",
    "describe_options",
]


DEFAULT_HOST = "127.0.0.1"  # servers listen on loopback unless a config says otherwise
DEFAULT_HEAD_PORT = 11000  # where `gym run` serves the head server, and where clients look for it


@dataclass(frozen=True)
class Ref:
    """Marks a ``str`` option as the name of another server instance (of ``kind``, or any kind)."""

    kind: str | None


ServerRef = Annotated[str, Ref(None), Meta(description="the name of another server instance")]
ModelRef = Annotated[str, Ref("model"), Meta(description="the name of a model server instance")]
ResourcesRef = Annotated[str, Ref("resources"), Meta(description="the name of a resources server instance")]
AgentRef = Annotated[str, Ref("agent"), Meta(description="the name of an agent server instance")]


def ref_of(hint: Any) -> Ref | None:
    """The :class:`Ref` marker of an option's type hint (also inside ``Optional[...]``), if any."""
    for meta in getattr(hint, "__metadata__", ()):
        if isinstance(meta, Ref):
            return meta
    for arg in typing.get_args(hint):
        found = ref_of(arg)
        if found:
            return found
    return None


class ClientConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Limits of calls to other servers. Generous defaults: model calls can take minutes."""

    timeout_s: Annotated[float, Meta(gt=0, description="per-request timeout, seconds")] = 600.0
    connect_timeout_s: Annotated[float, Meta(gt=0, description="time to open a connection, seconds")] = 10.0
    max_attempts: Annotated[
        int, Meta(ge=1, description="tries of a request on connection errors and 429/502/503/504")
    ] = 3
    backoff_s: Annotated[float, Meta(ge=0, description="first retry delay, doubled per attempt, with jitter")] = 0.25
    backoff_max_s: Annotated[float, Meta(ge=0, description="longest retry delay")] = 8.0
    deadline_s: Annotated[float, Meta(gt=0, description="bound on one request with all its retries, seconds")] = 3600.0
    retry_timeouts: Annotated[
        bool, Meta(description="retry a timed-out request (off: a timed-out POST may have run, e.g. applied a tool)")
    ] = False
    pool_limit: Annotated[int, Meta(ge=1, description="connections open at once, all servers together")] = 100_000
    pool_limit_per_host: Annotated[int, Meta(ge=1, description="connections open at once to one server")] = 1_000


class ServerConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Options every server instance accepts. A server type's config struct subclasses it."""

    host: Annotated[str, Meta(description="address to listen on")] = DEFAULT_HOST
    port: Annotated[int, Meta(ge=0, le=65535, description="port to listen on; 0: a free one, assigned at start")] = 0
    max_body_bytes: Annotated[int, Meta(ge=1, description="largest request body accepted (413 above)")] = (
        64 * 1024 * 1024
    )
    body_timeout_s: Annotated[
        float,
        Meta(
            gt=0,
            description="a request body that stops arriving for this long is answered 408 and its connection closed, seconds",
        ),
    ] = 60.0
    header_timeout_s: Annotated[
        float,
        Meta(
            gt=0,
            description="a connection's request line and headers must arrive within this long of its opening "
            "(or of a request's first byte on a kept-alive connection), else it is closed, seconds",
        ),
    ] = 10.0
    idle_timeout_s: Annotated[
        float, Meta(gt=0, description="a kept-alive connection idle this long between requests is closed, seconds")
    ] = 75.0
    max_connections: Annotated[
        int,
        Meta(ge=1, description="connections open at once; one more is answered 503 (retry-after: 1) and closed"),
    ] = 10_000
    session_ttl_s: Annotated[float, Meta(gt=0, description="idle time after which a session's state is dropped")] = (
        3600.0
    )
    max_sessions: Annotated[
        int, Meta(ge=1, description="sessions held at once; above it the least recently used is dropped (counted)")
    ] = 100_000
    session_secret: Annotated[
        str | None, Meta(description="key signing session cookies; default: random per process")
    ] = None
    client: Annotated[ClientConfig, Meta(description="limits of this server's calls to other servers")] = msgspec.field(
        default_factory=ClientConfig
    )


@dataclass(frozen=True)
class OptionInfo:
    """One option of a config struct, as ``gym plugin show`` prints it."""

    name: str
    type: str
    required: bool
    default: Any
    description: str
    inherited: bool  # declared by ServerConfig (every server has it), not by the server type


def describe_options(config: type[msgspec.Struct]) -> list[OptionInfo]:
    """The options of a config struct: name, type, default and the ``Meta`` description."""
    hints = typing.get_type_hints(config, include_extras=True)
    base = {f.name for f in msgspec.structs.fields(ServerConfig)}
    options = []
    for f in msgspec.structs.fields(config):
        hint = hints.get(f.name, Any)
        if f.default is not msgspec.NODEFAULT:
            default = f.default
        elif f.default_factory is not msgspec.NODEFAULT:
            default = f.default_factory()
        else:
            default = None
        options.append(
            OptionInfo(
                name=f.encode_name,
                type=_type_name(hint),
                required=f.required,
                default=msgspec.to_builtins(default) if not f.required else None,
                description=_description(hint),
                inherited=f.name in base,
            )
        )
    return options


def _description(hint: Any) -> str:
    for meta in reversed(getattr(hint, "__metadata__", ())):
        if isinstance(meta, Meta) and meta.description:
            return meta.description
    for arg in typing.get_args(hint):
        found = _description(arg)
        if found:
            return found
    return ""


def _type_name(hint: Any) -> str:
    """A short, readable type: ``int``, ``str | None``, ``model server name``, ``list[str]``."""
    ref = ref_of(hint) if getattr(hint, "__metadata__", None) else None
    if ref is not None:
        return f"{ref.kind} server name" if ref.kind else "server name"
    origin = typing.get_origin(hint)
    if origin is Annotated:
        return _type_name(typing.get_args(hint)[0])
    if origin in (typing.Union, types.UnionType):
        return " | ".join(_type_name(a) for a in typing.get_args(hint))
    if origin is typing.Literal:
        return " | ".join(repr(a) for a in typing.get_args(hint))
    if origin is not None:
        args = ", ".join(_type_name(a) for a in typing.get_args(hint))
        return f"{getattr(origin, '__name__', str(origin))}[{args}]"
    if hint is type(None):
        return "None"
    return getattr(hint, "__name__", str(hint))


class JudgeOptions(ServerConfig, kw_only=True):
    """Options of an environment whose verdict comes from a judge model (the reference's names)."""

    judge_model_server: Annotated[ModelRef, Meta(description="the model server instance that judges")]
    judge_responses_create_params: Annotated[
        dict[str, Any],
        Meta(description="generation parameters of judge calls (their 'input' is replaced by the judge's prompt)"),
    ] = msgspec.field(default_factory=dict)
    judge_endpoint_max_concurrency: Annotated[
        Annotated[int, Meta(ge=1)] | None,
        Meta(description="judge calls in flight at once from this server; null: no cap"),
    ] = 64
    judge_timeout_s: Annotated[float, Meta(gt=0, description="limit of one judge call (one attempt), seconds")] = 120.0
    judge_max_attempts: Annotated[
        int,
        Meta(
            ge=1,
            description="tries of a judge call that failed for a transient reason (unreachable, timeout, "
            "429, 5xx) before the rollout fails with judge_failed",
        ),
    ] = 3
    verdict_mode: Annotated[
        Literal["guarded", "reference"],
        Meta(
            description="guarded: the policy's text reaches the judge as data (label and delimiter look-alikes "
            "neutralised) and the verdict is the judge's last label outside echoed data; reference: the text "
            "verbatim and the first label wins, as the reference reads it (reproduces its rewards; GAMEABLE: an "
            "answer that writes a label, quoted by the judge, decides its own verdict)"
        ),
    ] = "guarded"


class UpstreamOptions(ServerConfig, kw_only=True):
    """Options of a model server in front of an upstream HTTP endpoint (:mod:`gym_core.upstream`):
    how many calls at once, how long each may wait and take, how often a busy answer is retried."""

    max_concurrency: Annotated[int, Meta(ge=1, description="upstream requests in flight at once; later ones wait")] = 64
    # The defaults keep one model call (queue + upstream) under the 600 s an agent waits for it by
    # default, so that the agent gets this server's typed error rather than its own timeout.
    queue_timeout_s: Annotated[
        float,
        Meta(gt=0, description="longest wait for one of max_concurrency slots, seconds; then 503 model_overloaded"),
    ] = 240.0
    timeout_s: Annotated[
        float,
        Meta(
            gt=0, description="limit of one model call upstream, retries and their backoff included, seconds; then 504"
        ),
    ] = 300.0
    max_attempts: Annotated[
        int,
        Meta(ge=1, description="tries of one model call on connection errors and 429/503 answers, within timeout_s"),
    ] = 3
    extra_body: Annotated[
        dict[str, Any], Meta(description="merged into every upstream request body, over the caller's fields")
    ] = msgspec.field(default_factory=dict)
