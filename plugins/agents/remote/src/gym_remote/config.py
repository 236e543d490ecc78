"""Options of a ``remote`` agent server instance, validated when a config is loaded.

Kept apart from the server so that registering the plugin imports nothing heavy. Each option's
description (``Meta(description=...)``) is what `gym plugin show remote` prints.
"""

from __future__ import annotations

from typing import Annotated
from urllib.parse import urlsplit

from msgspec import Meta

from gym_core import ResourcesRef, ServerConfig

__all__ = ["RemoteConfig", "check_service_url"]

# A day: every wait of this agent is bounded, and a bound nobody would set by hand catches typos.
_MAX_WAIT_S = 86_400.0


def check_service_url(url: str) -> str:
    """``url`` without its trailing ``/`` if it is an acceptable service address, else ``ValueError``.

    Accepted: an absolute ``http://`` or ``https://`` URL with a host, and optionally a port and a
    path. Refused: any other scheme, no host, a bad port, a query string, a fragment, ``;params``,
    embedded credentials (``user:pass@``; the key goes in ``api_key``), whitespace or control
    characters. The messages never repeat the URL: it may hold a secret.
    """
    if not url or any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in url):
        raise ValueError("agent_base_url must be a non-empty URL without whitespace or control characters")
    try:
        parts = urlsplit(url)
        port = parts.port  # raises on a port that is not a number in 0-65535
    except ValueError:
        raise ValueError("agent_base_url is not a valid URL (check its host and port)") from None
    if parts.scheme not in ("http", "https"):
        raise ValueError("agent_base_url must be an absolute http:// or https:// URL")
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        raise ValueError("agent_base_url must not embed credentials (user:pass@): put the service's key in api_key")
    if not parts.hostname:
        raise ValueError("agent_base_url has no host")
    if port == 0:
        raise ValueError("agent_base_url has port 0, which no service listens on")
    if parts.query or url.rstrip("/").endswith("?"):
        raise ValueError("agent_base_url must not carry a query string")
    if parts.fragment or "#" in url:
        raise ValueError("agent_base_url must not carry a fragment")
    if ";" in parts.path:
        raise ValueError("agent_base_url must not carry ;params")
    return url.rstrip("/")


class RemoteConfig(ServerConfig, kw_only=True):
    agent_base_url: Annotated[
        str,
        Meta(
            description="the external service (any framework speaking the Responses API): an absolute http(s) URL; "
            "gym POSTs {agent_base_url}/v1/responses; no query, fragment, ;params or user:pass@"
        ),
    ]
    resources_server: Annotated[
        ResourcesRef,
        Meta(description="the environment: seeded, its tools executed by gym, then /verify scores the answer"),
    ]
    api_key: Annotated[
        str | None,
        Meta(
            description="the service's own key, sent as Authorization: Bearer (never gym's run token); redacted "
            "from the published config and from logs"
        ),
    ] = None
    model: Annotated[
        str | None, Meta(description="the `model` sent to the service when the task's params name none")
    ] = None
    concurrency: Annotated[
        int, Meta(ge=1, description="rollouts (/run) executed at once; the others wait their turn")
    ] = 32
    remote_responses_timeout_secs: Annotated[
        float, Meta(gt=0, le=_MAX_WAIT_S, description="total time one POST to the service may take, seconds")
    ] = 1800.0
    run_timeout_secs: Annotated[
        float,
        Meta(
            gt=0,
            le=_MAX_WAIT_S,
            description="time one whole rollout (seed, loop, verify) may take once it has its "
            "turn (queueing excluded), seconds",
        ),
    ] = 2100.0
    connect_timeout_secs: Annotated[
        float, Meta(gt=0, le=_MAX_WAIT_S, description="time to open a connection to the service, seconds")
    ] = 10.0
    max_steps: Annotated[
        Annotated[int, Meta(ge=0)] | None,
        Meta(
            description="most calls to the service per rollout; null or 0: unbounded (run_timeout_secs still bounds it)"
        ),
    ] = None
    offer_resources_tools: Annotated[
        bool, Meta(description="offer the resources server's tools when the task's params name none")
    ] = True
    # Kept so that configs written for the reference load; like the reference, this agent always verifies.
    skip_verification: Annotated[
        bool,
        Meta(
            description="accepted and ignored, as in the reference: every rollout is verified (a warning is logged when true)"
        ),
    ] = False

    def __post_init__(self) -> None:
        self.agent_base_url = check_service_url(self.agent_base_url)
