"""Options of a ``genrm_compare`` server instance, validated when a config is loaded.

Kept apart from the server so that registering the plugin imports nothing heavy. Each option's
description (``Meta(description=...)``) is what `gym plugin show genrm_compare` prints. The judge
options (``judge_model_server``: a ``genrm_model`` instance, ``judge_responses_create_params``,
``judge_timeout_s``...) come from :class:`gym_core.options.JudgeOptions`; they are the reference's
``genrm_model_server`` and ``genrm_responses_create_params``.
"""

from __future__ import annotations

from typing import Annotated, Literal

from msgspec import Meta

from gym_core.options import JudgeOptions

__all__ = ["GenrmCompareConfig", "DEFAULT_PRINCIPLE"]

# Our own wording of a general judging instruction, used when use_principle is on and a row has none.
DEFAULT_PRINCIPLE = (
    "Judge which response serves the user better. First, correctness: facts, reasoning and any code or "
    "arithmetic must be right, and a response that is wrong loses to one that is right however well it is "
    "written. Second, helpfulness: the response should do what was asked, completely, and address the "
    "user's actual need rather than a neighbouring question. Third, honesty: uncertainty should be stated "
    "where it exists, and nothing should be invented. Fourth, clarity: prefer a direct, well-organised answer "
    "of appropriate length; padding, repetition and decorative formatting do not make a response better. "
    "Safety matters throughout: a response must not help cause serious harm."
)


class GenrmCompareConfig(JudgeOptions, kw_only=True):
    num_rollouts_per_prompt: Annotated[
        int,
        Meta(
            ge=1,
            description="rollouts of one prompt compared together (a cohort): /verify waits for this many; "
            "1: no comparison, every verify gets default_score at once",
        ),
    ] = 1
    comparison_strategy: Annotated[
        Literal["circular", "all_pairs"],
        Meta(description="circular: (i, i+1 mod N) for every i; all_pairs: every i < j"),
    ] = "circular"
    num_judges_per_comparison: Annotated[int, Meta(ge=1, description="GenRM calls per pair")] = 1
    aggregator_method: Annotated[
        Literal["simple_tiebreaker"], Meta(description="how comparisons become rewards (the only method)")
    ] = "simple_tiebreaker"
    default_score: Annotated[
        float, Meta(description="a score the GenRM did not give, and the reward of a response never compared")
    ] = 3.0
    default_ranking: Annotated[float, Meta(description="a ranking the GenRM did not give (the midpoint)")] = 3.5
    genrm_parse_retries: Annotated[
        int, Meta(ge=0, description="more GenRM calls when a reply holds no verdict, before the neutral defaults")
    ] = 3
    genrm_parse_retry_sleep_s: Annotated[float, Meta(ge=0, description="pause between those calls, seconds")] = 0.2
    use_principle: Annotated[
        bool, Meta(description="send a principle to the GenRM: the row's 'principle', else default_principle")
    ] = False
    default_principle: Annotated[str, Meta(description="the principle of rows without one")] = DEFAULT_PRINCIPLE
    reasoning_bonus: Annotated[
        float,
        Meta(description="added to the shortest non-empty reasoning when its reward is in the top top_percentile"),
    ] = 0.0
    answer_bonus: Annotated[
        float, Meta(description="added to the shortest non-empty answer when its reward is in the top top_percentile")
    ] = 0.0
    top_percentile: Annotated[
        float, Meta(gt=0, le=1, description="the share of a group (best rewards first) eligible for the bonuses")
    ] = 0.2
    group_reasoning_length_penalty_coeff: Annotated[
        float, Meta(description="zero-centred reasoning length adjustment: shorter than the group gains, longer loses")
    ] = 0.0
    group_answer_length_penalty_coeff: Annotated[
        float, Meta(description="zero-centred answer length adjustment: shorter than the group gains, longer loses")
    ] = 0.0
    group_style_penalty_coeff: Annotated[
        float,
        Meta(
            description="zero-centred penalty on markdown density (headers, lists, bold, emoji per character, "
            "code blocks excluded) relative to the group"
        ),
    ] = 0.0
    cohort_timeout_s: Annotated[
        float,
        Meta(
            gt=0,
            description="longest wait for a cohort to fill, from its first verify, seconds; then cohort_timeout_action",
        ),
    ] = 300.0
    cohort_timeout_action: Annotated[
        Literal["compare_arrived", "fail"],
        Meta(
            description="when a cohort times out: compare_arrived: the rollouts that arrived are compared among "
            "themselves (a lone one gets default_score) and answered with cohort_complete false; fail: each "
            "waiting verify answers 504 cohort_timeout (the rollouts fail and are retried)"
        ),
    ] = "compare_arrived"
    max_open_cohorts: Annotated[
        int,
        Meta(ge=1, description="cohorts waiting at once; a verify that would open one more answers 503 cohorts_full"),
    ] = 10_000
