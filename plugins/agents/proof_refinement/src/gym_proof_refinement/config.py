"""Options of a ``proof_refinement`` server instance, validated when a config is loaded.

Kept apart from the server so that registering the plugin imports nothing heavy. Each option's
description (``Meta(description=...)``) is what `gym plugin show proof_refinement` prints.
"""

from __future__ import annotations

from typing import Annotated, Literal

from msgspec import Meta

from gym_core import ModelRef, ResourcesRef, ServerConfig

__all__ = ["ProofRefinementConfig", "CorrectionInput"]

CorrectionInput = Literal["fresh", "conversation"]


class ProofRefinementConfig(ServerConfig, kw_only=True):
    model_server: Annotated[
        ModelRef, Meta(description="the model server instance that plays the policy (one call per attempt)")
    ]
    resources_server: Annotated[
        ResourcesRef,
        Meta(
            description="the verifier: seeded once, then /verify scores every attempt and may offer a correction "
            "(needs_correction, correction_prompt)"
        ),
    ]
    max_correction_turns: Annotated[
        int,
        Meta(ge=0, description="most extra attempts after the first (0: a single attempt); model calls <= this + 1"),
    ] = 0
    include_all_attempts: Annotated[
        bool,
        Meta(
            description="return every attempt (input, response, text, status, reward, feedback) in all_attempts; "
            "false: all_attempts is null (attempt_rewards is always returned)"
        ),
    ] = True
    correction_input: Annotated[
        CorrectionInput,
        Meta(
            description="fresh (the reference): a correction is a new single-turn request, the correction prompt as "
            "its one user message, keeping only model, temperature and top_p of the task's params; conversation: "
            "the task's params kept whole, the input growing with each attempt's output and correction prompt"
        ),
    ] = "fresh"
    # Kept so that configs written for the reference load; like the reference, this agent always verifies.
    skip_verification: Annotated[
        bool,
        Meta(
            description="accepted and ignored, as in the reference: verification drives the loop (a warning is "
            "logged when true)"
        ),
    ] = False
    skip_verification_reward: Annotated[float, Meta(description="accepted and ignored (see skip_verification)")] = 0.0
