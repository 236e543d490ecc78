"""Running servers: uvicorn settings shared by every gym server, in a thread or as a process.

``python -m gym_core.serve`` is what ``gym run`` starts for each instance: it reads its instance name
from the environment and the global config from its standard input (``GYM_CONFIG=-``; see
:meth:`~gym_core.config.GlobalConfig.from_env`), finds the plugin through the hooks, validates
the options, and serves the app until SIGINT/SIGTERM.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import threading
import time
from typing import Any

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from gym_core.asgi import ConnectionLimits
from gym_core.config import INSTANCE_ENV, GlobalConfig, validate_instance_options
from gym_core.errors import GymError
from gym_core.failures import HEADER_TIMEOUT, TOO_MANY_CONNECTIONS, Failure
from gym_core.plugins import PluginManager, get_plugin_manager
from gym_core.process_tuning import raise_open_files_limit, tune_gc
from gym_core.servers import GymServer, StartupError

__all__ = ["uvicorn_config", "ConnectionLimits", "ServerThread", "build_server", "main", "tune_gc"]


GRACEFUL_SHUTDOWN_S = 5.0  # in-flight requests get this long after a stop signal, then are cancelled


def _answer(failure: Failure, reason: str, message: str, *extra: str) -> bytes:
    """A whole HTTP answer with a gym error body, that closes its connection."""
    body = b'{"error":{"message":"%s","type":"%s","status":%d}}' % (
        message.encode(),
        failure.type.encode(),
        failure.status,
    )
    head = [f"HTTP/1.1 {failure.status} {reason}", "content-type: application/json", f"content-length: {len(body)}"]
    head += extra
    return "\r\n".join([*head, "connection: close", "", ""]).encode() + body


class _BoundedHttpProtocol(HttpToolsProtocol):
    """uvicorn's HTTP/1.1 protocol (httptools) with two bounds it lacks.

    uvicorn's only timer is the keep-alive one, armed after an answer: a connection that sends
    nothing, or stops half-way through a request's line or headers, holds its socket forever, and
    no token is needed for that (the token is read from the headers). Here:

    - the head of a request (its line and headers) must be in within ``header_timeout_s``, counted
      from the connection's opening, or from the first byte of a later request on a kept-alive
      connection; past it the connection is closed (408 first when part of a request came). A body
      that stalls is :class:`gym_core.asgi.BodyTimeout`'s (``body_timeout_s``); the wait between
      requests is the keep-alive timeout (``idle_timeout_s``);
    - a connection beyond ``max_connections`` open at once is answered 503 (``retry-after: 1``) at
      once and closed (what it sends is discarded until it closes, for a second at most), so stalled
      connections cannot pile up; those within the cap are served as before.
    """

    limits = ConnectionLimits()
    _head_timer: asyncio.TimerHandle | None = None
    _in_head = False
    _refused = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        if len(self.connections) >= self.limits.max_connections:
            self._refused = True
            self.transport = transport
            message = f"this server holds its {self.limits.max_connections} connections already; try again"
            transport.write(_answer(TOO_MANY_CONNECTIONS, "Service Unavailable", message, "retry-after: 1"))
            # A lingering close: what the client sent is read and dropped until it closes (for a
            # second at most), since closing a socket with unread bytes resets the connection, and
            # a reset can reach the client before the answer does.
            if transport.can_write_eof():
                transport.write_eof()
            self._head_timer = self.loop.call_later(min(1.0, self.limits.header_timeout_s), transport.close)
            return
        super().connection_made(transport)
        self._head_timer = self.loop.call_later(self.limits.header_timeout_s, self._head_timed_out)

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        super().data_received(data)
        if self._in_head and self._head_timer is None and not self.transport.is_closing():
            # A request's head began and is not complete: it gets header_timeout_s from now.
            self._head_timer = self.loop.call_later(self.limits.header_timeout_s, self._head_timed_out)

    def on_message_begin(self) -> None:
        self._in_head = True
        super().on_message_begin()

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._cancel_head_timer()
        super().on_headers_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_head_timer()
        if self._refused:
            return
        super().connection_lost(exc)

    def _cancel_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self.transport.is_closing():
            return
        if self._in_head:  # part of a request came: say why it is dropped
            message = f"request line and headers not received within {self.limits.header_timeout_s:g} s"
            self.transport.write(_answer(HEADER_TIMEOUT, "Request Timeout", message))
        self.transport.close()


def uvicorn_config(
    app: Any, host: str, port: int, limits: ConnectionLimits | None = None, **overrides: Any
) -> uvicorn.Config:
    """Uvicorn settings for gym servers: no access log on the hot path, long keep-alive so pooled
    client connections are not closed under them, uvloop/httptools when installed, no
    X-Forwarded-* rewriting (a middleware run on every request; gym never reads client addresses),
    and a bounded graceful shutdown: requests still running 5 s after SIGTERM/SIGINT are cancelled
    (a model generating for minutes would otherwise keep an orphaned server alive after its launcher
    died). ``limits`` bound how long a connection may wait without a request and how many may be
    open (see :class:`_BoundedHttpProtocol`); default: the app's ``connection_limits`` attribute
    when it has one, else :class:`ConnectionLimits`'s defaults (those of every server). gym's own
    ASGI layers (the body's time bound among them) come with the app, from
    :func:`gym_core.asgi.build_stack`."""
    bounds: ConnectionLimits = limits or getattr(app, "connection_limits", None) or ConnectionLimits()
    settings: dict[str, Any] = dict(
        host=host,
        port=port,
        http=type("BoundedHttpProtocol", (_BoundedHttpProtocol,), {"limits": bounds}),
        log_level="warning",
        access_log=False,
        lifespan="on",
        timeout_keep_alive=bounds.idle_timeout_s,
        backlog=4096,
        log_config=None,
        proxy_headers=False,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
    )
    settings.update(overrides)
    return uvicorn.Config(app, **settings)


class ServerThread:
    """A uvicorn server in a daemon thread of this process (head server, tests, benchmarks)."""

    def __init__(
        self, app: Any, host: str = "127.0.0.1", port: int = 0, limits: ConnectionLimits | None = None, **overrides: Any
    ):
        self.server = uvicorn.Server(uvicorn_config(app, host, port, limits, **overrides))
        self.host = host
        self._thread = threading.Thread(target=self.server.run, daemon=True, name=f"uvicorn-{host}:{port}")

    @property
    def port(self) -> int:
        return self.server.servers[0].sockets[0].getsockname()[1]

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self, timeout_s: float = 30.0) -> ServerThread:
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self.server.started:
            if not self._thread.is_alive():
                raise GymError(f"server on {self.host} failed to start (port in use or start-up error)")
            if time.monotonic() > deadline:
                raise GymError(f"server on {self.host} did not start within {timeout_s:g} s")
            time.sleep(0.01)
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        self.server.should_exit = True
        self._thread.join(timeout_s)

    def __enter__(self) -> ServerThread:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def build_server(global_config: GlobalConfig, instance: str, plugins: PluginManager | None = None) -> GymServer:
    """The server object of one instance of the config, its options validated."""
    plugins = plugins or get_plugin_manager()
    if instance not in global_config.instances:
        raise GymError(f"no server instance named {instance!r} in the config")
    plugin = plugins.server(global_config.instances[instance].plugin)
    options = validate_instance_options(global_config, instance, plugin.config, plugins.servers())
    server_class = plugin.load_server_class()
    return server_class(options, name=instance, global_config=global_config)


def _startup_error(exc: BaseException | None) -> StartupError | None:
    if isinstance(exc, StartupError):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = _startup_error(inner)
            if found:
                return found
    return None


class _ShortStartupErrors(logging.Filter):
    """A failed lifespan reaches uvicorn's log as a long traceback (as an exception, or as text
    Litestar formatted); a StartupError's message says it all."""

    marker = f"{StartupError.__module__}.{StartupError.__qualname__}: "

    def filter(self, record: logging.LogRecord) -> bool:
        error = _startup_error(record.exc_info[1]) if record.exc_info else None
        if error is not None:
            record.msg, record.args, record.exc_info = str(error), (), None
        elif isinstance(record.msg, str) and self.marker in record.msg:
            line = record.msg.split(self.marker, 1)[1].splitlines()[0]
            record.msg, record.args = line, ()
        return True


def configure_logging(instance: str) -> None:
    logging.basicConfig(
        level=os.environ.get("GYM_LOG_LEVEL", "INFO").upper(),
        format=f"%(asctime)s %(levelname)s [{instance}] %(name)s: %(message)s",
        stream=sys.stderr,
    )
    logging.getLogger("uvicorn.error").addFilter(_ShortStartupErrors())


def main() -> int:
    """Entry point of a server process started by ``gym run``."""
    instance = os.environ.get(INSTANCE_ENV, "")
    configure_logging(instance or "?")
    try:
        if not instance:
            raise GymError(f"${INSTANCE_ENV} is not set: server processes are started by `gym run`")
        config = GlobalConfig.from_env()
        server = build_server(config, instance)
        settings = config.instances[instance]
        uvicorn_server = uvicorn.Server(uvicorn_config(server.build_app(), settings.host, settings.port))
    except GymError as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 2
    tune_gc()
    raise_open_files_limit()  # one descriptor per connection: thousands of callers and pooled connections
    try:
        uvicorn_server.run()
    except KeyboardInterrupt:  # uvicorn re-raises the SIGINT it handled, after a graceful shutdown
        pass
    # A failed start-up (port taken, lifespan error) leaves started False.
    return 0 if uvicorn_server.started else 1


def run_forever() -> None:  # pragma: no cover - used by `python -m gym_core.serve`
    sys.exit(main())
