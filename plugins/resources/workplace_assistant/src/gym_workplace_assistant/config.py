"""Options of a ``workplace_assistant`` server instance, validated when a config is loaded.

Kept apart from the server so that registering the plugin imports nothing heavy. Each option's
description (``Meta(description=...)``) is what `gym plugin show workplace_assistant` prints.
"""

from __future__ import annotations

from typing import Annotated

from msgspec import Meta

from gym_core import ServerConfig

__all__ = ["WorkplaceAssistantConfig"]

# The defaults of gym_workplace_assistant.tables (kept here as literals: this module imports nothing heavy).
_SEED = 1130


class WorkplaceAssistantConfig(ServerConfig, kw_only=True):
    seed: Annotated[
        int,
        Meta(
            description="seed the workplace tables are generated from; the example tasks refer to the rows of the default"
        ),
    ] = _SEED
    emails: Annotated[int, Meta(ge=1, description="rows of the generated emails table")] = 500
    calendar_events: Annotated[int, Meta(ge=1, description="rows of the generated calendar_events table")] = 300
    project_tasks: Annotated[int, Meta(ge=1, description="rows of the generated project_tasks table")] = 300
    crm: Annotated[int, Meta(ge=1, description="rows of the generated CRM table")] = 200
    analytics: Annotated[int, Meta(ge=1, description="rows of the generated analytics table")] = 1000
    verify_timeout_s: Annotated[
        float,
        Meta(
            gt=0,
            description="hard limit on replaying one verification's actions (off the event loop); past it the reward is 0",
        ),
    ] = 10.0
