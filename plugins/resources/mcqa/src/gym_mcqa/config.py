"""Options of a ``mcqa`` server instance, validated when a config is loaded.

Kept apart from the server so that registering the plugin imports nothing heavy. Each option's
description (``Meta(description=...)``) is what `gym plugin show mcqa` prints.
"""

from __future__ import annotations

from typing import Annotated, Literal

from msgspec import Meta

from gym_core import ServerConfig

__all__ = ["GradingMode", "McqaConfig"]

GradingMode = Literal["strict_single_letter_boxed", "lenient_boxed", "lenient_answer_colon", "lenient_answer_colon_md"]


class McqaConfig(ServerConfig, kw_only=True):
    grading_mode: Annotated[
        GradingMode | None,
        Meta(
            description="grading mode for every row, overriding the rows' own grading_mode (None: each row's, "
            "default strict_single_letter_boxed); lenient_answer_colon_md can only be chosen here"
        ),
    ] = None
    several_answers: Annotated[
        Literal["reject", "reference"],
        Meta(
            description="reject: an answer whose boxes name different options (\\boxed{A} \\boxed{B}, "
            "\\boxed{A, B}) has none and scores 0 (reason several_answers); reference: only the last box counts, "
            "as in the reference (GAMEABLE: boxing every option scores 1)"
        ),
    ] = "reject"
    verify_timeout_s: Annotated[
        float,
        Meta(
            gt=0,
            description="hard limit on extracting one answer in a worker process (rows with an output_regex, "
            "long outputs); past it the answer scores 0 with reason 'timeout'",
        ),
    ] = 5.0
    verify_workers: Annotated[
        int, Meta(ge=1, description="worker processes that run row regexes and long outputs under the time limit")
    ] = 1
    inline_max_chars: Annotated[
        int,
        Meta(
            ge=0,
            description="outputs up to this length, without an output_regex, are graded in the server "
            "process (the built-in patterns are linear); longer ones go to a worker",
        ),
    ] = 20_000
