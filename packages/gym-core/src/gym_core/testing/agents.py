"""The conformance kit for agents: ``POST /run`` on the example rows, and the rollout contract
checked against a probe environment and a probe model."""

from __future__ import annotations

import contextlib
import typing
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import pytest

from gym_core.config import free_port
from gym_core.options import ref_of
from gym_core.plugins import PluginManager
from gym_core.schemas import FunctionCallOutput
from gym_core.testing import probe
from gym_core.testing.kit import NOT_AN_OBJECT, NOT_JSON, RunningServers, ServerTests, reward_range_of
from gym_core.testing.rows import read_rows
from gym_core.testing.running import assert_ok, plugin_manager, start_servers

_CONTRACT_HINT = (
    "To fix: do the rollout inside `async with self.rollout(task) as rollout:` (gym_core.rollout.Rollout), "
    "which seeds, calls only offered tools, verifies and closes the session whether the rollout failed or not."
)


class AgentServerTests(ServerTests):
    """The contract of an agent: ``POST /run`` on task rows returns a reward in range and the response.

    Class attributes, besides those of :class:`ServerTests`:

    - ``model``: the options of the policy model instance (default: the scripted model);
    - ``environment``: the options of the resources server instance (required unless ``instances``);
    - ``example_data``: the task rows to run (a JSONL path, or a list of rows), usually the
      environment's own ``data/example.jsonl``.

    With ``server_type``, the config is ``policy`` (``model``), ``environment`` (``environment``) and
    the agent, named after its server type, with ``model_server: policy``,
    ``resources_server: environment`` and ``options``.

    Hooks: :meth:`run_body` (the ``/run`` body of a row, default the row),
    :meth:`expected_reward` (the reward a row must get, default any in range) and
    :meth:`environment_reward_range` (default: that of the agent's ``resources_server``).

    The rollout contract is checked against probe servers (:mod:`gym_core.testing.probe`): the
    agent under test, its model and resources options pointed at a probe model (which calls
    ``seed_session``, ``verify``, ``close_session`` and a tool nobody offered) and a probe
    environment (which records every request, and fails ``/verify`` and ``/step`` on request).
    ``probe_options`` are set on the agent there (``{"require_token_ids": False}``, say); override
    :meth:`probe_config` when the agent reaches its model by other means than a model option, and
    :meth:`probe_body` when it needs more than a plain prompt in the row.
    """

    kind = "agent"
    model: ClassVar[Mapping[str, Any]] = {"plugin": "scripted"}
    environment: ClassVar[Mapping[str, Any] | None] = None
    example_data: ClassVar[str | Path | Sequence[Mapping[str, Any]] | None] = None
    probe_options: ClassVar[Mapping[str, Any]] = {}

    @classmethod
    def instances_config(cls) -> dict[str, Any]:
        if cls.instances is not None or cls.server_type is None:
            return super().instances_config()
        if cls.environment is None:
            raise TypeError(f"{cls.__name__}: set environment (the resources server's options) or instances")
        agent = {"plugin": cls.server_type, "model_server": "policy", "resources_server": "environment", **cls.options}
        return {"policy": dict(cls.model), "environment": dict(cls.environment), cls.server_type: agent}

    def run_body(self, row: Mapping[str, Any]) -> dict[str, Any]:
        """The ``POST /run`` body for ``row`` (to add a scripted model's turns to its metadata, say)."""
        return dict(row)

    def expected_reward(self, row: Mapping[str, Any]) -> float | None:
        """The reward the rollout of ``row`` must get (None: any in the environment's ``reward_range``)."""
        return None

    def environment_reward_range(self, servers: RunningServers) -> tuple[float, float]:
        """The ``reward_range`` of the environment the agent plays: its ``resources_server`` option,
        or else the only resources server of the config."""
        named = getattr(servers.server.config, "resources_server", None)
        if named in servers.servers:
            return reward_range_of(servers.servers[named])
        environments = [server for server in servers.servers.values() if server.kind == "resources"]
        assert len(environments) == 1, (
            "override environment_reward_range(): which resources server does the agent play?"
        )
        return reward_range_of(environments[0])

    def test_run_on_the_example_data(self, gym_servers: RunningServers) -> None:
        """``POST /run`` on each example row returns a ``reward`` in the environment's range and the
        ``response`` (a Responses API object with the rollout's output items).

        To fix: in ``run()``, seed the session, call the model (and tools), then ``/verify`` on the
        resources server with the task and the response, and return the verdict's fields with
        ``response`` next to them.
        """
        low, high = self.environment_reward_range(gym_servers)
        rows = read_rows(self.example_data) if self.example_data is not None else []
        assert rows, f"{type(self).__name__}.example_data is not set: point it at the environment's example tasks"
        environments = {id(s): s for s in gym_servers.servers.values() if s.kind == "resources"}.values()
        held = {env.name: len(env.sessions) for env in environments}
        for index, row in enumerate(rows):
            what = f"example row {index}"
            result = assert_ok(gym_servers.caller().post("/run", self.run_body(row)), f"{what}: POST /run")
            reward = result.get("reward") if isinstance(result, dict) else None
            assert isinstance(reward, (int, float)) and not isinstance(reward, bool), (
                f"{what}: no numeric reward in {result}"
            )
            assert low <= reward <= high, f"{what}: reward {reward} is outside the environment's range ({low}, {high})"
            response = result.get("response")
            assert isinstance(response, dict) and isinstance(response.get("output"), list), (
                f"{what}: no response in {result}"
            )
            expected = self.expected_reward(row)
            if expected is not None:
                assert reward == expected, f"{what}: reward {reward}, expected {expected}: {result}"
        left = {
            env.name: len(env.sessions) - held[env.name] for env in environments if len(env.sessions) > held[env.name]
        }
        assert not left, f"sessions left open on the environment after the example rows: {left}. {_CONTRACT_HINT}"

    # --- the rollout contract, on probe servers ---

    @classmethod
    def probe_plugin_manager(cls) -> PluginManager:
        """This class's plugins (or the installed ones) and the probe servers."""
        manager = plugin_manager(*cls.plugins) if cls.plugins else PluginManager()
        manager.register(probe.plugin, name="gym_kit_probe")
        return manager

    @classmethod
    def agent_under_test(cls, config: Mapping[str, Any], manager: PluginManager) -> str:
        """The instance name of the agent under test in ``config``."""
        if cls.instance is not None:
            return cls.instance
        if cls.instances is None and cls.server_type is not None and cls.server_type in config:
            return cls.server_type
        types = manager.servers()
        agents = [
            name
            for name, options in config.items()
            if isinstance(options, Mapping) and getattr(types.get(options.get("plugin", "")), "kind", None) == "agent"
        ]
        if len(agents) != 1:
            raise TypeError(f"{cls.__name__}: set instance to the name of the agent under test (found {agents})")
        return agents[0]

    @classmethod
    def probe_config(cls) -> dict[str, Any]:
        """The config of the contract tests: the agent under test, every model and resources option
        of it pointed at the probe model and the probe environment (``probe_options`` set on it),
        and the instances its other options name."""
        config = cls.instances_config()
        manager = cls.probe_plugin_manager()
        agent = cls.agent_under_test(config, manager)
        options = dict(config[agent])
        server_type = manager.servers()[options["plugin"]]
        for name, hint in typing.get_type_hints(server_type.config, include_extras=True).items():
            ref = ref_of(hint)
            if ref is not None and options.get(name) is not None and ref.kind in ("model", "resources"):
                options[name] = "probe_model" if ref.kind == "model" else "probe_environment"
        options.update(cls.probe_options)
        probed: dict[str, Any] = {
            "probe_environment": {"plugin": probe.PROBE_ENVIRONMENT},
            # A fixed port, for an agent that reaches its model by URL (see probe_config's overrides).
            "probe_model": {"plugin": probe.PROBE_MODEL, "port": free_port()},
            agent: options,
        }
        named = [
            value for value in options.values() if isinstance(value, str) and value in config and value not in probed
        ]
        while named:
            name = named.pop()
            probed[name] = dict(config[name])
            named += [v for v in probed[name].values() if isinstance(v, str) and v in config and v not in probed]
        return probed

    def probe_body(self, **fields: Any) -> dict[str, Any]:
        """The ``/run`` body of the contract tests: a plain prompt, no tools named (the agent offers
        the environment's own, ``echo``, if it offers any), and ``fields``."""
        return {"responses_create_params": {"input": "Probe the rollout contract."}, **fields}

    @pytest.fixture(scope="class")
    @classmethod
    def agent_probe(cls) -> Iterator[RunningServers]:
        """The agent under test with the probe model and the probe environment, running."""
        with cls.probe_running() as servers:
            yield servers

    @classmethod
    @contextlib.contextmanager
    def probe_running(cls) -> Iterator[RunningServers]:
        from gym_core.auth import new_token

        manager = cls.probe_plugin_manager()
        config = cls.probe_config()
        agent = cls.agent_under_test(config, manager)
        with start_servers({"auth_token": new_token(), **config}, manager) as (global_config, servers):
            yield RunningServers(global_config, servers, agent, cls.request_timeout_s)

    @staticmethod
    def _probes(servers: RunningServers) -> tuple[probe.ProbeEnvironment, probe.ProbeModel]:
        environment, model = servers.servers["probe_environment"], servers.servers["probe_model"]
        assert isinstance(environment, probe.ProbeEnvironment) and isinstance(model, probe.ProbeModel)
        return environment, model

    def test_the_rollout_closes_its_session(self, agent_probe: RunningServers) -> None:
        """A rollout leaves no session on the environment: ``/run`` against the probe environment
        returns a reward, and the environment holds no state afterwards.

        To fix: do the rollout inside ``async with self.rollout(task) as rollout:``
        (:class:`gym_core.rollout.Rollout`), which closes the session whether the rollout failed or not.
        """
        environment, _ = self._probes(agent_probe)
        environment.take_requests()
        held = len(environment.sessions)
        result = assert_ok(
            agent_probe.caller().post("/run", self.probe_body()), "POST /run against the probe environment"
        )
        reward = result.get("reward") if isinstance(result, dict) else None
        assert isinstance(reward, (int, float)) and not isinstance(reward, bool), f"no numeric reward in {result}"
        paths = [r.path for r in environment.take_requests()]
        left = len(environment.sessions) - held
        assert left <= 0, (
            f"the rollout left {left} session(s) open on the environment (its requests: {paths}). " + _CONTRACT_HINT
        )

    def test_the_model_reaches_only_the_tools_offered(self, agent_probe: RunningServers) -> None:
        """A model calling ``seed_session``, ``verify``, ``close_session`` or a tool nobody offered
        gets an "unknown tool" output (or, for an agent that executes no calls, nothing), and the
        environment never receives those calls.

        To fix: execute a model's function call only through ``rollout.call_tool`` (or
        ``AgentServer.call_tool``), which calls offered tools only, at ``/tools/<name>``.
        """
        environment, model = self._probes(agent_probe)
        environment.take_requests()
        model.requests.clear()
        held = len(environment.sessions)
        assert_ok(agent_probe.caller().post("/run", self.probe_body()), "POST /run against the probe model")
        requests = environment.take_requests()
        assert model.requests, (
            "the agent never asked the probe model: override probe_config() so that the agent's "
            "model is the probe_model instance"
        )
        forwarded = [f"POST {r.path}" for r in requests if r.marked_arguments() or probe.UNOFFERED_TOOL in r.path]
        assert not forwarded, f"the model's calls reached the environment: {forwarded}"
        seeds = [r.path for r in requests if r.path in ("/seed_session", "/reset")]
        assert len(seeds) <= 1, f"one rollout seeded the environment {len(seeds)} times: {seeds}"
        denied = {f"probe_{name}" for name in (*probe.CONTROL_ROUTES, probe.UNOFFERED_TOOL)}
        for params in model.requests:
            for item in [] if isinstance(params.input, str) else params.input:
                if isinstance(item, FunctionCallOutput) and item.call_id in denied:
                    text = item.output if isinstance(item.output, str) else str(item.output)
                    assert "unknown tool" in text, f"the output of the model's {item.call_id[6:]!r} call: {text!r}"
        left = len(environment.sessions) - held
        assert left <= 0, f"the rollout left {left} session(s) open. " + _CONTRACT_HINT

    def test_a_failing_environment_fails_the_run(self, agent_probe: RunningServers) -> None:
        """When the environment answers 5xx (here: its ``/verify`` or ``/step``), ``/run`` fails with a
        typed error (a 5xx JSON error naming its ``type``: the collector runs the rollout again),
        never a reward, and the session is closed all the same.

        To fix: let the error that ``rollout.verify`` (or ``ServerClient.request``) raises propagate;
        never turn a failed call into a reward.
        """
        environment, _ = self._probes(agent_probe)
        held = len(environment.sessions)
        reply = agent_probe.caller().post("/run", self.probe_body(probe_fail=True))
        body = reply.json() if reply.body else None
        assert reply.status >= 500, (
            f"POST /run answered {reply.status} while the environment failed: {reply.text[:300]}"
        )
        assert isinstance(body, dict) and "reward" not in body, f"a failed rollout carries a reward: {body}"
        error = body.get("error")
        assert isinstance(error, dict) and isinstance(error.get("type"), str), f"no typed error in {body}"
        left = len(environment.sessions) - held
        assert left <= 0, f"the failed rollout left {left} session(s) open. " + _CONTRACT_HINT

    def malformed_bodies(self, servers: RunningServers) -> dict[str, list[bytes]]:
        return {
            "/run": [NOT_JSON, NOT_AN_OBJECT, b"{}", b'{"responses_create_params": 5}'],
            "/v1/responses": [NOT_JSON, NOT_AN_OBJECT, b'{"input": 5}'],
        }
