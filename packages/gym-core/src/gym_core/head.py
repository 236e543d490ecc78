"""The head server: publishes the resolved config so that servers and clients find each other.

``GET /global_config_dict_yaml`` (the config as YAML, secrets redacted), ``GET /server_instances`` (each instance
with plugin, kind and URL; a replicated one with ``replicas``, each its name and URL), ``GET /health``.
``gym run`` serves it in a thread of the CLI process.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import yaml
from litestar import Litestar, get
from litestar.response import Response

from gym_core.asgi import build_stack
from gym_core.config import GlobalConfig

__all__ = ["build_head_app"]


def build_head_app(config: GlobalConfig, describe: Callable[[], list[dict[str, Any]]] | None = None) -> Any:
    """The head server's ASGI app. ``describe`` returns the live instance list (kind, pid, status...);
    without it, the list comes from the config alone. It requires the run's token when the config
    has one (the layers of :func:`gym_core.asgi.build_stack`, without sessions or JSON routes)."""

    def instances() -> list[dict[str, Any]]:
        if describe is not None:
            return describe()
        rows = []
        for i in config.instances.values():
            row: dict[str, Any] = {"name": i.name, "plugin": i.plugin, "url": i.url, "host": i.host, "port": i.port}
            if i.replicas > 1:
                row["replicas"] = [
                    {"name": name, "index": index, "url": url}
                    for index, (name, url) in enumerate(zip(i.replica_names, i.replica_urls))
                ]
            rows.append(row)
        return rows

    @get("/global_config_dict_yaml", sync_to_thread=False)
    def global_config_dict_yaml() -> Response:
        # Secrets stay out: servers get their own options from their environment at spawn time.
        return Response(content=yaml.safe_dump(config.redacted(), sort_keys=False), media_type="text/plain")

    @get("/server_instances", sync_to_thread=False)
    def server_instances() -> list[dict[str, Any]]:
        return instances()

    @get("/health", sync_to_thread=False)
    def health() -> dict[str, str]:
        return {"status": "ok", "name": "head", "kind": "head"}

    app = Litestar(
        route_handlers=[global_config_dict_yaml, server_instances, health],
        openapi_config=None,
        logging_config=None,
    )
    return build_stack(app, token=config.auth_token)
