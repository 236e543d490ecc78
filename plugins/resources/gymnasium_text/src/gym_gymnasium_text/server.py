"""Any installed Gymnasium environment as a gym environment: observations as text, actions from text.

Each episode (session) has its own ``gymnasium.make(env_id, **env_kwargs)`` instance, reset with
the row's ``seed`` (reproducible; a row without one gets a fresh seed, reported in the reset
``info.seed``) and ``options``; it is closed with the session.

The text codec:

- **Observation → text**: the environment's ``ansi`` render when it has one (a span the renderer
  highlights with a colour is shown in ``[brackets]``, other escape codes are dropped), then a line
  ``Observation: <JSON>`` (the observation space's ``to_jsonable``), then the instructions (the
  ``instructions`` option, else how to write an action of this action space). The episode's end
  (terminated or truncated) shows the render and observation without instructions.
- **Text → action**: the content of the first ``<action>...</action>`` of the reply's OUTPUT_TEXT.
  ``Discrete``: a number of the space (``start`` to ``start + n - 1``) or one of ``action_names``
  (case-insensitive). ``Text``: the content as is. Any other space: the content as JSON, converted
  to the space's dtype and accepted when the space ``contains`` it. Anything else is invalid: a
  400 that fails the rollout, or, with ``invalid_action: penalty``, a step that does not reach the
  environment and earns ``invalid_action_reward``.
- ``info`` values are made JSON-safe (NumPy scalars and arrays to numbers and lists, anything
  else unknown to its ``str``).
"""

from __future__ import annotations

import json
import math
import random
import re
from dataclasses import dataclass
from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces

from gym_core import ToolError
from gym_core.gymnasium_env import Episode, GymnasiumEnvironment, Reset, Step
from gym_core.schemas import SeedSessionRequest

from gym_gymnasium_text.config import GymnasiumTextConfig

__all__ = ["GymnasiumTextServer", "GymnasiumTask", "ansi_to_text", "jsonable"]

_ACTION = re.compile(r"<action>(.*?)</action>", re.IGNORECASE | re.DOTALL)
_HIGHLIGHT = re.compile(r"\x1b\[[0-9;]*m([^\x1b]*)\x1b\[0m")
_ESCAPE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
INVALID = object()  # the action of a reply that names none (under invalid_action: penalty)
# The action names of Gymnasium's toy-text games (their documented order), by id without version.
KNOWN_ACTION_NAMES = {
    "FrozenLake": ("Left", "Down", "Right", "Up"),
    "CliffWalking": ("Up", "Right", "Down", "Left"),
    "Taxi": ("South", "North", "East", "West", "Pickup", "Dropoff"),
    "Blackjack": ("Stick", "Hit"),
}


class GymnasiumTask(SeedSessionRequest, kw_only=True):
    seed: int | None = None
    options: dict[str, Any] | None = None


def ansi_to_text(render: str) -> str:
    """An ``ansi`` render as plain text: highlighted spans in brackets, other escapes dropped."""
    return _ESCAPE.sub("", _HIGHLIGHT.sub(r"[\1]", render)).strip("\n")


def jsonable(value: Any) -> Any:
    """``value`` with NumPy types, tuples and unknown objects made JSON-safe."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return jsonable(value.tolist())
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


@dataclass
class Play:
    env: Any
    done: bool = False


class GymnasiumTextServer(GymnasiumEnvironment):
    config: GymnasiumTextConfig
    reward_range = (-math.inf, math.inf)  # whatever the wrapped environment gives

    async def startup(self) -> None:
        cfg = self.config
        try:
            probe = gymnasium.make(cfg.env_id, **cfg.env_kwargs)
        except gymnasium.error.Error as exc:
            raise ValueError(f"cannot make Gymnasium environment {cfg.env_id!r}: {exc}") from None
        try:
            self.render_mode = "ansi" if "ansi" in (probe.metadata.get("render_modes") or []) else None
            self.action_space = probe.action_space
            self.observation_space = probe.observation_space
        finally:
            probe.close()
        space = self.action_space
        names = cfg.action_names
        if names is None:
            known = KNOWN_ACTION_NAMES.get(cfg.env_id.split("/")[-1].rsplit("-v", 1)[0])
            names = list(known) if known and isinstance(space, spaces.Discrete) and len(known) == int(space.n) else None
        if names is not None:
            if not isinstance(space, spaces.Discrete) or len(names) != int(space.n):
                raise ValueError(
                    f"action_names needs a Discrete action space of {len(names)} actions, {cfg.env_id} has {space}"
                )
            self.actions = tuple(names)
        self.instructions = cfg.instructions or self._default_instructions()

    def _default_instructions(self) -> str:
        space = self.action_space
        if isinstance(space, spaces.Discrete):
            start = int(space.start)
            numbers = f"a number from {start} to {start + int(space.n) - 1}"
            if self.actions:
                named = ", ".join(f"{name} ({start + i})" for i, name in enumerate(self.actions))
                return f"Reply with one action as <action>NAME</action>, NAME one of: {named}; or {numbers}."
            return f"Reply with one action as <action>N</action>, N {numbers}."
        if isinstance(space, spaces.Text):
            return "Reply with one action as <action>TEXT</action>."
        return f"Reply with one action as <action>JSON</action>, a value of the action space {space}."

    def describe(self, env: Any, observation: Any, done: bool) -> str:
        parts = []
        if self.render_mode == "ansi":
            render = env.render()
            if isinstance(render, str) and render.strip():
                parts.append(ansi_to_text(render))
        value = jsonable(self.observation_space.to_jsonable([observation])[0])
        parts.append(f"Observation: {json.dumps(value)}")
        if not done:
            parts.append(self.instructions)
        return "\n".join(parts)

    def reset(self, task: GymnasiumTask) -> Reset:
        cfg = self.config
        seed = task.seed if task.seed is not None else random.SystemRandom().randrange(2**31)
        env = gymnasium.make(cfg.env_id, render_mode=self.render_mode, **cfg.env_kwargs)
        try:
            observation, info = env.reset(seed=seed, options=task.options)
        except Exception:
            env.close()
            raise
        return Reset(Play(env), self.describe(env, observation, False), {**jsonable(info), "seed": seed})

    def close_episode(self, episode: Episode) -> None:
        episode.state.env.close()

    def parse_action(self, text: str, state: Play) -> Any:
        match = _ACTION.search(text)
        action = self.decode_action(match.group(1).strip()) if match else None
        if action is not None:
            return action
        if self.config.invalid_action == "penalty":
            return INVALID
        found = (
            f"<action>{match.group(1).strip()}</action> is not an action"
            if match
            else "no <action>...</action> in the reply"
        )
        raise ToolError(f"{self.name}: {found}; {self.instructions}", 400)

    def canonical_action(self, name: str) -> Any:
        action = self.decode_action(name)
        if action is None:
            raise ToolError(f"{self.name}: {name!r} is not an action; {self.instructions}", 400)
        return action

    def decode_action(self, content: str) -> Any:
        """The action ``content`` names in the action space, or None."""
        space = self.action_space
        if isinstance(space, spaces.Discrete):
            start = int(space.start)
            for i, name in enumerate(self.actions):
                if content.lower() == name.lower():
                    return start + i
            try:
                number = int(content)
            except ValueError:
                return None
            return number if start <= number < start + int(space.n) else None
        if isinstance(space, spaces.Text):
            return content if space.contains(content) else None
        try:
            value = np.asarray(json.loads(content), dtype=space.dtype)
        except (ValueError, TypeError):
            return None
        return value if space.contains(value) else None

    def step(self, state: Play, action: Any) -> Step:
        if action is INVALID:
            return Step(
                "That reply named no valid action. " + self.instructions,
                float(self.config.invalid_action_reward),
                False,
                False,
                {"action_is_valid": False},
            )
        observation, reward, terminated, truncated, info = state.env.step(action)
        done = bool(terminated or truncated)
        return Step(
            self.describe(state.env, observation, done),
            float(reward),
            bool(terminated),
            bool(truncated),
            {**jsonable(info), "action": jsonable(action)},
        )
