"""Options of a ``tool_call_match`` server instance, validated when a config is loaded.

Kept apart from the server so that registering the plugin imports nothing heavy. Each option's
description (``Meta(description=...)``) is what `gym plugin show tool_call_match` prints. The
defaults are strict: arguments must be equal as JSON values (key order ignored, 1 == 1.0).
"""

from __future__ import annotations

from typing import Annotated, Literal

from msgspec import Meta

from gym_core import ServerConfig

__all__ = ["ToolCallMatchConfig"]


class ToolCallMatchConfig(ServerConfig, kw_only=True):
    extra_arguments: Annotated[
        Literal["reject", "ignore"],
        Meta(
            description="arguments the prediction has and the expected call lacks, at any depth: reject (no match) or ignore"
        ),
    ] = "reject"
    ignore_null_arguments: Annotated[
        bool,
        Meta(
            description="drop object keys whose value is null on both sides before comparing (null means 'not given')"
        ),
    ] = False
    string_match: Annotated[
        Literal["exact", "normalized"],
        Meta(
            description="exact: strings equal character for character; "
            "normalized: after NFKC, case folding, trimming and collapsing whitespace"
        ),
    ] = "exact"
    numeric_strings: Annotated[
        bool, Meta(description='a string holding a JSON number equals that number ("10" == 10)')
    ] = False
    number_tolerance: Annotated[
        float,
        Meta(
            ge=0,
            description="numbers within this absolute difference are equal (0: equal values only; 1 == 1.0 always)",
        ),
    ] = 0.0
    list_order: Annotated[
        Literal["ordered", "any"],
        Meta(description="arrays: ordered (element by element) or any (the same elements in any order)"),
    ] = "ordered"
    partial_credit: Annotated[
        bool,
        Meta(
            description="instead of 0 for a near miss: the F1 of the best pairing of calls, "
            "a same-name call counting the share of its arguments that agree"
        ),
    ] = False
