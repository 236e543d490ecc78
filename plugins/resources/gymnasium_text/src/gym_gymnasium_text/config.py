"""Options of a ``gymnasium_text`` server instance (light: imported when plugins are listed;
``gymnasium`` itself is imported only by the server)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

from gym_core import ServerConfig

__all__ = ["GymnasiumTextConfig"]


class GymnasiumTextConfig(ServerConfig, kw_only=True):
    env_id: Annotated[
        str, Meta(description="the registered Gymnasium id, e.g. FrozenLake-v1, Taxi-v3, CliffWalking-v1, Blackjack-v1")
    ] = "FrozenLake-v1"
    env_kwargs: Annotated[
        dict[str, Any], Meta(description="keyword arguments of gymnasium.make (e.g. {is_slippery: false})")
    ] = msgspec.field(default_factory=dict)
    action_names: Annotated[
        list[str] | None,
        Meta(
            description="names of a Discrete action space's actions, in order (the model may write a name or a "
            "number); default: the known names of Gymnasium's toy-text games, else numbers only"
        ),
    ] = None
    instructions: Annotated[
        str | None,
        Meta(description="text appended to every observation (default: how to write an action, from the action space)"),
    ] = None
    invalid_action: Annotated[
        Literal["fail", "penalty"],
        Meta(
            description="a reply with no valid action: fail (a 400 that fails the rollout) or penalty (a step "
            "that does not reach the environment, with invalid_action_reward)"
        ),
    ] = "fail"
    invalid_action_reward: Annotated[float, Meta(description="the reward of an invalid action under penalty")] = 0.0
    max_episode_steps: Annotated[
        int,
        Meta(ge=1, le=100_000, description="the most steps of one episode, beyond the environment's own time limit"),
    ] = 200
