"""Options of an ``equivalence_rule`` server instance, validated when a config is loaded.

Kept apart from the server so that registering the plugin imports nothing else. Each option's
description (``Meta(description=...)``) is what `gym plugin show equivalence_rule` prints.
"""

from __future__ import annotations

from typing import Annotated, Literal

from msgspec import Meta

from gym_core import ServerConfig

__all__ = ["EquivalenceRuleConfig", "GradingRule"]

GradingRule = Literal["exact", "seq_match", "weighted_seq_match"]


class EquivalenceRuleConfig(ServerConfig, kw_only=True):
    grading_rule: Annotated[
        GradingRule,
        Meta(
            description=(
                "how the normalised response is compared with expected_answer: exact (1.0 or 0.0), "
                "seq_match (difflib ratio) or weighted_seq_match (0.85 ratio + 0.15 ratio of the first 10 characters)"
            )
        ),
    ] = "exact"
    verify_timeout_s: Annotated[
        float,
        Meta(gt=0, description="hard limit of one comparison in a worker; past it the score is 0 (reason: timeout)"),
    ] = 30.0
    verify_workers: Annotated[
        Annotated[int, Meta(ge=1)] | None,
        Meta(description="worker processes comparing (similarity rules; exact on long texts); default: min(4, CPUs)"),
    ] = None
    verify_memory_limit_mb: Annotated[
        Annotated[int, Meta(ge=64)] | None,
        Meta(description="address-space limit of each worker (None: no limit); a comparison needing more scores 0"),
    ] = 2048
