"""Gymnasium-style environments: one episode per session, played a step at a time.

A :class:`GymnasiumEnvironment` is a :class:`~gym_core.servers.ResourcesServer` whose task is an
episode rather than one answer (the environments spec, §3). Subclasses implement two methods:

- :meth:`~GymnasiumEnvironment.reset`: a new episode from the task row: its state, the first
  observation (text shown to the model, or None) and an info dict;
- :meth:`~GymnasiumEnvironment.step`: apply one action to the state: a :class:`Step` (observation,
  reward, terminated, truncated, info);

and may set :attr:`~GymnasiumEnvironment.actions` (the canonical action names; an action the
model writes is matched against them) or override :meth:`~GymnasiumEnvironment.parse_action`
(how the text of a model turn becomes an action).

Routes, besides the resources server's:

- ``POST /reset`` (and ``/seed_session``, the same): body = the task row. Starts an episode in the
  caller's session, replacing any previous one; answers ``{observation, info}``, ``info`` saying
  ``supports_explicit_close`` and ``supports_step_idempotency`` (both true).
- ``POST /step``: body = the task row plus ``response``, the model's response for this turn only
  (its OUTPUT_TEXT is the action), and optionally ``_ng_step_request_id``: a step repeated with the
  id of the previous one (a retried request) answers that step again instead of playing twice.
  Answers ``{observation, reward, terminated, truncated, info}``.
- ``POST /close`` (and ``/close_session``): ends the episode, frees its state; ``{closed}``.
- ``POST /verify``: the episode so far, as a verdict: ``reward`` = the sum of its step rewards,
  ``terminated``, ``truncated``, ``steps``, ``info`` (of the last step). The response in the body
  is not read: the episode is the record of what the model did.
- tool ``act(action)``: one step with an action named directly (what a tool-calling model, or the
  conformance kit, sends); its answer is the step's.

Rules the base enforces, so that every environment gets them:

- ``step``, ``act`` and ``verify`` need an episode: a session never reset, closed, evicted or lost
  is a 409 ``session_expired`` (the rollout fails, typed), a forged cookie a 403, on ``reset`` too.
- An episode has at most ``max_episode_steps`` steps (the server option when its config has one,
  else the class attribute, default 100; :class:`Reset` may lower it for one episode): the step
  that reaches it is truncated, unless it terminated.
- A step on an episode that has ended plays nothing: it answers the last observation and info,
  reward 0, and the final ``terminated``/``truncated`` (this is grl_sokoban's behaviour, made
  everyone's).
- The episode's state is kept after it ends until the session is closed (or evicted by
  ``session_ttl_s``/``max_sessions``), so that ``verify`` can read it; the reference drops it at
  the end instead (then nothing could verify it).
"""

from __future__ import annotations

import inspect
import typing
from dataclasses import dataclass, field
from typing import Any, ClassVar

import msgspec
from litestar import Request
from litestar.handlers import HTTPRouteHandler

from gym_core.errors import SessionError, ToolError
from gym_core.schemas import (
    FunctionTool,
    LenientDecoder,
    Response,
    SeedSessionRequest,
    VerifyRequest,
    VerifyResponse,
    output_text,
)
from gym_core.servers import ResourcesServer, tool
from gym_core.sessions import Session

__all__ = [
    "GymnasiumEnvironment",
    "Reset",
    "Step",
    "Episode",
    "ResetResponse",
    "StepResponse",
    "EpisodeVerdict",
    "DEFAULT_MAX_EPISODE_STEPS",
]

DEFAULT_MAX_EPISODE_STEPS = 100


@dataclass
class Reset:
    """What :meth:`GymnasiumEnvironment.reset` returns: the episode's state (anything the
    environment keeps), the first observation shown to the model (None: nothing to show), an info
    dict, and optionally a step limit for this episode (never above the server's)."""

    state: Any
    observation: str | None = None
    info: dict[str, Any] = field(default_factory=dict)
    max_steps: int | None = None


@dataclass
class Step:
    """What :meth:`GymnasiumEnvironment.step` returns (Gymnasium's 5-tuple, named)."""

    observation: str | None
    reward: float = 0.0
    terminated: bool = False
    truncated: bool = False
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class Episode:
    """An episode in progress or ended: what a session of a Gymnasium-style environment holds."""

    state: Any
    observation: str | None
    info: dict[str, Any]
    max_steps: int
    steps: int = 0
    rewards: list[float] = field(default_factory=list)
    terminated: bool = False
    truncated: bool = False
    last_request_id: str | None = None
    last_answer: StepResponse | None = None

    @property
    def total_reward(self) -> float:
        return float(sum(self.rewards))

    @property
    def done(self) -> bool:
        return self.terminated or self.truncated


class ResetResponse(msgspec.Struct, kw_only=True):
    """``POST /reset``'s answer."""

    observation: str | None
    info: dict[str, Any]


class StepResponse(msgspec.Struct, kw_only=True):
    """``POST /step``'s answer (every field always present)."""

    observation: str | None
    reward: float
    terminated: bool
    truncated: bool
    info: dict[str, Any]


class StepRequest(msgspec.Struct, kw_only=True):
    """``POST /step``'s body as the base reads it: the task row's other fields are ignored."""

    response: Response
    step_request_id: str | None = msgspec.field(default=None, name="_ng_step_request_id")


class EpisodeVerdict(VerifyResponse, kw_only=True):
    """``POST /verify``'s answer: the episode's summed reward and how it ended (all fields present)."""

    terminated: bool
    truncated: bool
    steps: int
    info: dict[str, Any]


def _task_type(method: Any) -> type:
    """The annotation of ``reset``'s ``task`` parameter: the environment's row struct."""
    hint = typing.get_type_hints(method).get("task")
    return hint if isinstance(hint, type) and issubclass(hint, msgspec.Struct) else SeedSessionRequest


async def _maybe_await(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


class GymnasiumEnvironment(ResourcesServer):
    """A resources server whose sessions are episodes: ``/reset``, ``/step``, ``/close``, and a
    ``verify`` that reads the episode. See the module's docstring for the routes and rules.

    Subclass it, annotate ``reset``'s ``task`` with your row struct (a
    :class:`~gym_core.schemas.SeedSessionRequest` subclass), set ``reward_range`` to the range of
    an episode's summed reward, and ``actions`` when the action space is a few names.
    """

    # The canonical names of the actions (matched case-insensitively); empty: any text is an action.
    actions: ClassVar[tuple[str, ...]] = ()
    # The step limit of an episode when the server's config has no ``max_episode_steps`` option.
    max_episode_steps: ClassVar[int] = DEFAULT_MAX_EPISODE_STEPS

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        shadowing = sorted(set(self.tools) & {"reset", "step", "close"})
        if shadowing:  # a tool's alias route /<name> would shadow the episode's routes
            raise TypeError(f"{type(self).__name__}: tool name(s) {shadowing} are reserved for the episode's routes")
        self.step_limit = int(getattr(self.config, "max_episode_steps", None) or type(self).max_episode_steps)
        if self.step_limit < 1:
            raise ValueError(f"{type(self).__name__}: max_episode_steps must be at least 1, got {self.step_limit}")
        self._reset_decoder = LenientDecoder(_task_type(self.reset))
        self._step_decoder = LenientDecoder(StepRequest)

    # --- what an environment implements ---

    def reset(self, task: SeedSessionRequest) -> Reset:
        """A new episode for the task row ``task`` (may be ``async``)."""
        raise NotImplementedError(f"{type(self).__name__} must implement reset()")

    def step(self, state: Any, action: str) -> Step:
        """Apply ``action`` (a canonical name from :attr:`actions`, or the text
        :meth:`parse_action` made of the model's turn) to the episode's ``state`` (may be ``async``)."""
        raise NotImplementedError(f"{type(self).__name__} must implement step()")

    def parse_action(self, text: str, state: Any) -> str:
        """The action a model turn's text (OUTPUT_TEXT) means. Default: the text, stripped, when
        :attr:`actions` is empty, else the action it names (case-insensitive, exact); raise
        :class:`~gym_core.errors.ToolError` (a 4xx) for text that names none."""
        return self.canonical_action(text.strip())

    def close_episode(self, episode: Episode) -> None:
        """Release what an episode holds (called when its session is closed). Default: nothing."""

    # --- helpers ---

    def canonical_action(self, name: str) -> str:
        """``name`` as one of :attr:`actions` (case-insensitive), or a 400 naming the valid ones."""
        if not self.actions:
            return name
        for action in self.actions:
            if name.lower() == action.lower():
                return action
        raise ToolError(f"{self.name}: unknown action {name!r}; the actions are {', '.join(self.actions)}", 400)

    def episode(self, session: Session | Request) -> Episode:
        """The caller's episode, which must exist (else 409 ``session_expired``, 403 if forged)."""
        state = self.existing_session_state(session)
        if not isinstance(state, Episode):  # a session started by a route that is not ours
            raise SessionError(f"{self.name}: this session has no episode; POST /reset first")
        return state

    async def start_episode(self, session: Session, task: Any) -> Episode:
        self.refuse_forged(session)
        reset = await _maybe_await(self.reset(task))
        limit = self.step_limit if reset.max_steps is None else max(1, min(self.step_limit, int(reset.max_steps)))
        if session.exists and (previous := self.sessions.get(session.id)) is not None and isinstance(previous, Episode):
            self.close_episode(previous)
        episode = Episode(state=reset.state, observation=reset.observation, info=dict(reset.info), max_steps=limit)
        self.sessions.set(session.id, episode)
        return episode

    async def play(self, episode: Episode, action: str, request_id: str | None = None) -> StepResponse:
        """One step of ``episode`` with ``action``: the limit, the end and idempotency applied."""
        if request_id is not None and request_id == episode.last_request_id and episode.last_answer is not None:
            return episode.last_answer
        if episode.done:
            answer = StepResponse(
                observation=episode.observation,
                reward=0.0,
                terminated=episode.terminated,
                truncated=episode.truncated,
                info=episode.info,
            )
        else:
            result = await _maybe_await(self.step(episode.state, action))
            episode.steps += 1
            reward = float(result.reward)
            episode.rewards.append(reward)
            episode.terminated = bool(result.terminated)
            episode.truncated = bool(result.truncated) or (
                not episode.terminated and episode.steps >= episode.max_steps
            )
            episode.observation = result.observation
            episode.info = dict(result.info)
            answer = StepResponse(
                observation=result.observation,
                reward=reward,
                terminated=episode.terminated,
                truncated=episode.truncated,
                info=episode.info,
            )
        episode.last_request_id = request_id
        episode.last_answer = answer
        return answer

    def info_of_reset(self, episode: Episode) -> dict[str, Any]:
        return {**episode.info, "supports_explicit_close": True, "supports_step_idempotency": True}

    # --- the tool and the routes ---

    @tool
    async def act(
        self, session: Session, action: typing.Annotated[str, msgspec.Meta(description="the action to take")]
    ) -> StepResponse:
        """Take one action in the environment; returns the next observation, the step's reward and
        whether the episode ended."""
        episode = self.episode(session)
        return await self.play(episode, self.canonical_action(action.strip()))

    def tool_definitions(self) -> list[FunctionTool]:
        definitions = super().tool_definitions()
        if self.actions:
            for definition in definitions:
                if definition.name == "act" and definition.parameters is not None:
                    prop = definition.parameters["properties"]["action"]
                    definition.parameters["properties"]["action"] = {**prop, "enum": list(self.actions)}
        return definitions

    async def verify(self, session: Session, body: VerifyRequest) -> EpisodeVerdict:
        episode = self.episode(session)
        return EpisodeVerdict(
            reward=episode.total_reward,
            terminated=episode.terminated,
            truncated=episode.truncated,
            steps=episode.steps,
            info=episode.info,
        )

    def routes(self) -> list[Any]:
        async def reset(request: Request) -> Any:
            task = self._reset_decoder.decode(await request.body())
            episode = await self.start_episode(self.session(request), task)
            return ResetResponse(observation=episode.observation, info=self.info_of_reset(episode))

        async def step(request: Request) -> Any:
            body = self._step_decoder.decode(await request.body())
            episode = self.episode(request)
            if body.step_request_id is not None and body.step_request_id == episode.last_request_id:
                return await self.play(episode, "", body.step_request_id)
            action = (
                "" if episode.done else await _maybe_await(self.parse_action(output_text(body.response), episode.state))
            )
            return await self.play(episode, action, body.step_request_id)

        async def close(request: Request) -> Any:
            session = self.session(request)
            if not session.exists:
                return {"closed": False}
            episode = self.sessions.get(session.id)
            if isinstance(episode, Episode):
                self.close_episode(episode)
            return {"closed": self.sessions.close(session.id)}

        replaced = {"/seed_session", "/close_session"}
        inherited = [h for h in super().routes() if not (isinstance(h, HTTPRouteHandler) and set(h.paths) & replaced)]
        return [
            *inherited,
            self.post_json("/reset", reset),
            self.post_json("/seed_session", reset),
            self.post_json("/step", step),
            self.post_json("/close", close),
            self.post_json("/close_session", close),
        ]
