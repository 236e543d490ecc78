"""Options of the ``math`` resources server (light: no sympy or math-verify import).

The option names are the reference's math_with_judge ones (``library_verifier_*``,
``should_use_judge``, ``judge_*``). The judge options are gym-core's :class:`~gym_core.options.JudgeOptions`,
with ``judge_model_server`` optional: it is required only when ``should_use_judge`` is true.
"""

from __future__ import annotations

from typing import Annotated, Literal

from msgspec import Meta

from gym_core.options import JudgeOptions, ModelRef

__all__ = ["MathConfig", "GradingMode", "DEFAULT_TIMEOUT_S"]

GradingMode = Literal["library", "boxed"]

# The hard limit per verification when neither timeout option is set, per grading mode.
DEFAULT_TIMEOUT_S: dict[str, float] = {"library": 10.0, "boxed": 5.0}


class MathConfig(JudgeOptions, kw_only=True):
    grading_mode: Annotated[
        GradingMode,
        Meta(
            description="library: the reference's Math-Verify stage on the whole response (rewards as in the "
            "reference); boxed: the last \\boxed{} only, compared by gym's grader (math-verify + sympy fallbacks)"
        ),
    ] = "library"
    verify_timeout_s: Annotated[
        Annotated[float, Meta(gt=0)] | None,
        Meta(
            description="hard limit per verification (the worker is killed, reward 0, reason timeout); "
            "default: 10 s in library mode, 5 s in boxed mode"
        ),
    ] = None
    library_verifier_timeout_seconds: Annotated[
        Annotated[float, Meta(gt=0)] | None,
        Meta(description="the reference's name for verify_timeout_s (set one of the two, or both to the same value)"),
    ] = None
    verify_workers: Annotated[
        Annotated[int, Meta(ge=1)] | None,
        Meta(description="worker processes verifying answers; default: $GYM_MATH_VERIFY_WORKERS or min(4, CPUs)"),
    ] = None
    library_verifier_max_concurrency: Annotated[
        int,
        Meta(ge=1, description="most verifications running at once: caps the number of worker processes"),
    ] = 32
    verify_memory_limit_mb: Annotated[
        Annotated[int, Meta(ge=64)] | None,
        Meta(description="address-space limit of each worker (None: no limit); an answer needing more scores 0"),
    ] = 4096
    correction_feedback: Annotated[
        bool,
        Meta(
            description="add proof_status, needs_correction, error_feedback and correction_prompt to every verdict: "
            "a wrong or missing answer is offered a retry (for agents that let the model correct itself, such as "
            "proof_refinement); the feedback never reveals the expected answer; off: verdicts unchanged"
        ),
    ] = False
    should_use_judge: Annotated[
        bool,
        Meta(
            description="ask the judge model (judge_model_server) about answers the grader calls wrong; reward 1 "
            "when it says equivalent in both orders (the reference's code default is true, its configs set false)"
        ),
    ] = False
    judge_model_server: Annotated[
        ModelRef | None,
        Meta(
            description="the model server instance that judges (its instance name); required when "
            "should_use_judge is true"
        ),
    ] = None

    def __post_init__(self) -> None:
        if self.should_use_judge and self.judge_model_server is None:
            raise ValueError(
                "should_use_judge: true needs judge_model_server, the name of the model server instance that "
                "judges (it may be the policy's own instance); or set should_use_judge: false"
            )
        if (
            self.verify_timeout_s is not None
            and self.library_verifier_timeout_seconds is not None
            and self.verify_timeout_s != self.library_verifier_timeout_seconds
        ):
            raise ValueError(
                "verify_timeout_s and library_verifier_timeout_seconds name the same limit: set only one "
                f"(got {self.verify_timeout_s} and {self.library_verifier_timeout_seconds})"
            )

    @property
    def timeout_s(self) -> float:
        """The hard limit per verification: either timeout option, else the grading mode's default."""
        for value in (self.verify_timeout_s, self.library_verifier_timeout_seconds):
            if value is not None:
                return value
        return DEFAULT_TIMEOUT_S[self.grading_mode]
