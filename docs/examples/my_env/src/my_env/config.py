"""The options of a my_env server instance. Light: listing plugins imports it."""

from typing import Annotated

from msgspec import Meta

from gym_core import ServerConfig


class MyEnvConfig(ServerConfig, kw_only=True):
    ignore_case: Annotated[bool, Meta(description="compare answers case-insensitively")] = False
