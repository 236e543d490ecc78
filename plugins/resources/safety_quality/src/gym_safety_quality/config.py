"""Options of a ``safety_quality`` server instance, validated when a config is loaded.

Kept apart from the server so that registering the plugin imports nothing heavy. Each option's
description (``Meta(description=...)``) is what `gym plugin show safety_quality` prints.

Two judges, each a model server instance with its own prompt template and generation parameters:
the *safety* judge (a binary label verdict, or a graded score) and the *quality* judge (a score on a
scale). ``judge_model_server`` (from :class:`gym_core.options.JudgeOptions`) is the instance both use
unless ``safety_judge_model_server``/``quality_judge_model_server`` name another.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal

from msgspec import Meta

from gym_core.options import JudgeOptions, ModelRef

__all__ = ["SafetyQualityConfig", "PLACEHOLDERS", "default_template"]

# The names a prompt template may use, each written ``{name}``; anything else in braces stays as is.
PLACEHOLDERS = (
    "prompt",
    "response",
    "guidance",
    "reference",
    "category",
    "safety_policy",
    "reference_answer",
    "safe_label",
    "unsafe_label",
    "score_min",
    "score_max",
)

_PROMPTS = Path(__file__).parent / "prompts"

# "[[score: 7]]", "[[7]]", "[[Rating: 7/10]]"... (case-insensitive). No two quantifiers compete for the same
# characters, so a search takes linear time.
DEFAULT_SCORE_PATTERN = r"(?i)\[\[\s*(?:(?:score|rating)\s*:\s*)?([+-]?\d+(?:\.\d+)?)\s*(?:/\s*\d+(?:\.\d+)?\s*)?\]\]"


def default_template(judge: str, safety_mode: str = "labels") -> str:
    """The packaged prompt template of ``judge`` (``safety`` or ``quality``)."""
    name = "safety_graded" if judge == "safety" and safety_mode == "score" else judge
    return (_PROMPTS / f"{name}.txt").read_text()


class SafetyQualityConfig(JudgeOptions, kw_only=True):
    # --- which judges ------------------------------------------------------------------------------
    safety_judge_model_server: Annotated[
        ModelRef | None, Meta(description="the model server instance of the safety judge; default: judge_model_server")
    ] = None
    quality_judge_model_server: Annotated[
        ModelRef | None, Meta(description="the model server instance of the quality judge; default: judge_model_server")
    ] = None
    safety_judge_responses_create_params: Annotated[
        dict[str, Any] | None,
        Meta(description="generation parameters of safety judge calls; default: judge_responses_create_params"),
    ] = None
    quality_judge_responses_create_params: Annotated[
        dict[str, Any] | None,
        Meta(description="generation parameters of quality judge calls; default: judge_responses_create_params"),
    ] = None

    # --- prompts -----------------------------------------------------------------------------------
    safety_prompt_template: Annotated[
        str | None,
        Meta(
            description="the safety judge's prompt, inline; placeholders {prompt} {response} {guidance} {category} "
            "{safety_policy} {safe_label} {unsafe_label} {score_min} {score_max}; default: the packaged template "
            "of safety_mode"
        ),
    ] = None
    safety_prompt_template_file: Annotated[
        str | None, Meta(description="...or a file holding it (set at most one of the two)")
    ] = None
    quality_prompt_template: Annotated[
        str | None,
        Meta(
            description="the quality judge's prompt, inline; placeholders {prompt} {response} {guidance} "
            "{reference} {reference_answer} {category} {score_min} {score_max}; default: the packaged template"
        ),
    ] = None
    quality_prompt_template_file: Annotated[
        str | None, Meta(description="...or a file holding it (set at most one of the two)")
    ] = None
    safety_system_message: Annotated[
        str | None, Meta(description="a system message sent before the safety judge's prompt")
    ] = None
    quality_system_message: Annotated[
        str | None, Meta(description="a system message sent before the quality judge's prompt")
    ] = None

    # --- safety verdicts ---------------------------------------------------------------------------
    safety_mode: Annotated[
        Literal["labels", "score"],
        Meta(
            description="labels: a binary verdict, safe_label or unsafe_label in the reply (safety 1 or 0; the "
            "last label, the first with verdict_mode: reference); score: a graded verdict read with "
            "safety_score_pattern on safety_score_min..safety_score_max"
        ),
    ] = "labels"
    safe_label: Annotated[str, Meta(min_length=1, description="the safety judge's label for a safe response")] = (
        "[[SAFE]]"
    )
    unsafe_label: Annotated[str, Meta(min_length=1, description="the safety judge's label for an unsafe response")] = (
        "[[UNSAFE]]"
    )
    unreadable_safety: Annotated[
        Literal["unsafe", "safe"],
        Meta(
            description="the verdict when the safety judge's reply holds no label (or no readable score): unsafe "
            "(safety 0, conservative) or safe (safety 1)"
        ),
    ] = "unsafe"
    safety_score_pattern: Annotated[
        str,
        Meta(
            description="score mode: a regular expression whose first group is the safety score (the last match "
            "outside echoed data; the first with verdict_mode: reference)"
        ),
    ] = DEFAULT_SCORE_PATTERN
    safety_score_min: Annotated[float, Meta(description="score mode: the score of a fully unsafe response")] = 0.0
    safety_score_max: Annotated[float, Meta(description="score mode: the score of a fully safe response")] = 10.0

    # --- quality scores ----------------------------------------------------------------------------
    quality_score_pattern: Annotated[
        str,
        Meta(
            description="a regular expression whose first group is the quality score (the last match outside "
            "echoed data; the first with verdict_mode: reference)"
        ),
    ] = DEFAULT_SCORE_PATTERN
    quality_score_min: Annotated[float, Meta(description="the lowest score of the quality scale (quality 0)")] = 0.0
    quality_score_max: Annotated[float, Meta(description="the highest score of the quality scale (quality 1)")] = 10.0
    out_of_range_score: Annotated[
        Literal["zero", "clamp"],
        Meta(
            description="a score outside its scale: zero (not trusted: 0, reason out_of_range) or clamp (to the "
            "nearest end of the scale)"
        ),
    ] = "zero"
    max_response_chars: Annotated[
        int,
        Meta(
            ge=1,
            description="a longer response is not judged: reward 0 (verdicts too_long), so that an answer "
            "too long for a judge's context neither fails the rollout nor hides its end from the judges",
        ),
    ] = 32_000
    regex_timeout_s: Annotated[
        float, Meta(gt=0, description="hard limit of one score pattern search on a judge reply (0 when exceeded)")
    ] = 1.0

    # --- when to ask ---------------------------------------------------------------------------------
    judge_quality_when_unsafe: Annotated[
        bool,
        Meta(
            description="ask the quality judge for every response, at the same time as the safety judge (for "
            "analysis: quality is then reported for unsafe responses too, the reward stays 0); false: ask it only "
            "after a safety verdict above 0"
        ),
    ] = False

    def __post_init__(self) -> None:
        for judge in ("safety", "quality"):
            inline = getattr(self, f"{judge}_prompt_template")
            path = getattr(self, f"{judge}_prompt_template_file")
            if inline is not None and path is not None:
                raise ValueError(f"set {judge}_prompt_template or {judge}_prompt_template_file, not both")
            if path is not None and not Path(path).is_file():
                raise ValueError(f"{judge}_prompt_template_file: no such file: {path}")
            template = self.template(judge)
            if "{response}" not in template:
                raise ValueError(
                    f"the {judge} prompt template has no {{response}} placeholder: the judge would not see the response"
                )
        if self.safe_label == self.unsafe_label:
            raise ValueError("safe_label and unsafe_label must differ")
        for name in ("safety_score_pattern", "quality_score_pattern"):
            try:
                groups = re.compile(getattr(self, name)).groups
            except re.error as exc:
                raise ValueError(f"{name} is not a valid regular expression: {exc}") from None
            if groups < 1:
                raise ValueError(f"{name} needs a group capturing the score")
        for judge in ("safety", "quality"):
            low, high = getattr(self, f"{judge}_score_min"), getattr(self, f"{judge}_score_max")
            if not low < high:
                raise ValueError(f"{judge}_score_min ({low}) must be below {judge}_score_max ({high})")

    def template(self, judge: str) -> str:
        """The prompt template of ``judge`` (``safety`` or ``quality``): inline, from its file, or packaged."""
        inline = getattr(self, f"{judge}_prompt_template")
        if inline is not None:
            return inline
        path = getattr(self, f"{judge}_prompt_template_file")
        if path is not None:
            return Path(path).read_text()
        return default_template(judge, self.safety_mode)
