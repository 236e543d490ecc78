"""``mini_swe_agent``: the mini-swe-agent harness (from PyPI, unmodified) run as a gym rollout.

One rollout (``POST /run``):

1. ``POST /seed_session`` on the resources server with the task row;
2. the harness's own agent loop (``minisweagent.agents.default.DefaultAgent``, its templates from
   ``harness_config``) runs in a thread of its own, with the task's user text as its task, and
   - as its model, the harness's own litellm model class, pointed at the capturing proxy
     (:mod:`gym_mini_swe_agent.capture`) with a key of this rollout: each chat request goes to the
     gym model server with ``return_token_ids`` (as ``POST /v1/responses``, counted in the rollout
     record) and its prompt ids, generated ids and log-probs are recorded;
   - as its environment, :class:`GymEnvironment`: each command runs through the resources server's
     command tool in the session's sandbox, never on the host;
3. until the harness ends (its submit command, its step limit, repeated format errors), or
   ``harness_timeout_s`` passes (the rollout fails: ``harness_timeout``);
4. ``POST /verify`` with the task row and the trajectory; ``POST /close_session`` in any case.

A model server's failure fails the rollout with that failure's own type; an error of the harness
itself is ``harness_failed``; neither is ever a reward.
"""

from __future__ import annotations

import asyncio
import os
import platform
import tempfile
import threading
import time
from typing import Any

import msgspec

from gym_core import AgentServer, ServerCallError
from gym_core.errors import InfrastructureError
from gym_core.rollout import Rollout
from gym_core.schemas import FunctionCall, Message, Response, RunRequest, Usage, message_text, new_id

from gym_mini_swe_agent.capture import Call, Capture, CapturingProxy, chain, decode_json
from gym_mini_swe_agent.config import MiniSweAgentConfig

# Before the harness is imported: no banner on stdout, no global config (.env) of the host's user
# read, litellm's model table from the package (no download), and one attempt per model call: the
# proxy's failures are final (the gym client behind it already retried).
os.environ.setdefault("MSWEA_SILENT_STARTUP", "1")
os.environ.setdefault("MSWEA_GLOBAL_CONFIG_DIR", tempfile.mkdtemp(prefix="gym-mini-swe-agent-"))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ["MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT"] = "1"

import litellm  # noqa: E402
import yaml  # noqa: E402
from minisweagent.agents.default import DefaultAgent  # noqa: E402
from minisweagent.config import get_config_path  # noqa: E402
from minisweagent.environments.local import LocalEnvironment  # noqa: E402
from minisweagent.models.litellm_textbased_model import LitellmTextbasedModel  # noqa: E402

litellm.suppress_debug_info = True  # no "Provider List" banner on stdout when its cost table lacks the model

__all__ = ["GymEnvironment", "HarnessFailed", "HarnessTimeout", "MiniSweAgent"]


class HarnessFailed(InfrastructureError):
    """The harness raised (not a model or environment failure): the rollout has no verdict."""

    kind = "harness_failed"


class HarnessTimeout(InfrastructureError):
    """The harness did not finish within ``harness_timeout_s``."""

    status = 504
    kind = "harness_timeout"


class GymEnvironment(LocalEnvironment):
    """mini-swe-agent's environment protocol over a gym session: ``execute`` runs the command
    through the resources server's command tool (in its sandbox), from the harness's thread.
    Its submit check is the harness's own (``LocalEnvironment._check_finished``)."""

    def __init__(self, run_tool: Any, *, timeout_s: float):
        super().__init__(timeout=int(timeout_s))
        self._run_tool = run_tool
        self._timeout_s = timeout_s
        self.failure: BaseException | None = None

    def execute(self, action: dict, cwd: str = "", *, timeout: int | None = None) -> dict[str, Any]:
        command = action.get("command", "")
        try:
            answer = self._run_tool(command, self._timeout_s)
        except BaseException as exc:
            self.failure = self.failure or exc
            raise
        if isinstance(answer, dict) and "error" in answer:
            error = answer["error"]
            message = error.get("message", str(error)) if isinstance(error, dict) else str(error)
            output = {"output": "", "returncode": -1, "exception_info": message}
        elif isinstance(answer, dict):
            text = (answer.get("stdout") or "") + (answer.get("stderr") or "")
            output = {"output": text, "returncode": answer.get("exit_code", -1), "exception_info": ""}
            if answer.get("timed_out"):
                output["exception_info"] = "the command timed out"
        else:
            output = {"output": str(answer), "returncode": -1, "exception_info": "unexpected tool answer"}
        self._check_finished(output)
        return output

    def get_template_vars(self, **kwargs: Any) -> dict[str, Any]:
        # The harness's templates name the system; never the host's environment variables.
        uname = platform.uname()._asdict()
        return {**self.config.model_dump(), **uname, **kwargs}


def task_text(params: Any) -> str:
    """The task the harness gets: the text of the row's user messages."""
    if isinstance(params.input, str):
        return params.input
    return "\n\n".join(message_text(m) for m in params.input if isinstance(m, Message) and m.role == "user")


class MiniSweAgent(AgentServer):
    config: MiniSweAgentConfig

    async def startup(self) -> None:
        await super().startup()
        harness = yaml.safe_load(get_config_path(self.config.harness_config).read_text()) or {}
        self._agent_settings = dict(harness.get("agent") or {})
        self._model_settings = dict(harness.get("model") or {})
        self._proxy = CapturingProxy()

    async def shutdown(self) -> None:
        self._proxy.shutdown()
        await super().shutdown()

    async def run(self, body: RunRequest, task: dict[str, Any]) -> dict[str, Any]:
        async with self.rollout(task) as rollout:
            params = body.responses_create_params
            response, facts = await self._harness(params, rollout)
            verdict = await rollout.verify(params, response)
        return rollout.result(verdict, response, **facts)

    def _run_tool(self, rollout: Rollout, loop: asyncio.AbstractEventLoop, capture: Capture) -> Any:
        cfg = self.config

        def run_tool(command: str, timeout_s: float) -> Any:
            if capture.closed:
                raise HarnessTimeout("the rollout has ended")
            arguments = msgspec.json.encode({cfg.command_argument: command}).decode()
            call = FunctionCall(call_id=new_id("call"), name=cfg.command_tool, arguments=arguments)
            future = asyncio.run_coroutine_threadsafe(rollout.call_tool(call), loop)
            result = future.result(timeout=timeout_s)
            output = result.output if isinstance(result.output, str) else msgspec.json.encode(result.output).decode()
            return decode_json(output)

        return run_tool

    async def _harness(self, params: Any, rollout: Rollout) -> tuple[Response, dict[str, Any]]:
        cfg = self.config
        rollout.offered = frozenset({cfg.command_tool})  # the harness's commands, never named by the model
        loop = asyncio.get_running_loop()
        capture = Capture(forward=rollout.call_model, base=params, loop=loop, call_timeout_s=cfg.call_timeout_s)
        key = self._proxy.open(capture)
        environment = GymEnvironment(self._run_tool(rollout, loop, capture), timeout_s=cfg.call_timeout_s)
        model_settings = {
            **self._model_settings,
            "model_name": "openai/" + (params.model or cfg.model_server),
            "model_kwargs": {
                **(self._model_settings.get("model_kwargs") or {}),
                "api_base": self._proxy.base_url,
                "api_key": key,
                "timeout": cfg.call_timeout_s,
            },
            "cost_tracking": "ignore_errors",
        }
        agent_settings = {**self._agent_settings, "step_limit": cfg.step_limit, "cost_limit": 0.0, "output_path": None}
        model = LitellmTextbasedModel(**model_settings)
        agent = DefaultAgent(model, environment, **agent_settings)
        done: asyncio.Future[dict[str, Any]] = loop.create_future()

        def settle(outcome: Any, error: BaseException | None) -> None:
            try:
                loop.call_soon_threadsafe(_settle, done, outcome, error)
            except RuntimeError:  # the loop is closed: the server stopped while a harness past its deadline ran on
                pass

        def work() -> None:
            try:
                outcome: Any = agent.run(task_text(params))
            except BaseException as exc:  # noqa: BLE001 - handed to the event loop as it is
                settle(None, exc)
            else:
                settle(outcome, None)

        started = time.monotonic()
        threading.Thread(target=work, name="gym-mini-swe-agent", daemon=True).start()
        try:
            outcome = await asyncio.wait_for(asyncio.shield(done), cfg.harness_timeout_s)
        except TimeoutError:
            done.add_done_callback(_retrieve)  # what the thread ends with later is nobody's to log
            raise HarnessTimeout(f"the harness did not finish within {cfg.harness_timeout_s} s") from None
        except BaseException as exc:
            failure = capture.failure or environment.failure
            if failure is not None:  # the model server or the environment failed: that type, not the harness's
                raise failure from None
            raise HarnessFailed(f"the harness raised {type(exc).__name__}: {exc}") from None
        finally:
            self._proxy.close(key)
        elapsed = time.monotonic() - started
        if capture.failure is not None:
            raise capture.failure
        if environment.failure is not None:
            raise environment.failure
        calls = list(capture.calls)
        if cfg.require_token_ids:
            for index, call in enumerate(calls):
                if call.generation_token_ids is None:
                    raise ServerCallError(
                        cfg.model_server,
                        "/v1/responses",
                        f"model call {index + 1} returned no token ids (prompt_token_ids, generation_token_ids "
                        "and generation_log_probs): the model server must support return_token_ids, or set "
                        "require_token_ids: false",
                    )
        response = _response(agent.messages, calls)
        trajectory = chain(calls)
        facts = {
            "exit_status": outcome.get("exit_status", ""),
            "submitted": outcome.get("exit_status") == "Submitted",
            "steps": agent.n_calls,
            "harness": {"name": "mini-swe-agent", "version": _version(), "seconds": round(elapsed, 3)},
            "calls": [call.fields() for call in calls],
            "trajectory": {k: trajectory[k] for k in ("token_ids", "loss_mask", "log_probs", "segments")},
            "turns": trajectory["turns"],
            "token_drift": trajectory["token_drift"],
        }
        return response, facts


def _settle(done: asyncio.Future[Any], outcome: Any, error: BaseException | None) -> None:
    if done.done():
        return
    if error is not None:
        done.set_exception(error)
    else:
        done.set_result(outcome)


def _retrieve(done: asyncio.Future[Any]) -> None:
    if not done.cancelled():
        done.exception()


def _version() -> str:
    from minisweagent import __version__

    return __version__


def _response(messages: list[dict[str, Any]], calls: list[Call]) -> Response:
    """The trajectory as gym rows hold it: after the harness's system and task messages, each model
    call's output items as the model server returned them (token fields kept), and each observation
    or format reminder as a user message."""
    output: list[Any] = []
    pending = iter(calls)
    usage = Usage()
    for message in messages[2:]:
        role = message.get("role")
        if (message.get("extra") or {}).get("interrupt_type") == "FormatError":
            # The reply that broke the format is not among the harness's messages, only the reminder.
            role = "assistant-then-user"
        if role == "assistant-then-user":
            call = next(pending, None)
            if call is not None:
                output.extend(call.response.output)
                if call.response.usage is not None:
                    usage = usage + call.response.usage
            output.append(Message(role="user", content=str(message.get("content") or "")))
        elif role == "assistant":
            call = next(pending, None)
            if call is not None:
                output.extend(call.response.output)
                if call.response.usage is not None:
                    usage = usage + call.response.usage
                continue
            output.append(Message(role="assistant", content=str(message.get("content") or "")))
        elif role in ("user", "system"):
            output.append(Message(role="user", content=str(message.get("content") or "")))
    last = calls[-1].response if calls else Response(output=[])
    return msgspec.structs.replace(last, output=output, usage=usage)
